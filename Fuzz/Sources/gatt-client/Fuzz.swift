import BlemuATT
import BlemuCore
import BlemuGATT
import BlemuGATTClient
import FuzzSupport

/// `gatt-client`: one `GATTClient` running GATT procedures against blemu's `ATTServer` over
/// the database of `LengthRulesDevice`, or a huge or deep one, with the input in charge of the link: it picks the
/// procedures, lets the server's PDUs through, corrupts them, or injects PDUs of its own, and
/// moves the clock. Beyond traps it checks the client's promises: every procedure ends exactly
/// once; one request outstanding at a time (Vol 3, Part F, 3.3.2); requests that fit ATT_MTU
/// and that the server's own decoders accept; nothing sent after the transaction timeout or
/// the link's close, and everything ended by then; and what it holds from the server stays
/// within `GATTClient.maxAttributes`.
///
/// Input: a config byte (bits 0–2: server Rx MTU; bits 3–4: the database, see `FuzzDatabase`;
/// bit 5: a generated database instead, described by the next three bytes, see
/// `GeneratedDatabase`; bits 6 and 7 both set: the link moves up to `Link.walkMoves` PDUs, a
/// whole walk of the largest database, else at most `Link.boundedMoves`), then records:
///   0x00–0xEF  a PDU of that many bytes, from "the server", to the client
///   0xF0 p     the client starts procedure p (discover all, by UUID, read, read multiple, write
///              short and long, reliable write, exchange MTU, write without response, subscribe)
///   0xF1 n     n PDUs move on the link (either way, in order)
///   0xF2 i b   the next PDU from the server has byte i xored with b (if it is that long)
///   0xF3 n     the clock moves n × 200 ms
///   0xF4       the clock moves 31 s (past the 30 s transaction timeout)
///   0xF5       the link closes
///   0xF6–0xFF  everything queued moves on the link
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    var input = FuzzBytes(data, size)
    let config = input.u8()
    let rxMTUs = [ATTServer.maximumMTU, 23, 24, 64, 185, 247, 251, 512]
    let wholeWalk = config & 0xC0 == 0xC0
    let generated = config & 0x20 != 0 ? GeneratedDatabase.take(input.u8(), input.u8(), input.u8(), wholeWalk: wholeWalk) : nil
    let link = Link(serverRxMTU: rxMTUs[Int(config & 0x07)], database: FuzzDatabase(rawValue: (config >> 3) & 0x03) ?? .lengthRules,
                    generated: generated?.database, movesLeft: wholeWalk ? Link.walkMoves : Link.boundedMoves)
    let memory = MemoryBound(bound: 64 << 20)

    while !input.isAtEnd {
        let record = input.u8()
        switch record {
        case 0x00...0xEF:
            link.inject(input.take(Int(record)))
        case 0xF0:
            link.start(procedure: input.u8(), handle: link.handle(input.u8()))
        case 0xF1:
            link.move(Int(input.u8()))
        case 0xF2:
            link.corruption = (Int(input.u8()), input.u8())
        case 0xF3:
            link.scheduler.advance(by: .milliseconds(Int64(input.u8()) * 200))
        case 0xF4:
            link.scheduler.advance(by: .seconds(31))
        case 0xF5:
            link.close()
        default:
            link.move(Int.max)
        }
        memory.check("record \(record)")
    }
    link.move(Int.max)
    link.scheduler.advance(by: .seconds(31))
    link.close()
    fuzzCheck(link.pending.isEmpty, "procedures \(link.pending.sorted()) never ended")
    let held = link.client.services.reduce(0) { total, service in
        total + 1 + service.includes.count + service.characteristics.reduce(service.characteristics.count) { $0 + $1.descriptors.count }
    }
    fuzzCheck(held <= GATTClient.maxAttributes, "the client holds \(held) attributes from the server")
    generated?.restore()
    return 0
}

/// The server's database (bits 3–4 of the config byte). Built once per process: the server
/// keeps its per-link state (CCCDs, queues) itself, so links can share one.
enum FuzzDatabase: UInt8 {
    /// `LengthRulesDevice`: a characteristic for every length rule, descriptors, an included service.
    case lengthRules
    /// One service of 3,000 characteristics, most without descriptors (the walk that once
    /// recursed per characteristic; 10,000 are dumped in the unit and interop tests, here fewer
    /// keep the executions fast), every hundredth notifying with a description.
    case huge
    /// 250 secondary services, each including the one before, under one primary: inclusion
    /// followed level by level.
    case deep
    /// Both, one after the other.
    case hugeAndDeep

