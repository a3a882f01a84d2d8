import BlemuATT
import BlemuCore

/// What a watcher hears of a server's requests, one call per request: nothing of it is needed
/// to answer, so it is told only while installed in the server's `ATTServerWatch` (the control
/// socket's `watch`, a scenario, the journal's write lines), and never otherwise.
public protocol ATTServerObserver: AnyObject {
    /// A request answered, with the error when the answer was an Error Response (a command that
    /// failed, which has no response, too).
    func attServer(_ server: ATTServer, answered opcode: UInt8, handle: UInt16, error: ATTError?)
    /// A characteristic's value read (a Read, Read Blob, Read Multiple or Read by Type of its value).
    func attServer(_ server: ATTServer, read characteristic: Characteristic, offset: Int)
    /// A value the device's `onWrite` took, with its bytes (borrowed: copy what is kept).
    /// `prepared`: applied by an Execute Write.
    func attServer(_ server: ATTServer, wrote characteristic: Characteristic, request: WriteRequest, prepared: Bool)
}

/// What an observer that wants only some of the calls need not implement.
extension ATTServerObserver {
    public func attServer(_ server: ATTServer, answered opcode: UInt8, handle: UInt16, error: ATTError?) {}
    public func attServer(_ server: ATTServer, read characteristic: Characteristic, offset: Int) {}
    public func attServer(_ server: ATTServer, wrote characteristic: Characteristic, request: WriteRequest, prepared: Bool) {}
}

/// Who watches the requests of a set of servers (a device's: every bearer of every link), held
/// once and read in place by each server, so a watcher installed or removed reaches every server
/// at once, those made later too. With nobody installed a request costs the servers one check
/// of a flag per kind and calls nothing (swift-nio's handlers added and removed at run time).
public final class ATTServerWatch {
    /// The watcher; nil while nobody watches. Weak: the servers it watches never keep it.
    public private(set) weak var observer: ATTServerObserver?
    /// Whether the observer hears each request answered, each value read, each value written.
    /// Changed only as watchers come and go, never while a request reads them: no run-time
    /// exclusivity check on the request path.
    @exclusivity(unchecked) public private(set) var reportsAnswers = false
    @exclusivity(unchecked) public private(set) var reportsReads = false
    @exclusivity(unchecked) public private(set) var reportsWrites = false

    public init() {}

    /// `observer` hears what the flags ask for from now on, in place of any observer before.
    public func install(_ observer: ATTServerObserver, answers: Bool = true, reads: Bool = true, writes: Bool = true) {
        self.observer = observer
        reportsAnswers = answers
        reportsReads = reads
        reportsWrites = writes
    }

    /// Nobody watches any more: the servers call nothing per request.
    public func remove() {
        observer = nil
        reportsAnswers = false
        reportsReads = false
        reportsWrites = false
    }

    /// Whether anyone hears anything.
    public var isWatched: Bool { reportsAnswers || reportsReads || reportsWrites }
}
