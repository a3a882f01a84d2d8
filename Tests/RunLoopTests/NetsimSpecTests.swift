import BlemuRunLoop
import BlemuTransport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `--controller netsim[:INSTANCE]`: the Android Emulator's netsim, whose HCI port (each TCP
/// connection a new controller on the emulator's radio) is 6402 for the first emulator,
/// 6402 + N - 1 for instance N, or what NETSIM_HCI_PORT says (netsim's --hci-port).
@Suite struct NetsimSpecTests {
    @Test(arguments: [
        ("netsim", UInt16(1), UInt16(6402), "netsim:1"),
        ("netsim:1", 1, 6402, "netsim:1"),
        ("netsim:2", 2, 6403, "netsim:2"),
        ("netsim:10", 10, 6411, "netsim:10"),
    ])
    func findsTheInstancesDefaultPort(text: String, instance: UInt16, port: UInt16, canonical: String) throws {
        let spec = try ControllerSpec(parsing: text, environment: [:])
        #expect(spec == .netsim(instance: instance, port: port))
        #expect(spec.description == canonical)
        #expect(spec.tcpEndpoint?.host == "127.0.0.1", "netsim listens on loopback only")
        #expect(spec.tcpEndpoint?.port == port)
        #expect(try ControllerSpec(parsing: spec.description, environment: [:]) == spec)
    }

    @Test func netsimHCIPortInTheEnvironmentWins() throws {
        let spec = try ControllerSpec(parsing: "netsim:2", environment: ["NETSIM_HCI_PORT": "7100"])
        #expect(spec == .netsim(instance: 2, port: 7100))
        #expect(try ControllerSpec(parsing: "netsim", environment: ["NETSIM_HCI_PORT": ""]) == .netsim(instance: 1, port: 6402),
                "an empty variable is unset")
    }

    @Test(arguments: ["netsim:", "netsim:0", "netsim:x", "netsim:-1", "netsim:1:2", "netsim:63135", "netsims"])
    func rejectsBadInstances(text: String) {
        #expect(throws: TransportError.self) { try ControllerSpec(parsing: text, environment: [:]) }
    }

    @Test(arguments: ["0", "65536", "64k", " 6402"])
    func rejectsABadNetsimHCIPortNamingTheVariable(value: String) {
        do {
            _ = try ControllerSpec(parsing: "netsim", environment: ["NETSIM_HCI_PORT": value])
            Issue.record("NETSIM_HCI_PORT=\(value) was accepted")
        } catch {
            #expect(error.kind == .invalidSpec)
            #expect(error.description.contains("NETSIM_HCI_PORT"))
        }
    }

    @Test func nothingListeningSaysToStartTheEmulatorAndHowToReachIt() throws {
        let port = closedTCPPort()
        let error = try openFailure(.netsim(instance: 2, port: port))
        #expect(error.kind == .connectionRefused)
        #expect(error.description.hasPrefix("netsim:2: nothing listens on netsim's HCI port 127.0.0.1:\(port) (ECONNREFUSED)"))
        #expect(error.description.contains("start the Android Emulator"))
        #expect(error.description.contains("-netsim-args=\"--no-shutdown\""))
        #expect(error.description.contains("loopback only"))
        #expect(error.description.contains("--network host"))
        #expect(error.description.contains("NETSIM_HCI_PORT"))
    }

    @Test func aListeningNetsimIsAnH4Controller() throws {
        let loop = try RunLoop()
        let server = TCPServer()
        defer { server.close() }
        guard case .success(let transport)? = openAndWait(.netsim(instance: 1, port: server.port), on: loop) else {
            Issue.record("netsim on \(server.port) did not open")
            return
        }
        defer { transport.close() }
        var accepted: Int32 = -1
        #expect(runUntil(loop) { accepted = server.accept(); return accepted >= 0 })
        defer { close(accepted) }
        #expect(transport.send(.command, [0x03, 0x0C, 0x00]))
        var got: [UInt8] = []
        #expect(runUntil(loop) { got += readAvailable(accepted); return got.count >= 4 })
        #expect(got == [0x01, 0x03, 0x0C, 0x00])
    }
}