    static func huge() -> Service {
        Service(BluetoothUUID(high: 0xF0230000_0000_4000, low: 0x8000_0000_0000_0000)) {
            (0..<3_000).map { n -> Characteristic in
                let uuid = BluetoothUUID(UInt16(truncatingIfNeeded: 0x7000 + n % 0x0800))
                return n % 100 == 0
                    ? Characteristic(uuid, properties: [.read, .notify], descriptors: [.userDescription("c\(n)")],
                                     onRead: { _, value in value.append(UInt8(truncatingIfNeeded: n)); return nil })
                    : Characteristic(uuid, properties: [.read], cachedValue: [UInt8(truncatingIfNeeded: n)])
            }
        }
    }

    static func deep() -> [Service] {
        var chain: [Service] = []
        for level in 0..<250 {
            chain.append(Service(BluetoothUUID(UInt16(0xA000 + level)), primary: false, includes: chain.last.map { [$0] } ?? []) {
                Characteristic(0x2A19, properties: [.read], cachedValue: [UInt8(truncatingIfNeeded: level)])
            })
        }
        return chain + [Service(0x180F, includes: [chain[chain.count - 1]]) { Characteristic(0x2A19, properties: [.read], cachedValue: [1]) }]
    }

    // The fuzzer runs one input at a time on one thread.
    nonisolated(unsafe) static let hugeDatabase = build([huge()])
    nonisolated(unsafe) static let deepDatabase = build(deep())
    nonisolated(unsafe) static let hugeAndDeepDatabase = build([huge()] + deep())

    static func build(_ services: [Service]) -> GATTDatabase {
        do {
            return try GATTDatabase(services: services)
        } catch {
            fuzzFailure("a fuzz database does not build: \(error)")
        }
    }
}

/// A database generated from three bytes of the input: from one service to 200, from none to 250
/// characteristics each (at most 6,000 in all), descriptors or none, 16- and 128-bit UUIDs,
/// primary and secondary services including each other in chains (deep), fans, diamonds
/// (overlapping) — and handle gaps: some services taken out, as `blemu ctl … service` does, so
/// the server skips their handles. Built once per shape and kept (`cacheAttributeLimit`); the gaps
/// are undone after each input.
struct GeneratedDatabase {
    let database: GATTDatabase
    let removed: [Service]

    nonisolated(unsafe) static var cache: [Shape: GATTDatabase] = [:]
    /// The cached shapes, oldest first: the oldest go when a new one needs room.
    nonisolated(unsafe) static var cacheOrder: [Shape] = []
    /// Attributes in the cached databases: at most `cacheAttributeLimit` (about 100 MB with
    /// AddressSanitizer's redzones) — room for every small shape and a few dozen of the largest.
    nonisolated(unsafe) static var cachedAttributes = 0
    static let cacheAttributeLimit = 300_000

    /// What of the two bytes `services` reads: bytes that differ only elsewhere build the same
    /// database. Keyed by the raw bytes (65,536 keys for about 2,800 databases, and every 33rd
    /// new key emptied the cache), a third of the target's time went to building databases, and
    /// each build made libFuzzer run the input again under LeakSanitizer (memory kept past an
    /// input).
    struct Shape: Hashable {
        let a: UInt8
        let b: UInt8
        /// At most `boundedCharacteristics` in all, for an input whose link moves
        /// `Link.boundedMoves` PDUs: it never gets further, and building databases of thousands
        /// of characteristics for it (the cache holds a few dozen) was a fifth of the target's time.
        let bounded: Bool
        init(_ a: UInt8, _ b: UInt8, bounded: Bool) {
            self.bounded = bounded
            self.a = (a & 0x07) % UInt8(serviceCounts.count) | ((a >> 3) % UInt8(characteristicCounts.count)) << 3
            let inclusion = (b >> 2) & 0x07
            self.b = b & 0x63 | (inclusion <= 4 ? inclusion : 0) << 2
        }
    }

