import BlemuATT
import BlemuCore
import BlemuGATT
import FuzzSupport

/// `att-server`: one ATT bearer — an `ATTServer` over the database of `LengthRulesDevice`, whose
/// handlers index their values trusting the declared length rules — fed a sequence of ATT PDUs
/// (and clock jumps and device updates). Beyond traps in the stack or the handlers it checks
/// the protocol: exactly one response to each request and none to anything else, a response
/// of the request's kind (or an Error Response naming it) that the stack's own client-side
/// decoders accept, and no PDU longer than ATT_MTU.
///
/// Input: a config byte (server Rx MTU, whether the link refuses updates), then records:
///   0x00–0xEF  an ATT PDU of that many bytes
///   0xF0       an ATT PDU whose length is the next u16 (mod 600)
///   0xF1 n     the clock moves n × 200 ms
///   0xF2       the clock moves 31 s (past the 30 s ATT transaction timeout)
///   0xF3 c     the device notifies (c picks the characteristic)
///   0xF4 c     the device indicates
///   0xF5       the link starts or stops refusing notifications and indications
///   0xF6 s     service s takes itself out of the database or comes back (refused changes
///              are skipped), and the bearer is told the range, as `blemu ctl … service` does;
///              the client uses robust caching, so it becomes change-unaware (Vol 3, Part G,
///              2.5.2.1)
///   0xF7       the client confirms Service Changed: change-aware again
///   0xF8 …     a client PDU of a chosen opcode with fuzzed fields (`typedATTPDU`)
///   0xF9–0xFF  nothing
/// `BLEMU_FUZZ_TRACE=1` prints every PDU in and out.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    var input = FuzzBytes(data, size)
    let config = input.u8()
    let rxMTUs = [ATTServer.maximumMTU, 23, 24, 64, 185, 247, 251, 512]
    let scheduler = ManualScheduler()
    let device = LengthRulesDevice()
    let database: GATTDatabase
    do {
        database = try GATTDatabase(services: device.services)
    } catch {
        fuzzFailure("the fuzz device's database does not build: \(error)")
    }
    let peer = ATTPeer(connectionHandle: 0x0040, address: BluetoothAddress("F0:F1:F2:F3:F4:F5")!)
    let server = ATTServer(database: database, peer: peer, scheduler: scheduler, serverRxMTU: rxMTUs[Int(config & 0x07)])
    let bearer = Bearer(refusing: config & 0x08 != 0)
    server.delegate = bearer
    device.update = { [unowned server] characteristic, value, indicate in
        if indicate {
            _ = server.indicate(characteristic, value: value)
        } else {
            _ = server.notify(characteristic, value: value)
        }
    }
    let updatable = [device.four, device.big, device.notifyOnly, device.one]

    let memory = MemoryBound(bound: 4 << 20)
    while !input.isAtEnd {
        let record = input.u8()
        defer { memory.check("record \(record)") }
        switch record {
        case 0x00...0xEF:
            bearer.request(input.take(Int(record)), to: server)
        case 0xF0:
            bearer.request(input.take(Int(input.u16()) % 600), to: server)
        case 0xF1:
            scheduler.advance(by: .milliseconds(Int64(input.u8()) * 200))
        case 0xF2:
            scheduler.advance(by: .seconds(31))
        case 0xF3:
            let c = updatable[Int(input.u8()) % updatable.count]
            bearer.sent(by: server) { _ = server.notify(c, value: Array(device.storage.big[0..<device.storage.bigCount])) }
        case 0xF4:
            let c = updatable[Int(input.u8()) % updatable.count]
            bearer.sent(by: server) { _ = server.indicate(c, value: device.storage.four) }
        case 0xF5:
            bearer.refusing.toggle()
        case 0xF6:
            let service = database.services[Int(input.u8()) % database.services.count]
            if let range = try? database.setService(service, present: !database.isPresent(service)) {
                server.session.clientSupportsRobustCaching = true
                _ = server.databaseChanged(range)
                fuzzCheck(!server.isChangeAware || server.isClosed, "a robust-caching client stayed change-aware after a change")
            }
        case 0xF7:
            server.session.serviceChangedConfirmed()
        case 0xF8:
            bearer.request(typedATTPDU(&input, handleCount: database.attributes.count), to: server)
        default:
            break
        }
    }
    // Nothing may be left scheduled for a bearer that is gone but its transaction timer.
    scheduler.advance(by: .seconds(31))
    return 0
}

/// The link below the server: takes (or refuses) what it sends and checks it.
final class Bearer: ATTServerDelegate {
    var refusing: Bool
    let trace = fuzzTrace
    private var responses: [[UInt8]] = []
    private var updatesAllowed = false

    init(refusing: Bool) { self.refusing = refusing }

