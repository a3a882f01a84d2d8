import ArgumentParser
import BlemuCore
import Testing

@testable import blemu

/// `blemu scan`'s observer options through the real parser, and its lines.
@Suite struct ScanCommandLineTests {
    static func refusal(_ arguments: [String]) -> Int32? {
        do {
            _ = try Blemu.parseAsRoot(["scan", "--controller", "tcp:127.0.0.1:6402"] + arguments)
            return nil
        } catch {
            return Blemu.exitCode(for: error).rawValue
        }
    }

    @Test func observerOptionsParse() throws {
        let command = try #require(try Blemu.parseAsRoot(["scan", "--controller", "tcp:127.0.0.1:6402", "--bindkey-file", "key.txt",
                                                          "--watch", "54:48:E6:8F:80:A5", "--json", "--periodic"]) as? ScanCommand)
        #expect(command.bindkeyFile == "key.txt" && command.watch == "54:48:E6:8F:80:A5" && command.periodic && command.json)
    }

    @Test func aWatchThatIsNoAddressIsABadCommandLine() {
        #expect(Self.refusal(["--watch", "kitchen"]) == 64)
        #expect(Self.refusal(["--watch", "54:48:E6:8F:80"]) == 64)
    }

    @Test func periodicIntervalInMilliseconds() {
        #expect(ScanCommand.milliseconds(80) == "100.00")
        #expect(ScanCommand.milliseconds(6) == "7.50")
        #expect(ScanCommand.milliseconds(0xFFFF) == "81918.75")
    }
}