    static func take(_ a: UInt8, _ b: UInt8, _ gaps: UInt8, wholeWalk: Bool) -> GeneratedDatabase {
        let key = Shape(a, b, bounded: !wholeWalk)
        let database: GATTDatabase
        if let cached = cache[key] {
            database = cached
        } else {
            database = FuzzDatabase.build(services(key.a, key.b, characteristicLimit: key.bounded ? boundedCharacteristics : 6_000))
            while cachedAttributes + database.attributes.count > cacheAttributeLimit, !cacheOrder.isEmpty {
                cachedAttributes -= cache.removeValue(forKey: cacheOrder.removeFirst())?.attributes.count ?? 0
            }
            cache[key] = database
            cacheOrder.append(key)
            cachedAttributes += database.attributes.count
        }
        // Gaps: every k-th service out, last first (an included service stays while its includer is in).
        var removed: [Service] = []
        if gaps & 0x80 != 0 {
            let k = Int(gaps & 0x07) + 2
            for (n, service) in database.services.enumerated().reversed() where n % k == Int((gaps >> 3) & 0x07) % k {
                if (try? database.setService(service, present: false)) != nil { removed.append(service) }
            }
        }
        return GeneratedDatabase(database: database, removed: removed)
    }

    /// Puts back what `take` took out, first the included ones.
    func restore() {
        for service in removed.reversed() { _ = try? database.setService(service, present: true) }
    }

    static let serviceCounts = [1, 3, 16, 64, 200]
    static let characteristicCounts = [0, 1, 2, 5, 20, 60, 250]

    static let boundedCharacteristics = 400

    static func services(_ a: UInt8, _ b: UInt8, characteristicLimit: Int) -> [Service] {
        let count = serviceCounts[Int(a & 0x07) % serviceCounts.count]
        let perService = min(characteristicCounts[Int(a >> 3) % characteristicCounts.count], characteristicLimit / count)
        let descriptors = b & 0x03
        let inclusion = (b >> 2) & 0x07
        let longUUIDs = b & 0x20 != 0
        let secondary = b & 0x40 != 0
        var built: [Service] = []
        for n in 0..<count {
            var includes: [Service] = []
            switch inclusion {
            case 1: if let last = built.last { includes = [last] }                      // a chain: deep
            case 2: if let first = built.first { includes = [first] }                   // a fan
            case 3: includes = Array(built.suffix(2))                                   // diamonds: overlapping
            case 4: if n % 4 == 3 { includes = Array(built.suffix(3)) }
            default: break
            }
            let uuid = longUUIDs && n % 2 == 0
                ? BluetoothUUID(high: 0xF0240000_0000_4000 | UInt64(n), low: 0x8000_0000_0000_0000)
                : BluetoothUUID(UInt16(truncatingIfNeeded: 0xB000 + n))
            // The last service is primary, so there is always something to discover.
            let primary = !secondary || n % 2 == 1 || n == count - 1
            built.append(Service(uuid, primary: primary, includes: includes) {
                (0..<perService).map { c -> Characteristic in
                    let cu = longUUIDs && c % 3 == 0
                        ? BluetoothUUID(high: 0xF0250000_0000_4000 | UInt64(c), low: UInt64(n))
                        : BluetoothUUID(UInt16(truncatingIfNeeded: 0x7000 + c % 0x0800))
                    var list: [Descriptor] = []
                    if descriptors & 1 != 0 && c % 3 == 0 { list.append(.userDescription("s\(n)c\(c)")) }
                    let notify = descriptors & 2 != 0 && c % 2 == 0
                    let value: [UInt8] = [UInt8(truncatingIfNeeded: c), UInt8(truncatingIfNeeded: n)]
                    // Cached values are read-only; the notifying and writable ones answer from a
                    // handler (stateless: the database is shared by every input of its shape).
                    if notify || c % 4 == 1 {
                        return Characteristic(cu, properties: notify ? [.read, .write, .notify] : [.read, .write],
                                              descriptors: list, onRead: { _, out in out.append(contentsOf: value); return nil },
                                              onWrite: { _ in nil })
                    }
                    return Characteristic(cu, properties: [.read], cachedValue: value, descriptors: list)
                }
            })
        }
        return built
    }
}

final class Link: ATTServerDelegate {
    let scheduler = ManualScheduler()
    /// One device and database for every input of the length-rules kind (building them was a
    /// twentieth of an execution); its values go back to their first state for each input.
    nonisolated(unsafe) static let lengthRulesDevice = LengthRulesDevice()
    nonisolated(unsafe) static let lengthRulesDatabase = FuzzDatabase.build(lengthRulesDevice.services)
    let device = Link.lengthRulesDevice
    let server: ATTServer
    var client: GATTClient!
    let trace = fuzzTrace
    /// PDUs on the link, in order: true for client to server.
    private var queue: [(toServer: Bool, pdu: [UInt8])] = []
    var corruption: (index: Int, mask: UInt8)?
    /// Procedures started and not ended yet.
    var pending = Set<Int>()
    private var nextID = 0
    /// A request of the client is outstanding (sent, and no response delivered to it since).
    private var outstanding = false
    private var closed = false

