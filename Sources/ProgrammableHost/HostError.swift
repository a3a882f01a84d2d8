/// Why the programmable host refused a request: a stable `code` a program acts on (the words of
/// Docs/CONTROL.md, "The programmable host") and a sentence for a person. Nothing changed.
public struct HostError: Error, Equatable, Sendable, CustomStringConvertible {
    public enum Code: String, Equatable, Sendable, CaseIterable {
        /// The controller is not up (yet, or any more), or a reset is under way.
        case notReady = "not-ready"
        /// Something of the same kind is under way (a connection attempt).
        case busy
        /// A link to that peer is open already.
        case alreadyConnected = "already-connected"
        case unknownLink = "unknown-link"
        case unknownScan = "unknown-scan"
        case unknownAdvertisement = "unknown-advertisement"
        case unknownPairing = "unknown-pairing"
        /// No such channel is open, or no such SPSM is listened on.
        case unknownChannel = "unknown-channel"
        /// A bounded table is full.
        case noRoom = "no-room"
    }

    /// nil: a refusal a program does not act on by kind (a value the controller cannot take).
    public var code: Code?
    public var message: String

    public init(_ code: Code?, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { message }
}
