import CLinux

/// The process's own memory, as a small board sees it.
public enum ProcessMemory {
    /// What `releaseStartupCode` did: bytes unmapped or paged out, and bytes of them that fault
    /// back a single page at a time.
    public struct Release: Sendable, Equatable {
        public var advised: Int
        public var singlePageFaults: Int
    }

    /// Gives back the pages that start-up touched and the steady state does not use (argument
    /// parsing, the config file, setting up the devices; the type metadata the Swift runtime read):
    /// the code and read-only data of the program and its shared libraries are unmapped from this
    /// process (other processes keep theirs), the program's data segment is paged out where clean,
    /// and the program's file leaves the page cache where nothing maps it. From then on a fault
    /// maps the single page it needs where the kernel allows (Linux 6.7+); without that, the
    /// kernel maps 64 KiB around every fault (fault-around) and a few hundred scattered functions
    /// keep megabytes resident (Docs/PERFORMANCE.md, Footprint). Only clean file pages go: nothing
    /// is written, a page still needed comes back on its next use.
    @discardableResult
    public static func releaseStartupCode() -> Release {
        var singlePage: UInt64 = 0
        let advised = clinux_release_startup_code(&singlePage)
        return Release(advised: Int(advised), singlePageFaults: Int(singlePage))
    }
}