    /// The server's database, for the records that name one of its handles.
    let database: GATTDatabase
    /// PDUs the link may still move in this input. A whole discovery of a big database per
    /// input made the target run a few hundred inputs a second: most inputs get `boundedMoves`
    /// (enough for every procedure on the length-rules database, and the first hundreds of PDUs
    /// of a big walk); a quarter (config bits 6 and 7) get `walkMoves` and walk to the end.
    /// What is left when the budget runs out ends with the timeout and the close, as every
    /// input does.
    private var movesLeft: Int
    static let boundedMoves = 512
    /// A whole discovery of the largest database served, with room to spare: 200 generated
    /// services of 30 characteristics with descriptors, at ATT_MTU 23, is about 18,000 PDUs
    /// (the huge one 2,100, huge and deep 4,600). Without a bound, inputs that started the walk
    /// again and again took a tenth of a second and more each (one moved 290,000 PDUs), and
    /// the long run's corpus drifted toward them until it ran 90 inputs a second; a second
    /// walk of a big database reaches nothing that a second walk of a small one does not.
    static let walkMoves = 24_576

    init(serverRxMTU: Int, database kind: FuzzDatabase, generated: GATTDatabase?, movesLeft: Int) {
        self.movesLeft = movesLeft
        switch kind {
        case _ where generated != nil: database = generated!
        case .lengthRules:
            device.storage.reset()
            database = Link.lengthRulesDatabase
        case .huge: database = FuzzDatabase.hugeDatabase
        case .deep: database = FuzzDatabase.deepDatabase
        case .hugeAndDeep: database = FuzzDatabase.hugeAndDeepDatabase
        }
        server = ATTServer(database: database, peer: ATTPeer(connectionHandle: 0x40, address: BluetoothAddress("F0:F1:F2:F3:F4:F5")!),
                           scheduler: scheduler, serverRxMTU: serverRxMTU)
        server.delegate = self
        client = GATTClient(scheduler: scheduler) { [unowned self] pdu in self.clientSent(pdu) }
    }

    /// The handle of the attribute `byte` picks (of the first 256). Looked up, not listed: a
    /// list of every handle per input cost a huge database's length in each input.
    func handle(_ byte: UInt8) -> UInt16 {
        let attributes = database.attributes
        return attributes.isEmpty ? 1 : attributes[Int(byte) % attributes.count].handle
    }

    private func clientSent(_ pdu: [UInt8]) -> Bool {
        if trace { writeStandardError("c> \(hex(pdu))\n") }
        fuzzCheck(!closed, "the client sent \(hex(pdu)) after the link closed")
        fuzzCheck(!client.isTimedOut, "the client sent \(hex(pdu)) after its transaction timed out")
        guard let opcode = pdu.first else { fuzzFailure("the client sent an empty PDU") }
        fuzzCheck(pdu.count <= client.mtu, "a \(pdu.count)-byte PDU at ATT_MTU \(client.mtu): \(hex(pdu))")
        if ATTOpcode.isRequestForm(opcode) && opcode != ATTOpcode.handleValueConfirmation.rawValue {
            fuzzCheck(!outstanding, "request \(hex(pdu)) sent while another is outstanding")
            outstanding = true
            Self.checkDecodes(pdu)
        }
        queue.append((true, pdu))
        return true
    }

    /// The server's own decoders must accept what the client sends.
    private static func checkDecodes(_ pdu: [UInt8]) {
        let slice = pdu[...]
        do {
            switch pdu[0] {
            case 0x02: _ = try ATTExchangeMTURequest(pdu: slice)
            case 0x04: _ = try ATTFindInformationRequest(pdu: slice)
            case 0x06: _ = try ATTFindByTypeValueRequest(pdu: slice)
            case 0x08: _ = try ATTReadByTypeRequest(pdu: slice)
            case 0x0A: _ = try ATTReadRequest(pdu: slice)
            case 0x0C: _ = try ATTReadBlobRequest(pdu: slice)
            case 0x0E: _ = try ATTReadMultipleRequest(pdu: slice)
            case 0x10: _ = try ATTReadByGroupTypeRequest(pdu: slice)
            case 0x12: _ = try ATTWriteRequest(pdu: slice)
            case 0x16: _ = try ATTPrepareWriteRequest(pdu: slice)
            case 0x18: _ = try ATTExecuteWriteRequest(pdu: slice)
            case 0x20: _ = try ATTReadMultipleVariableRequest(pdu: slice)
            default: fuzzFailure("the client sent request \(hex(pdu)), which it has no procedure for")
            }
        } catch {
            fuzzFailure("the client's request \(hex(pdu)) does not decode: \(error)")
        }
    }

