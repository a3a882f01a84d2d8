import ArgumentParser
import Testing

@testable import blemu

/// `blemu bench`'s command line: bumble-bench's defaults per role, and what cannot run refused
/// before any controller is opened (exit status 64).
@Suite struct BenchCommandLineTests {
    func parse(_ arguments: [String]) throws -> BenchCommand {
        guard let command = try Blemu.parseAsRoot(["bench"] + arguments) as? BenchCommand else {
            throw ValidationError("not a bench command")
        }
        return command
    }

    @Test func theDefaultsAreBumbleBenchs() throws {
        let central = try parse(["--peer", "F1:F1:F1:F1:F1:F1"]).plan()
        #expect(central.mode == .gattClient && central.scenario == .send && central.packets == 10 && central.size == 500)
        let peripheral = try parse(["--role", "peripheral", "--mode", "l2cap-server"]).plan()
        #expect(peripheral.scenario == .receive && peripheral.effectiveMTU == 1024 && peripheral.psm == 0x80)
        let ping = try parse(["--peer", "F1:F1:F1:F1:F1:F1", "--scenario", "ping", "--phy", "2m", "--data-length", "251", "--mtu", "247",
                              "--size", "200"]).plan()
        #expect(ping.phy == .twoM && ping.dataLength == 251 && ping.mtu == 247)
        let read = try parse(["--peer", "F1:F1:F1:F1:F1:F1", "--scenario", "read", "--packets", "50"]).plan()
        #expect(read.scenario == .read && read.mode == .gattClient && read.packets == 50)
    }

    @Test(arguments: [
        ["--role", "central"],                                                       // no --peer
        ["--peer", "F1:F1:F1:F1:F1:F1", "--mode", "gatt-server"],                    // a server mode on the central
        ["--role", "peripheral", "--mode", "l2cap-client"],
        ["--role", "peripheral", "--phy", "2m"],                                     // the central asks for the PHY
        ["--role", "peripheral", "--address", "12:34:56:78:9A:BC"],                  // not static random
        ["--peer", "F1:F1:F1:F1:F1:F1", "--size", "600"],                            // beyond ATT_MTU 517 - 3
        ["--peer", "F1:F1:F1:F1:F1:F1", "--size", "9"],
        ["--peer", "F1:F1:F1:F1:F1:F1", "--scenario", "flood"],
        ["--peer", "F1:F1:F1:F1:F1:F1", "--phy", "3m"],
        ["--peer", "F1:F1:F1:F1:F1:F1", "--mode", "l2cap-client", "--psm", "37"],   // not a dynamic SPSM
        ["--peer", "F1:F1:F1:F1:F1:F1", "--packets", "0"],
        ["--peer", "F1:F1:F1:F1:F1:F1", "--mode", "l2cap-client", "--scenario", "read"],  // reads are GATT's
    ])
    func whatCannotRunIsRefused(_ arguments: [String]) {
        #expect(throws: (any Error).self) { _ = try parse(arguments) }
    }
}
