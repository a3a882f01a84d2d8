#if canImport(Glibc)
import Glibc
#endif

/// Whether blemu was started by systemd, so `--log auto` writes to the journal.
public enum JournalDetection {
    /// The device and inode of a file descriptor, as fstat(2) gives them.
    public struct StreamIdentity: Equatable, Sendable {
        public var device: UInt64
        public var inode: UInt64
        public init(device: UInt64, inode: UInt64) {
            self.device = device
            self.inode = inode
        }
    }

    /// systemd.exec(5): JOURNAL_STREAM holds "the device and inode numbers of the file descriptor
    /// [of stdout or stderr connected to the journal], formatted in decimal and separated by a
    /// colon"; a process should compare it with its stderr's, since the variable is inherited
    /// by children whose stderr went elsewhere. INVOCATION_ID is set for every process a unit
    /// starts (systemd.exec(5), "Environment Variables Set or Propagated by the Service Manager").
    public static func startedBySystemd(environment: (String) -> String?, stderr: StreamIdentity?) -> Bool {
        if let invocation = environment("INVOCATION_ID"), !invocation.isEmpty { return true }
        guard let stream = environment("JOURNAL_STREAM"), let stderr,
              let identity = parseJournalStream(stream) else { return false }
        return identity == stderr
    }

    /// `device:inode`, both decimal.
    public static func parseJournalStream(_ text: String) -> StreamIdentity? {
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 2, let device = UInt64(parts[0]), let inode = UInt64(parts[1]) else { return nil }
        return StreamIdentity(device: device, inode: inode)
    }

    /// This process's stderr, or nil when it is closed.
    public static func stderrIdentity() -> StreamIdentity? {
        var status = stat()
        guard fstat(2, &status) == 0 else { return nil }
        return StreamIdentity(device: UInt64(status.st_dev), inode: UInt64(status.st_ino))
    }

    public static func processEnvironment(_ name: String) -> String? {
        getenv(name).map { String(cString: $0) }
    }
}
