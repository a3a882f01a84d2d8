import BlemuConfig
import BlemuTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A configuration cannot ask for unbounded devices: an alias bomb or a list of 40,000 devices
/// is refused at once (it took 70 s and 2.75 GB, then failed with EMFILE), with the file, the
/// line and the limit.
@Suite struct ConfigurationLimitsTests {
    private func refusal(_ text: String, within limit: Duration = .seconds(1)) -> String? {
        var message: String?
        let time = ContinuousClock().measure {
            do {
                _ = try ConfigurationFile.parse(text, file: "fleet.yaml")
            } catch {
                message = "\(error)"
            }
        }
        #expect(time < limit, "took \(time)")
        return message
    }

    @Test func anAliasBombIsRefusedAtOnceWithTheLineAndTheLimit() {
        // One anchored device entry aliased 140,000 times: under 1 MB of text.
        var text = "devices:\n  - &d { device: heart-rate, settings: { bpm: 72, battery: 80 } }\n"
        text += String(repeating: "  - *d\n", count: 140_000)
        #expect(text.utf8.count < 1 << 20)
        let message = refusal(text)
        #expect(message?.hasPrefix("fleet.yaml:") == true, "\(String(describing: message))")
        #expect(message?.contains("more than 20000 YAML nodes") == true, "\(String(describing: message))")
        // Passed within the aliases, not at the end of the file.
        let line = message.flatMap { $0.split(separator: ":").dropFirst().first }.flatMap { Int($0) }
        #expect(line.map { $0 > 2 && $0 < 10_000 } == true, "\(String(describing: message))")
    }

    @Test func nestedAliasesCountAsWhatTheyStandFor() {
        // Billion laughs: each level doubles; 20 levels are a million nodes in 40 lines.
        var text = "a0: &a0 [x, x]\n"
        for level in 1...20 { text += "a\(level): &a\(level) [*a\(level - 1), *a\(level - 1)]\n" }
        text += "devices:\n  - device: heart-rate\n"
        let message = refusal(text)
        #expect(message?.contains("more than 20000 YAML nodes") == true, "\(String(describing: message))")
    }

    @Test func fortyThousandPlainEntriesAreRefusedAtOnce() {
        let text = "devices:\n" + String(repeating: "  - device: heart-rate\n", count: 40_000)
        let message = refusal(text)
        #expect(message?.hasPrefix("fleet.yaml:") == true, "\(String(describing: message))")
        #expect(message?.contains("20000 YAML nodes") == true, "\(String(describing: message))")
    }

    @Test func moreThanSixtyFourDevicesAreNoLongerRefusedByTheFile() throws {
        // The fixed limit of 64 gave way to the budget (`ProcessLimits.check`), checked when the run is planned.
        let entries = (0..<65).map { "  - { device: heart-rate, name: HR \($0) }\n" }.joined()
        #expect(try ConfigurationFile.parse("devices:\n" + entries, file: "f.yaml").devices.count == 65)
    }

    @Test func theCeilingAndTheMemoryBudgetAreCheckedWithTheNumbersInTheError() {
        let gateway = ProcessLimits.Demand(broadcasters: 1000, connectableDevices: 100)
        // 8 MiB + 1000 × 32 KiB + 100 × 64 KiB.
        #expect(gateway.estimatedBytes == (8 << 20) + 1000 * 32 * 1024 + 100 * 64 * 1024)
        #expect(ProcessLimits.check(gateway, availableBytes: 1 << 30) == nil)
        #expect(ProcessLimits.check(gateway, availableBytes: nil) == nil)
        // One device fits a board with a few tens of megabytes free.
        #expect(ProcessLimits.check(.init(broadcasters: 0, connectableDevices: 1), availableBytes: 20 << 20) == nil)
        #expect(ProcessLimits.check(gateway, availableBytes: 80 << 20)
                == "1100 devices (1000 broadcasters at 32 KiB, 100 connectable at 64 KiB, and 8 MiB for the process) need an estimated 46 MiB; "
                + "the budget is 40 MiB (half of the 80 MiB this machine has available, MemAvailable): run fewer devices, or run them in several processes or on several machines")
        #expect(ProcessLimits.check(.init(broadcasters: 10_001, connectableDevices: 0), availableBytes: 1 << 40)
                == "10001 devices: one blemu runs at most 10000 devices (run several processes for more)")
        #expect(ProcessLimits.check(.init(broadcasters: 9_000, connectableDevices: 1_000), availableBytes: 1 << 40) == nil)
    }

    @Test func memAvailableIsReadFromMeminfo() {
        let meminfo = "MemTotal:       32594884 kB\nMemFree:         1024 kB\nMemAvailable:   24163980 kB\nBuffers:  1 kB\n"
        #expect(ProcessLimits.availableMemory(meminfo: meminfo) == 24_163_980 * 1024)
        #expect(ProcessLimits.availableMemory(meminfo: "MemTotal: 1 kB\n") == nil)
        #expect(ProcessLimits.availableMemory(meminfo: "MemAvailable: lots kB\n") == nil)
        #expect(ProcessLimits.availableMemory(meminfo: "MemAvailable: 99999999999999999999 kB\n") == nil)
        #expect(ProcessLimits.availableMemory() != nil)
    }

    @Test func theDescriptorsTheDevicesNeedAreCheckedAgainstTheLimit() {
        let needed = ProcessLimits.descriptorsNeeded(devices: 64)
        var raisedTo: UInt64?
        // Enough: nothing raised.
        #expect(ProcessLimits.check(needed: needed, soft: 1024, hard: 4096, devices: 64) { raisedTo = $0; return true } == nil)
        #expect(raisedTo == nil)
        // The soft limit is too low but the hard one allows it: raised.
        #expect(ProcessLimits.check(needed: needed, soft: 50, hard: 4096, devices: 64) { raisedTo = $0; return true } == nil)
        #expect(raisedTo == UInt64(needed))
        // Neither: refused, saying what to do.
        let refusal = ProcessLimits.check(needed: needed, soft: 50, hard: 60, devices: 64) { _ in Issue.record("raised past hard"); return false }
        #expect(refusal == "64 devices need up to \(needed) file descriptors and the limit (RLIMIT_NOFILE, `ulimit -n`) is 50 (hard 60): raise it, or run fewer devices")
        // This process can run the gateway fleet of issue 38: 1,000 broadcasters and 100 sensors.
        #expect(ProcessLimits.check(.init(broadcasters: 1000, connectableDevices: 100)) == nil)
    }

    @Test func aFIFOGivenAsTheConfigurationIsRefusedAtOnce() {
        let directory = TemporaryDirectory()
        let path = directory.file("fleet.yaml")
        #expect(mkfifo(path, 0o600) == 0)
        var message: String?
        let time = ContinuousClock().measure {
            do { _ = try ConfigurationFile.load(path: path) } catch { message = "\(error)" }
        }
        #expect(time < .seconds(1))
        #expect(message == "\(path): a FIFO, not a regular file")
    }
}
