import BlemuCore

/// Why a stack could not start or stopped running: one line, which a front end prints (the
/// CLI as `Error: <reason>`, exit status 1).
public struct StackFailure: Error, CustomStringConvertible {
    public let description: String
    /// The reason may quote a peer (a name, a value): shown with `VisibleText`, one line.
    public init(_ description: String) { self.description = description.visible }
}

/// A plan that cannot be run as given (an unknown device, a refused initial value, a missing
/// controller): the front end's usage error (the CLI's exit status 64), found before anything
/// is opened or written.
public struct PlanError: Error, CustomStringConvertible {
    public let message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}
