import BlemuCore

#if canImport(Glibc)
import Glibc
#endif

/// How many devices one `blemu run` takes (Docs/REFERENCE.md, "Devices per process"): a budget
/// of memory and file descriptors, checked before anything is opened (a process that would run
/// out of descriptors halfway through starting its devices fails with EMFILE somewhere
/// unhelpful; one that runs out of memory is killed), under a fixed ceiling.
public enum ProcessLimits {
    /// Devices of one process, from the command line and `--config` together, whatever the
    /// budget: past it a fleet is for several processes (and no controller has that many sets).
    public static let hardCeiling = 10_000
    public static let ceilingAdvice = "one blemu runs at most \(hardCeiling) devices (run several processes for more)"

    /// Descriptors blemu holds besides its controllers: stdin, stdout, stderr, epoll, the timerfd,
    /// the signalfd, the journal's socket, the capture, the control socket and its 16 clients,
    /// and a state file being read or written, with room to spare.
    public static let baseDescriptors = 40
    /// Each controller connection (TCP, Unix socket, serial port or HCI user channel) is one;
    /// counted one per device (a device may have its own controller; sharing one is not known here).
    public static let descriptorsPerDevice = 1

    /// Estimated resident memory, from Docs/PERFORMANCE.md ("Footprint"): a broadcaster added
    /// 25.0 KiB (debug, `ibeacon`, 1 → 64 devices, its controller connection included); a
    /// heart-rate device 37–38.6 KiB (release and board builds, 1 → 100 devices), and each link a
    /// central opens on it 2.5–3.6 KiB more. Rounded up with room for a few links: 32 and 64 KiB.
    public static let bytesPerBroadcaster: UInt64 = 32 * 1024
    public static let bytesPerConnectableDevice: UInt64 = 64 * 1024
    /// The process itself: the board build's peak at start-up (VmHWM) is 6.1–7.0 MB and it settles
    /// near 2 MB; a dynamically linked build's larger RSS is mostly the shared libraries' pages,
    /// which the page cache holds anyway. Rounded up, and small enough that one device on a board
    /// with a few tens of megabytes free is never refused.
    public static let baseBytes: UInt64 = 8 * 1024 * 1024
    /// The share of the machine's available memory (MemAvailable) one blemu may plan to use:
    /// half, leaving the rest to the controller (rootcanal's own state grows with the devices)
    /// and the rest of the machine.
    public static let memoryShare: UInt64 = 2

    /// What a run asks for.
    public struct Demand: Sendable, Equatable {
        public var broadcasters: Int
        public var connectableDevices: Int
        public var devices: Int { broadcasters + connectableDevices }

        public init(broadcasters: Int, connectableDevices: Int) {
            self.broadcasters = broadcasters
            self.connectableDevices = connectableDevices
        }

        /// Estimated resident bytes (`bytesPerBroadcaster`, `bytesPerConnectableDevice`, `baseBytes`).
        public var estimatedBytes: UInt64 {
            ProcessLimits.baseBytes + UInt64(broadcasters) * ProcessLimits.bytesPerBroadcaster
                + UInt64(connectableDevices) * ProcessLimits.bytesPerConnectableDevice
        }
    }

    /// Descriptors `devices` devices need at most.
    public static func descriptorsNeeded(devices: Int) -> Int {
        baseDescriptors + devices * descriptorsPerDevice
    }

    /// Why `demand` cannot run in this process, or nil: the ceiling, the memory budget (half of
    /// MemAvailable, when /proc/meminfo tells it) and the descriptors. Raises the soft
    /// RLIMIT_NOFILE towards the hard one when that is what it takes.
    public static func check(_ demand: Demand) -> String? {
        if let problem = check(demand, availableBytes: availableMemory()) { return problem }
        #if canImport(Glibc)
        let needed = descriptorsNeeded(devices: demand.devices)
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return nil }
        return check(needed: needed, soft: UInt64(limit.rlim_cur), hard: UInt64(limit.rlim_max), devices: demand.devices) { raised in
            var wanted = limit
            wanted.rlim_cur = rlim_t(raised)
            return setrlimit(Int32(RLIMIT_NOFILE.rawValue), &wanted) == 0
        }
        #else
        return nil
        #endif
    }

    /// The ceiling and the memory budget, apart from reading the machine: `availableBytes` is
    /// MemAvailable (nil: unknown, only the ceiling holds).
    public static func check(_ demand: Demand, availableBytes: UInt64?) -> String? {
        guard demand.devices <= hardCeiling else { return "\(demand.devices) devices: \(ceilingAdvice)" }
        guard let availableBytes else { return nil }
        let budget = availableBytes / memoryShare
        let needed = demand.estimatedBytes
        guard needed > budget else { return nil }
        return "\(demand.devices) devices (\(demand.broadcasters) broadcasters at \(bytesPerBroadcaster / 1024) KiB, "
            + "\(demand.connectableDevices) connectable at \(bytesPerConnectableDevice / 1024) KiB, and \(baseBytes >> 20) MiB for the process) "
            + "need an estimated \(mebibytes(needed)) MiB; the budget is \(mebibytes(budget)) MiB (half of the \(mebibytes(availableBytes)) MiB "
            + "this machine has available, MemAvailable): run fewer devices, or run them in several processes or on several machines"
    }

    static func mebibytes(_ bytes: UInt64) -> UInt64 { (bytes + (1 << 20) - 1) >> 20 }

    /// MemAvailable from /proc/meminfo, in bytes; nil when it cannot be read.
    public static func availableMemory() -> UInt64? {
        #if canImport(Glibc)
        guard case .success(let bytes) = RegularFile.read("/proc/meminfo", maximumBytes: 64 * 1024, followSymlinks: false) else { return nil }
        return availableMemory(meminfo: String(decoding: bytes, as: UTF8.self))
        #else
        return nil
        #endif
    }

    /// MemAvailable of /proc/meminfo's text (`MemAvailable:   24163980 kB`), in bytes.
    public static func availableMemory(meminfo: String) -> UInt64? {
        for line in meminfo.split(separator: "\n") where line.hasPrefix("MemAvailable:") {
            let fields = line.split(separator: " ", omittingEmptySubsequences: true)
            guard fields.count == 3, fields[2] == "kB", let kibibytes = UInt64(fields[1]), kibibytes < UInt64.max >> 10 else { return nil }
            return kibibytes << 10
        }
        return nil
    }

    /// The decision, apart from the system calls: enough below the soft limit, or raise it
    /// (`raise`, to `needed`) when the hard limit allows, or refuse.
    public static func check(needed: Int, soft: UInt64, hard: UInt64, devices: Int, raise: (UInt64) -> Bool) -> String? {
        if UInt64(needed) <= soft { return nil }
        if UInt64(needed) <= hard, raise(UInt64(needed)) { return nil }
        return "\(devices) devices need up to \(needed) file descriptors and the limit (RLIMIT_NOFILE, `ulimit -n`) is \(soft) (hard \(hard)): raise it, or run fewer devices"
    }
}
