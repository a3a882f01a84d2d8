/// The ATT_MTU of one ATT bearer. Vol 3, Part F, 3.2.8: "ATT_MTU is defined as the maximum size
/// of any packet sent between a client and a server", and 3.4.2.2: after an MTU exchange "the
/// server and client shall set ATT_MTU to the minimum of the Client Rx MTU and the Server Rx
/// MTU". So a link that is both a client and a server (a central reading a peripheral's
/// database while serving its own GAP/GATT) has one ATT_MTU, whichever side exchanged it: the
/// client and the server of the bearer share this one holder.
public final class ATTBearerMTU {
    /// The LE default before any exchange (Vol 3, Part G, 5.2.1).
    public static let leDefault = 23

    /// Read on every PDU: no dynamic exclusivity check (one thread, and never passed inout).
    @exclusivity(unchecked) public var value: Int

    public init(_ value: Int = ATTBearerMTU.leDefault) {
        self.value = value
    }
}
