import BlemuCentral
import BlemuControl
import BlemuCore
import BlemuHCI
import BlemuHost
import BlemuProgrammableHost
import BlemuSMP
import BlemuSecurity
import BlemuSimulator
import Foundation
import Logging
import Testing

/// The security ops (`pairing-config`, `secure`, `pairing-answer`, `bonded`, `forget`) decoded
/// totally, their events' fields, and what the host does with them where no peer is needed.
@Suite struct HostSecurityRequestTests {
    private func host(_ line: String) throws -> HostRequest {
        let request = try ControlRequest.decode(line: Array(line.utf8)).get()
        guard case .host(let host) = request.command else { throw ControlRequestError(id: nil, "not host") }
        return host
    }

    private let peer = LEAddress(BluetoothAddress("C0:11:22:33:44:55")!, isRandom: true)

    @Test func theSecurityOpsDecodeWithTheirDefaults() throws {
        #expect(try host(#"{"id":1,"cmd":"host","op":"pairing-config"}"#) == .pairingConfig(PairingSettings()))
        #expect(try host(#"{"id":1,"cmd":"host","op":"pairing-config","io_capability":"no-input-no-output","bonding":false,"mitm":false,"secure_connections_only":true,"keys":["id"]}"#)
                == .pairingConfig(PairingSettings(ioCapability: .noInputNoOutput, bondable: false, mitm: false, secureConnectionsOnly: true,
                                                  keys: [.identityKey])))
        #expect(try host(#"{"id":1,"cmd":"host","op":"pairing-config","io_capability":"display-yes-no","keys":[]}"#)
                == .pairingConfig(PairingSettings(ioCapability: .displayYesNo, keys: [])))
        #expect(try host(#"{"id":1,"cmd":"host","op":"secure","link":2,"level":3}"#) == .secure(link: 2, level: .authenticated))
        #expect(try host(#"{"id":1,"cmd":"host","op":"pairing-answer","pairing":4,"confirm":true}"#) == .pairingAnswer(pairing: 4, .confirm(true)))
        #expect(try host(#"{"id":1,"cmd":"host","op":"pairing-answer","pairing":4,"passkey":0}"#) == .pairingAnswer(pairing: 4, .passkey(0)))
        #expect(try host(#"{"id":1,"cmd":"host","op":"pairing-answer","pairing":4,"passkey":999999}"#) == .pairingAnswer(pairing: 4, .passkey(999_999)))
        // Neither: a rejection (null is as absent).
        #expect(try host(#"{"id":1,"cmd":"host","op":"pairing-answer","pairing":4}"#) == .pairingAnswer(pairing: 4, .reject))
        #expect(try host(#"{"id":1,"cmd":"host","op":"pairing-answer","pairing":4,"passkey":null}"#) == .pairingAnswer(pairing: 4, .reject))
        #expect(try host(#"{"id":1,"cmd":"host","op":"bonded","address":"c0:11:22:33:44:55","address_type":"random-identity"}"#) == .bonded(peer))
        #expect(try host(#"{"id":1,"cmd":"host","op":"forget","address":"00:11:22:33:44:55","address_type":"public"}"#)
                == .forget(LEAddress(BluetoothAddress("00:11:22:33:44:55")!, isRandom: false)))
    }

    @Test(arguments: [
        (#"{"id":7,"cmd":"host","op":"pairing-config","io_capability":"keyboard"}"#, #""io_capability" 'keyboard' is not"#),
        (#"{"id":7,"cmd":"host","op":"pairing-config","io_capability":3}"#, #""io_capability" must be a string"#),
        (#"{"id":7,"cmd":"host","op":"pairing-config","bonding":"yes"}"#, #""bonding" must be true or false"#),
        (#"{"id":7,"cmd":"host","op":"pairing-config","mitm":1}"#, #""mitm" must be true or false"#),
        (#"{"id":7,"cmd":"host","op":"pairing-config","keys":"enc"}"#, #""keys" must be a list"#),
        (#"{"id":7,"cmd":"host","op":"pairing-config","keys":["enc","enc"]}"#, #""keys" holds the string 'enc'"#),
        (#"{"id":7,"cmd":"host","op":"pairing-config","keys":["enc","id","sign","lk"]}"#, #""keys" must be a list"#),
        (#"{"id":7,"cmd":"host","op":"pairing-config","keys":["link"]}"#, #""keys" holds the string 'link'"#),
        (#"{"id":7,"cmd":"host","op":"pairing-config","keys":[["enc"]]}"#, #""keys" holds an array"#),
        (#"{"id":7,"cmd":"host","op":"pairing-config","io":"display-only"}"#, "host pairing-config takes no 'io'"),
        (#"{"id":7,"cmd":"host","op":"secure","link":1}"#, #"missing "level""#),
        (#"{"id":7,"cmd":"host","op":"secure","level":2}"#, #"missing "link""#),
        (#"{"id":7,"cmd":"host","op":"secure","link":1,"level":0}"#, #""level" must be a whole number from 1 to 4"#),
        (#"{"id":7,"cmd":"host","op":"secure","link":1,"level":5}"#, #""level" must be a whole number from 1 to 4"#),
        (#"{"id":7,"cmd":"host","op":"secure","link":1,"level":"3"}"#, #""level" must be a whole number"#),
        (#"{"id":7,"cmd":"host","op":"secure","link":1,"level":2.5}"#, #""level" must be a whole number"#),
        (#"{"id":7,"cmd":"host","op":"pairing-answer","confirm":true}"#, #"missing "pairing""#),
        (#"{"id":7,"cmd":"host","op":"pairing-answer","pairing":-1}"#, #""pairing" must be a whole number from 1"#),
        (#"{"id":7,"cmd":"host","op":"pairing-answer","pairing":1,"passkey":1000000}"#, #""passkey" must be a whole number from 0 to 999999"#),
        (#"{"id":7,"cmd":"host","op":"pairing-answer","pairing":1,"passkey":-1}"#, #""passkey" must be a whole number from 0 to 999999"#),
        (#"{"id":7,"cmd":"host","op":"pairing-answer","pairing":1,"passkey":"123456"}"#, #""passkey" must be a whole number"#),
        (#"{"id":7,"cmd":"host","op":"pairing-answer","pairing":1,"confirm":"yes"}"#, #""confirm" must be true or false"#),
        (#"{"id":7,"cmd":"host","op":"pairing-answer","pairing":1,"confirm":true,"passkey":1}"#, "not both"),
        (#"{"id":7,"cmd":"host","op":"bonded","address":"C0:11:22:33:44:55"}"#, #"missing "address_type""#),
        (#"{"id":7,"cmd":"host","op":"bonded","address":"C0:11:22:33:44","address_type":"random"}"#, "is not an address"),
        (#"{"id":7,"cmd":"host","op":"forget","address":"C0:11:22:33:44:55","address_type":"static"}"#, #""address_type" 'static'"#),
        (#"{"id":7,"cmd":"host","op":"forget","address":"C0:11:22:33:44:55","address_type":"random","all":true}"#, "host forget takes no 'all'"),
    ])
    func hostileSecurityRequestsAreRefusedNamingTheField(line: String, fragment: String) {
        guard case .failure(let error) = ControlRequest.decode(line: Array(line.utf8)) else {
            Issue.record("\(line) decoded")
            return
        }
        #expect(error.id == 7)
        #expect(error.message.contains(fragment), "\(line): \(error.message)")
    }

    @Test func theSecurityOpsEncodingDecodesToTheSameRequest() throws {
        let requests: [HostRequest] = [
            .pairingConfig(PairingSettings()),
            .pairingConfig(PairingSettings(ioCapability: .displayOnly, bondable: false, mitm: false, secureConnectionsOnly: true, keys: [.encryptionKey, .signingKey])),
            .secure(link: 3, level: .authenticatedSecureConnections),
            .pairingAnswer(pairing: 2, .confirm(false)), .pairingAnswer(pairing: 2, .passkey(123)), .pairingAnswer(pairing: 2, .reject),
            .bonded(peer), .forget(LEAddress(BluetoothAddress("00:11:22:33:44:55")!, isRandom: false)),
        ]
        for request in requests {
            let line = ControlRequest(id: 5, command: .host(request)).json.encoded
            #expect(try host(line) == request, "\(line)")
        }
    }

    @Test func ctlWordsBecomeTheSecurityRequests() throws {
        #expect(try HostRequest.parse(arguments: ["pairing-config", "--io-capability", "keyboard-only", "--keys", "enc,id", "--mitm", "false"])
                == .pairingConfig(PairingSettings(ioCapability: .keyboardOnly, mitm: false, keys: [.encryptionKey, .identityKey])))
        #expect(try HostRequest.parse(arguments: ["secure", "--link", "1", "--level", "2"]) == .secure(link: 1, level: .encrypted))
        #expect(try HostRequest.parse(arguments: ["pairing-answer", "--pairing", "3", "--passkey", "42"]) == .pairingAnswer(pairing: 3, .passkey(42)))
        #expect(try HostRequest.parse(arguments: ["bonded", "--address", "C0:11:22:33:44:55", "--address-type", "random"]) == .bonded(peer))
        #expect(throws: ControlUsageError.self) { _ = try HostRequest.parse(arguments: ["secure", "--link", "1", "--level", "9"]) }
    }

    @Test func theSecurityEventsCarryTheirFields() {
        #expect(JSONValue.object(HostControl.members(.pairingRequest(.init(link: 2, pairing: 5, kind: .numericComparison(12345))))).encoded
                == #"{"event":"pairing-request","device":"host","link":2,"pairing":5,"method":"numeric-comparison","passkey":12345}"#)
        #expect(JSONValue.object(HostControl.members(.pairingRequest(.init(link: 2, pairing: 6, kind: .passkeyEntry)))).encoded
                == #"{"event":"pairing-request","device":"host","link":2,"pairing":6,"method":"passkey-entry","passkey":null}"#)
        #expect(JSONValue.object(HostControl.members(.pairingRequest(.init(link: 2, pairing: 7, kind: .passkeyDisplay(999))))).encoded
                == #"{"event":"pairing-request","device":"host","link":2,"pairing":7,"method":"passkey-display","passkey":999}"#)
        #expect(JSONValue.object(HostControl.members(.pairingRequest(.init(link: 2, pairing: 8, kind: .justWorks)))).encoded
                == #"{"event":"pairing-request","device":"host","link":2,"pairing":8,"method":"just-works","passkey":null}"#)
        let security = LinkSecurity(isEncrypted: true, isAuthenticated: true, isSecureConnections: true, encryptionKeySize: 16, isBonded: true)
        #expect(JSONValue.object(HostControl.members(.security(link: 2, security))).encoded
                == #"{"event":"security","device":"host","link":2,"level":4,"encrypted":true,"key_size":16,"authenticated":true,"secure_connections":true,"bonded":true}"#)
        #expect(JSONValue.object(HostControl.members(.securityFailed(link: 2, reason: .authenticationFailure, detail: "level 2"))).encoded
                == #"{"event":"security-failed","device":"host","link":2,"reason":"authentication-failure","detail":"level 2"}"#)
    }
}

/// The security ops run against the host (no peer): refusals by code, settings on both roles,
/// bonds asked about and deleted, `reset` putting it all back.
@Suite struct HostSecurityControlTests {
    private let logger = Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })
    private let peer = LEAddress(BluetoothAddress("C0:11:22:33:44:55")!, isRandom: true)

    private func bond(_ peer: LEAddress) -> Bond {
        Bond(peer: peer, longTermKey: SMPLongTermKey(key: [UInt8](repeating: 7, count: 16)), encryptionKeySize: 16,
             secureConnections: true, authenticated: false)
    }

    @Test func unknownLinksAndPairingsAreRefusedByCode() throws {
        let bench = try HostBench()
        let control = HostControl(host: bench.host, logger: logger)
        #expect(control.execute(.secure(link: 9, level: .encrypted), id: 1, client: 1).encoded
                == #"{"id":1,"ok":false,"error":"no link 9 is open","code":"unknown-link"}"#)
        #expect(control.execute(.pairingAnswer(pairing: 3, .confirm(true)), id: 2, client: 1).encoded.contains(#""code":"unknown-pairing""#))
        #expect(bench.events.isEmpty)
    }

    @Test func pairingConfigSetsBothRolesAndResetPutsTheDefaultsBack() throws {
        let bench = try HostBench()
        let control = HostControl(host: bench.host, logger: logger)
        let settings = PairingSettings(ioCapability: .noInputNoOutput, bondable: false, mitm: false, keys: [.identityKey])
        #expect(control.execute(.pairingConfig(settings), id: 1, client: 1).encoded == #"{"id":1,"ok":true}"#)
        #expect(bench.host.security.central.pairingSettings == settings)
        #expect(bench.host.security.settings == settings)
        try bench.host.reset()
        #expect(bench.host.security.central.pairingSettings == PairingSettings())
        #expect(bench.host.security.settings == PairingSettings())
    }

    @Test func bondedAndForgetAnswerByAddressAndResetDeletesTheBondsAndTheirFile() throws {
        let bench = try HostBench()
        let control = HostControl(host: bench.host, logger: logger)
        let store = bench.host.security.central.bonds
        #expect(store.path?.hasPrefix(bench.stateDirectory) == true)
        store.save(bond(peer))
        store.save(bond(LEAddress(BluetoothAddress("00:11:22:33:44:66")!, isRandom: false)))
        #expect(control.execute(.bonded(peer), id: 1, client: 1).encoded == #"{"id":1,"ok":true,"bonded":true}"#)
        // Same address, other type: another device.
        #expect(control.execute(.bonded(LEAddress(peer.address, isRandom: false)), id: 2, client: 1).encoded == #"{"id":2,"ok":true,"bonded":false}"#)
        #expect(control.execute(.forget(peer), id: 3, client: 1).encoded == #"{"id":3,"ok":true,"forgotten":true}"#)
        #expect(control.execute(.forget(peer), id: 4, client: 1).encoded == #"{"id":4,"ok":true,"forgotten":false}"#)
        #expect(control.execute(.bonded(peer), id: 5, client: 1).encoded == #"{"id":5,"ok":true,"bonded":false}"#)
        #expect(store.bonds.count == 1)
        try bench.host.reset()
        #expect(store.bonds.isEmpty)
        // The file says so too: a new store on it starts empty.
        let reread = BondStore(path: store.path, owner: store.owner, attachmentFormat: .none, logger: logger)
        #expect(reread.bonds.isEmpty)
    }

    /// A factory reset forgets the IRK too: its identity file goes, a new IRK comes; the central
    /// distributes the same IRK as the peripheral side (one for both roles, the one the host's
    /// resolvable private addresses are made from), and writes no identity file of its own.
    @Test func resetRemovesTheIdentityFileAndANewIRKIsMade() throws {
        let bench = try HostBench()
        let security = bench.host.security.central
        let peripheral = bench.host.advertising.peripheral.security
        let before = security.identity.resolvingKey
        #expect(before == peripheral.identity.resolvingKey)
        let path = try #require(peripheral.configuration.identityPath)
        let centralsOwn = try #require(security.configuration.identityPath)
        #expect(FileManager.default.fileExists(atPath: path))
        #expect(!FileManager.default.fileExists(atPath: centralsOwn))
        try bench.host.reset()
        #expect(!FileManager.default.fileExists(atPath: path))
        #expect(security.identity.resolvingKey != before)
        #expect(security.identity.resolvingKey == peripheral.identity.resolvingKey)
        #expect(FileManager.default.fileExists(atPath: path))
        #expect(!FileManager.default.fileExists(atPath: centralsOwn))
    }

    @Test func theCentralsBondsSurviveARestartInTheStateDirectory() throws {
        let first = try HostBench()
        first.host.security.central.bonds.save(bond(peer))
        let second = try HostBench(stateDirectory: first.stateDirectory)
        #expect(second.host.security.isBonded(peer))
    }

    @Test func withoutAStateDirectoryNothingIsWritten() throws {
        let scheduler = ManualScheduler()
        let controller = ControllerHost(controller: "scripted", scheduler: scheduler, logger: logger, output: { _, _ in true })
        let host = try ProgrammableHost(on: controller, stateDirectory: nil, logger: logger)
        #expect(host.security.central.bonds.path == nil)
    }
}

/// The peripheral side handed over (`attachPeripheralSecurity`): a program's advertisement on the
/// host's controller, a central on another controller of the simulated air, `secure` on the
/// peripheral link (a Security Request, Vol 3, Part H, 3.6.7) answered by the central's pairing,
/// the host's prompt and events for it, its bond in the queries and deleted by `reset`.
@Suite struct HostPeripheralSecurityTests {
    final class Bench {
        let scheduler = ManualScheduler()
        let centralController = SimulatedController()
        let hostController = SimulatedController()
        let air: SimulatedAir
        let central: CentralHost
        let centralSecurity: CentralSecurity
        let host: ProgrammableHost
        let advertising: ProgrammedAdvertising
        var events: [HostEvent] = []

        init() throws {
            let logger = Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })
            centralController.address = BluetoothAddress("00:1B:DC:00:00:01")!
            hostController.address = BluetoothAddress("00:1B:DC:00:00:02")!
            hostController.extendedAdvertisingSets = 4
            air = SimulatedAir(centralController, hostController)
            let a = centralController, b = hostController
            central = try CentralHost(on: ControllerHost(controller: "central", scheduler: scheduler, logger: logger, output: { a.output($0, $1) }))
            centralSecurity = CentralSecurity(configuration: CentralSecurityConfiguration(),
                                              owner: BondOwner(device: "central", name: "c", address: centralController.address),
                                              localAddress: LEAddress(centralController.address, isRandom: false), scheduler: scheduler, logger: logger)
            central.attach(security: centralSecurity)
            a.host = central.hci
            let controller = ControllerHost(controller: "host", scheduler: scheduler, logger: logger,
                                            transmitBufferCapacity: PeripheralHost.largestPDU, output: { b.output($0, $1) })
            host = try ProgrammableHost(on: controller, stateDirectory: HostBench.temporaryDirectory(), logger: logger)
            advertising = try ProgrammedAdvertising(controller: controller,
                                                    configuration: PeripheralConfiguration(name: "Programmed", controller: "host"),
                                                    randomAddress: host.randomAddress.address, logger: logger)
            host.attachPeripheralSecurity(advertising.peripheral.security)
            advertising.onConnection = { [unowned self] link in
                self.host.peripheralLinkOpened(link.connection, advertisement: link.advertisement, ownAddress: link.ownAddress)
            }
            advertising.onLinkClosed = { [unowned self] handle, reason in self.host.peripheralLinkClosed(handle: handle, reason: reason) }
            host.onEvent = { [unowned self] in self.events.append($0) }
            b.host = controller.hci
            central.controller.controllerUp()
            controller.controllerUp()
            air.run()
        }

        /// Runs the air, with what SimulatedAir leaves out: encryption. The central's LE Enable
        /// Encryption (Vol 4, Part E, 7.8.24) becomes the host's LE Long Term Key Request
        /// (7.7.65.5); its reply, Encryption Change (7.7.8) on both sides when the keys match.
        func run(centralHandle: UInt16, hostHandle: UInt16) {
            var enabled = 0, replied = 0
            for _ in 0..<20 {
                air.run()
                scheduler.advance(by: .milliseconds(50))
                let enables = centralController.commands(HCIOpcode.leEnableEncryption)
                while enabled < enables.count {
                    let p = enables[enabled].parameters
                    enabled += 1
                    let random = p[2..<10].reversed().reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
                    hostController.requestLongTermKey(handle: hostHandle, random: random, ediv: UInt16(p[10]) | UInt16(p[11]) << 8)
                    air.run()
                    let replies = hostController.commands(HCIOpcode.leLongTermKeyRequestReply)
                    guard replies.count > replied else { continue }
                    let key = Array(replies[replied].parameters[2...])
                    replied += 1
                    let match: UInt8 = key == Array(p[12...]) ? 0x00 : 0x06
                    centralController.event(0x08, [match, UInt8(centralHandle & 0xFF), UInt8(centralHandle >> 8), match == 0 ? 1 : 0])
                    hostController.event(0x08, [match, UInt8(hostHandle & 0xFF), UInt8(hostHandle >> 8), match == 0 ? 1 : 0])
                }
            }
        }
    }

    @Test func secureOnAPeripheralLinkAsksTheCentralAndTellsTheRiseAndTheBond() throws {
        let b = try Bench()
        let settings = PairingSettings(ioCapability: .noInputNoOutput, mitm: false)
        b.host.security.configure(settings)
        #expect(b.advertising.peripheral.security.pairingSettings == settings)
        #expect(b.advertising.peripheral.security.prompts === b.host.security.prompts)
        _ = try b.advertising.start(ProgrammedAdvertising.Parameters(data: [0x02, 0x01, 0x06], legacy: true, connectable: true)).get()
        b.air.run()
        var connected: CentralLink?
        b.central.connect(to: LEAddress(b.hostController.address, isRandom: false)) { connected = try? $0.get() }
        b.air.run()
        #expect(connected != nil)
        guard case .connected(let summary)? = b.events.first(where: { $0.name == "connected" }) else {
            Issue.record("no connected event: \(b.events)")
            return
        }
        #expect(summary.role == .peripheral)
        #expect(try b.host.secure(link: summary.link, level: .encrypted) == false)
        b.air.run()
        // The central paired in answer to the Security Request; the host asks to accept Just Works.
        guard case .pairingRequest(let request)? = b.events.last else {
            Issue.record("no pairing request: \(b.events)")
            return
        }
        #expect(request.link == summary.link && request.kind == .justWorks)
        try b.host.security.answer(request.pairing, .confirm(true))
        b.run(centralHandle: connected?.connection.handle ?? 0, hostHandle: summary.handle)
        let security = b.events.compactMap { event -> LinkSecurity? in
            if case .security(let link, let security) = event, link == summary.link { return security }
            return nil
        }
        #expect(security.first?.level == .encrypted)
        #expect(security.last?.isBonded == true, "\(b.events)")
        #expect(!b.events.contains { $0.name == "security-failed" })
        let centralAddress = LEAddress(b.centralController.address, isRandom: false)
        #expect(b.host.security.isBonded(centralAddress))
        #expect(try b.host.secure(link: summary.link, level: .encrypted) == true)
        try b.host.reset()
        #expect(!b.host.security.isBonded(centralAddress))
        #expect(b.advertising.peripheral.security.pairingSettings == PairingSettings())
    }
}
