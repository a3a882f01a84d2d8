#if canImport(Glibc)
import Glibc
#endif

/// How many devices one `blemu run` takes (Docs/REFERENCE.md, "Limits"), and the file
/// descriptors they need, checked before anything is opened: a process that would run out of
/// descriptors halfway through starting its devices fails with EMFILE somewhere unhelpful.
public enum ProcessLimits {
    /// Devices of one process, from the command line and `--config` together. Each has its
    /// own advertising set, links and timers; more is a fleet, for several processes.
    public static let maximumDevices = 64
    /// Descriptors blemu holds besides its controllers: stdin, stdout, stderr, epoll, the timerfd,
    /// the signalfd, the journal's socket, the capture, the control socket and its 16 clients,
    /// and a state file being read or written, with room to spare.
    public static let baseDescriptors = 40
    /// Each controller connection (TCP, Unix socket, serial port or HCI user channel) is one;
    /// a device may have its own controller.
    public static let descriptorsPerDevice = 1

    public static let deviceLimitAdvice = "one blemu runs at most \(maximumDevices) devices (run several processes for more)"

    /// Descriptors `devices` devices need at most.
    public static func descriptorsNeeded(devices: Int) -> Int {
        baseDescriptors + devices * descriptorsPerDevice
    }

    /// Why `devices` devices cannot run in this process, or nil. Raises the soft RLIMIT_NOFILE
    /// towards the hard one when that is what it takes.
    public static func check(devices: Int) -> String? {
        guard devices <= maximumDevices else { return "\(devices) devices: \(deviceLimitAdvice)" }
        #if canImport(Glibc)
        let needed = descriptorsNeeded(devices: devices)
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return nil }
        return check(needed: needed, soft: UInt64(limit.rlim_cur), hard: UInt64(limit.rlim_max), devices: devices) { raised in
            var wanted = limit
            wanted.rlim_cur = rlim_t(raised)
            return setrlimit(Int32(RLIMIT_NOFILE.rawValue), &wanted) == 0
        }
        #else
        return nil
        #endif
    }

    /// The decision, apart from the system calls: enough below the soft limit, or raise it
    /// (`raise`, to `needed`) when the hard limit allows, or refuse.
    public static func check(needed: Int, soft: UInt64, hard: UInt64, devices: Int, raise: (UInt64) -> Bool) -> String? {
        if UInt64(needed) <= soft { return nil }
        if UInt64(needed) <= hard, raise(UInt64(needed)) { return nil }
        return "\(devices) devices need up to \(needed) file descriptors and the limit (RLIMIT_NOFILE, `ulimit -n`) is \(soft) (hard \(hard)): raise it, or run fewer devices"
    }
}
