import BlemuRunLoop
import Glibc
import Testing

/// `ProcessMemory.releaseStartupCode` (Docs/PERFORMANCE.md, Footprint): the program's code pages
/// leave this process and come back one by one as they run.
@Suite struct ProcessMemoryTests {
    /// Rss in KiB of the program's own executable mapping, from /proc/self/smaps.
    func programCodeResidentKiB() -> Int? {
        guard let exe = try? String(decoding: readAll("/proc/self/exe", link: true), as: UTF8.self),
              let smaps = try? String(decoding: readAll("/proc/self/smaps"), as: UTF8.self) else { return nil }
        var inProgramCode = false
        var total = 0
        for line in smaps.split(separator: "\n") {
            let fields = line.split(separator: " ", omittingEmptySubsequences: true)
            if let first = fields.first, first.contains("-"), !first.hasSuffix(":"), fields.count >= 2 {
                inProgramCode = fields[1].contains("x") && fields.count >= 6 && String(fields[5]) == exe
            } else if inProgramCode, fields.first == "Rss:", fields.count >= 2, let kib = Int(fields[1]) {
                total += kib
            }
        }
        return total
    }

    func readAll(_ path: String, link: Bool = false) throws -> [UInt8] {
        if link {
            var buffer = [UInt8](repeating: 0, count: 4096)
            let count = readlink(path, &buffer, buffer.count)
            guard count > 0 else { throw Errno(errno) }
            return Array(buffer[0..<count])
        }
        let fd = open(path, O_RDONLY)
        guard fd >= 0 else { throw Errno(errno) }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let count = read(fd, &chunk, chunk.count)
            guard count > 0 else { break }
            bytes += chunk[0..<count]
        }
        return bytes
    }

    struct Errno: Error { var code: Int32; init(_ code: Int32) { self.code = code } }

    /// The kernel's version as (major, minor), from uname.
    func kernelVersion() -> (Int, Int) {
        var name = utsname()
        uname(&name)
        let release = withUnsafeBytes(of: &name.release) { String(decoding: $0.prefix(while: { $0 != 0 }), as: UTF8.self) }
        let parts = release.split(whereSeparator: { !$0.isNumber }).compactMap { Int($0) }
        return (parts.first ?? 0, parts.count > 1 ? parts[1] : 0)
    }

    @Test func codePagesLeaveAndTheProgramRunsOn() throws {
        // Touch a lot of the test binary's code first, so there is something to give back.
        let before = try #require(programCodeResidentKiB())
        #expect(before > 0)
        let release = ProcessMemory.releaseStartupCode()
        let after = try #require(programCodeResidentKiB())
        #expect(release.advised > 0)
        // What this thread ran between the release and the reading comes back; the rest stays out.
        #expect(after < before, "the program's code stayed resident: \(before) KiB before, \(after) KiB after")
        // And the code that runs is brought back: the process goes on working.
        var sum = 0
        for value in [3, 1, 2].sorted() { sum += value }
        #expect(sum == 6)
        // Single-page faults need asynchronous write protection of userfaultfd (Linux 6.7); on
        // an older kernel the release still happens, with fault-around.
        let (major, minor) = kernelVersion()
        if major > 6 || (major == 6 && minor >= 7) {
            #expect(release.singlePageFaults > 0, "kernel \(major).\(minor) should allow single-page faults")
            #expect(release.singlePageFaults <= release.advised)
        } else {
            #expect(release.singlePageFaults == 0)
        }
    }
}