    func request(_ pdu: [UInt8], to server: ATTServer) {
        guard let opcode = pdu.first else {
            server.receive(pdu[...])
            return
        }
        if trace { writeStandardError("> \(hex(pdu))\n") }
        let timedOut = server.isTimedOut
        let mtu = server.mtu
        responses.removeAll()
        updatesAllowed = true  // a write handler may notify or indicate
        server.receive(pdu[...])
        updatesAllowed = false
        if timedOut {
            // Vol 3, Part F, 3.3.3: after a transaction timeout nothing more is sent.
            fuzzCheck(responses.isEmpty, "a bearer that timed out answered \(hex(pdu))")
            return
        }
        if ATTOpcode.isRequestForm(opcode) {
            fuzzCheck(responses.count == 1, "\(responses.count) responses to request \(hex(pdu))")
            let response = responses[0]
            if response.first == ATTOpcode.errorResponse.rawValue {
                guard let error = try? ATTErrorResponse(pdu: response[...]) else {
                    fuzzFailure("malformed Error Response \(hex(response)) to \(hex(pdu))")
                }
                fuzzCheck(error.requestOpcode == opcode, "Error Response \(hex(response)) names another request than \(hex(pdu))")
            } else {
                fuzzCheck(response.first == opcode &+ 1, "response \(hex(response)) to request \(hex(pdu))")
                checkDecodes(response, request: pdu, mtu: mtu)
            }
        } else {
            fuzzCheck(responses.isEmpty, "\(responses.count) responses to \(hex(pdu)), which is not a request")
        }
    }

    /// Runs a device update and lets its PDUs through.
    func sent(by server: ATTServer, _ update: () -> Void) {
        updatesAllowed = true
        update()
        updatesAllowed = false
    }

    /// The stack's own client-side decoders must accept what its server sends.
    private func checkDecodes(_ response: [UInt8], request: [UInt8], mtu: Int) {
        let slice = response[...]
        do {
            switch response[0] {
            case 0x03: _ = try ATTExchangeMTUResponse(pdu: slice)
            case 0x05: _ = try ATTFindInformationResponse(pdu: slice)
            case 0x09: _ = try ATTReadByTypeResponse(pdu: slice)
            case 0x0B: _ = try ATTReadResponse(pdu: slice)
            case 0x0D: _ = try ATTReadBlobResponse(pdu: slice)
            case 0x11: _ = try ATTReadByGroupTypeResponse(pdu: slice)
            case 0x13: _ = try ATTWriteResponse(pdu: slice)
            default: break
            }
        } catch {
            fuzzFailure("the server's response \(hex(response)) to \(hex(request)) does not decode: \(error)")
        }
    }

    func attServer(_ server: ATTServer, send pdu: ArraySlice<UInt8>, kind: ATTSendKind) -> Bool {
        if trace { writeStandardError("< \(hex(Array(pdu))) (\(kind))\n") }
        fuzzCheck(pdu.count <= server.mtu, "PDU of \(pdu.count) bytes at ATT_MTU \(server.mtu): \(hex(Array(pdu)))")
        fuzzCheck(!server.isTimedOut, "a PDU sent after the transaction timeout: \(hex(Array(pdu)))")
        switch kind {
        case .response:
            fuzzCheck(updatesAllowed, "a response sent outside a request: \(hex(Array(pdu)))")
            responses.append(Array(pdu))
            return true
        case .notification, .indication:
            fuzzCheck(updatesAllowed, "an update sent by itself: \(hex(Array(pdu)))")
            let expected: UInt8 = kind == .notification ? 0x1B : 0x1D
            fuzzCheck(pdu.first == expected && pdu.count >= 3, "update \(hex(Array(pdu))) sent as \(kind)")
            return !refusing
        case .request:
            fuzzFailure("the server sent a client's PDU: \(hex(Array(pdu)))")
        }
    }

    func attServer(_ server: ATTServer, mtuChanged mtu: Int) {
        fuzzCheck((ATTServer.defaultMTU...server.serverRxMTU).contains(mtu), "MTU changed to \(mtu)")
    }

    func attServer(_ server: ATTServer, configured characteristic: Characteristic, from old: UInt16, to new: UInt16) {
        fuzzCheck(new & ~0x0003 == 0, "CCCD configured to \(new)")
        fuzzCheck(new & 0x0001 == 0 || characteristic.properties.contains(.notify), "notifications enabled on a characteristic that does not notify")
        fuzzCheck(new & 0x0002 == 0 || characteristic.properties.contains(.indicate), "indications enabled on a characteristic that does not indicate")
    }

    func attServerTransactionTimedOut(_ server: ATTServer) {}
}

let fuzzTrace = fuzzEnvironmentFlag("BLEMU_FUZZ_TRACE")

@_cdecl("att_server_main")
public func attServerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    blemu_fuzz_driver(argc, argv) { data, size in fuzz(data, size) }
}
