import CLinux

/// The process's own memory, as a small board sees it.
public enum ProcessMemory {
    /// Gives back the program's pages that start-up touched and the steady state does not use
    /// (argument parsing, the config file, setting up the devices; the type metadata the Swift
    /// runtime read), drops the file's pages nobody maps from the page cache, and asks the kernel
    /// for single pages from then on: without it, the kernel maps 64 KiB around every fault
    /// (fault-around) and a few hundred scattered functions keep megabytes resident
    /// (Docs/PERFORMANCE.md, Footprint). Clean file pages: nothing is written, a page still needed
    /// comes back on its next use. Returns the bytes advised (0 where the kernel refuses).
    @discardableResult
    public static func releaseStartupCode() -> Int { Int(clinux_release_startup_code()) }
}