    /// A PDU to the client, from the input or the server.
    private func deliver(_ pdu: [UInt8]) {
        if trace { writeStandardError("s> \(hex(pdu))\n") }
        if let opcode = pdu.first, GATTClient.isForClient(opcode),
           opcode != ATTOpcode.handleValueNotification.rawValue, opcode != ATTOpcode.handleValueIndication.rawValue,
           opcode != ATTOpcode.multipleHandleValueNotification.rawValue {
            outstanding = false
        }
        client.receive(pdu[...])
    }

    func inject(_ pdu: [UInt8]) { deliver(pdu) }

    func move(_ count: Int) {
        var moved = 0
        while moved < count, !queue.isEmpty, movesLeft > 0 {
            moved += 1
            movesLeft -= 1
            let (toServer, pdu) = queue.removeFirst()
            if toServer {
                server.receive(pdu[...])
            } else {
                var pdu = pdu
                if let (index, mask) = corruption, index < pdu.count {
                    pdu[index] ^= mask
                    corruption = nil
                }
                deliver(pdu)
            }
        }
    }

    func close() {
        guard !closed else { return }
        closed = true
        queue.removeAll()
        _ = server.close()
        client.close()
        fuzzCheck(pending.isEmpty, "procedures \(pending.sorted()) did not end when the link closed")
    }

    /// Starts one procedure; its completion must come exactly once.
    func start(procedure: UInt8, handle: UInt16) {
        let id = nextID
        nextID += 1
        pending.insert(id)
        func done<T>(_ result: Result<T, GATTClientError>) {
            fuzzCheck(pending.remove(id) != nil, "procedure \(id) (\(procedure % 11)) ended twice: \(result)")
            if client.isTimedOut { outstanding = false }
        }
        let big = Array(device.storage.big.prefix(200))
        switch procedure % 11 {
        case 0: client.discoverAll { done($0) }
        case 1: client.discoverPrimaryServices(BluetoothUUID(0x180D)) { done($0) }
        case 2: client.read(handle) { done($0) }
        case 3: client.readMultiple([handle, handle &+ 1]) { done($0) }
        case 4: client.readMultipleVariable([handle, handle &+ 2]) { done($0) }
        case 5: client.write(handle, [UInt8(truncatingIfNeeded: handle)]) { done($0) }
        case 6: client.write(handle, big) { done($0) }
        case 7: client.reliableWrite([(handle, [1, 2, 3]), (handle &+ 1, big)]) { done($0) }
        case 8: client.exchangeMTU(Int(handle)) { done($0) }
        case 9:
            _ = client.writeWithoutResponse(handle, [0x01])
            pending.remove(id)
        default:
            if let characteristic = client.services.flatMap(\.characteristics).first(where: { $0.clientConfigurationHandle != nil }) {
                client.configure(characteristic, notify: true, indicate: handle & 1 == 0) { done($0) }
            } else {
                pending.remove(id)
            }
        }
        // A timed-out or closed client ends what it is given at once.
        if client.isTimedOut || closed { fuzzCheck(!pending.contains(id), "procedure \(id) waits on a dead bearer") }
    }

    // MARK: ATTServerDelegate

    func attServer(_ server: ATTServer, send pdu: ArraySlice<UInt8>, kind: ATTSendKind) -> Bool {
        guard !closed else { return false }
        queue.append((false, Array(pdu)))
        return true
    }
    func attServerTransactionTimedOut(_ server: ATTServer) {}
}

/// `BLEMU_FUZZ_TRACE=1`: every PDU on the link on stderr.
let fuzzTrace = fuzzEnvironmentFlag("BLEMU_FUZZ_TRACE")

@_cdecl("gatt_client_main")
public func gattClientMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    blemu_fuzz_driver(argc, argv) { data, size in fuzz(data, size) }
}
