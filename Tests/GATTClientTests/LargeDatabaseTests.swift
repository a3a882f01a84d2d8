import BlemuATT
import BlemuCore
import BlemuGATT
import Testing
@testable import BlemuGATTClient

/// A GATT client and blemu's ATT server over any database, on an in-process bearer that moves
/// one PDU at a time, as a link does (nothing is answered from inside `send`).
final class DatabaseBearer: ATTServerDelegate {
    let scheduler = ManualScheduler()
    let database: GATTDatabase
    let server: ATTServer
    var client: GATTClient!
    private var toServer: [[UInt8]] = []
    private var toClient: [[UInt8]] = []
    private var nextToServer = 0
    private var nextToClient = 0
    var tamper: ((inout [UInt8]) -> Void)?
    var requests = 0

    init(_ services: [Service], attributeLimit: Int = GATTClient.maxAttributes) throws {
        database = try GATTDatabase(services: services)
        server = ATTServer(database: database, peer: ATTPeer(connectionHandle: 0x40, address: BluetoothAddress("C0:01:02:03:04:05")!),
                           scheduler: scheduler)
        server.delegate = self
        client = GATTClient(scheduler: scheduler, attributeLimit: attributeLimit) { [unowned self] pdu in
            self.requests += 1
            self.toServer.append(pdu)
            return true
        }
    }

    func run<T>(_ start: (GATTClient, @escaping (Result<T, GATTClientError>) -> Void) -> Void) -> Result<T, GATTClientError>? {
        var result: Result<T, GATTClientError>?
        start(client) { result = $0 }
        while nextToServer < toServer.count || nextToClient < toClient.count {
            if nextToServer < toServer.count {
                nextToServer += 1
                server.receive(toServer[nextToServer - 1][...])
            } else {
                nextToClient += 1
                var pdu = toClient[nextToClient - 1]
                tamper?(&pdu)
                client.receive(pdu[...])
            }
        }
        return result
    }

    func attServer(_ server: ATTServer, send pdu: ArraySlice<UInt8>, kind: ATTSendKind) -> Bool {
        toClient.append(Array(pdu))
        return true
    }
    func attServerTransactionTimedOut(_ server: ATTServer) {}
}

/// The address of a local of the caller's frame: how far the stack reaches now.
@inline(never) func stackPosition() -> UInt {
    var marker = 0
    return withUnsafeMutablePointer(to: &marker) { UInt(bitPattern: $0) }
}

func readOnly(_ n: Int) -> Characteristic {
    Characteristic(BluetoothUUID(high: 0xF0330000_0000_4000, low: 0x8000_0000_0000_0000 | UInt64(n)), properties: [.read],
                   cachedValue: [UInt8(truncatingIfNeeded: n)])
}

@Suite struct GATTClientLargeDatabaseTests {
    /// A service with thousands of characteristics and no descriptors: described one after
    /// another in a loop, not by recursing on the rest of the list (which grew the stack and
    /// copied the list at every characteristic: quadratic memory, then a stack overflow).
    @Test func thousandsOfCharacteristicsAreDiscoveredWithAFlatStack() throws {
        let count = 3000
        let b = try DatabaseBearer([Service(0x1800) { Characteristic(0x2A00, properties: [.read], cachedValue: [0x41]) },
                                    Service(0xFFF0) { (0..<count).map(readOnly) }])
        _ = b.run { $0.exchangeMTU(517, completion: $1) }
        let base = stackPosition()
        var depth: UInt = 0
        let services = try #require(b.run { client, completion in
            client.discoverAll { result in
                depth = base &- stackPosition()
                completion(result)
            }
        }?.value)
        #expect(services.count == 2)
        #expect(services[1].characteristics.count == count)
        #expect(services[1].characteristics.map(\.valueHandle) == b.database.services[1].characteristics.map(\.valueHandle))
        #expect(services[1].characteristics.allSatisfy { $0.descriptors.isEmpty })
        // The completion runs a few calls below `receive`, not thousands.
        #expect(depth < 64 * 1024, "discovery finished \(depth) bytes deep in the stack")
        // No Find Information for a characteristic with no handle after its value (Vol 3, Part G, 4.7.1).
        #expect(b.requests < 200, "\(b.requests) requests")
    }

    /// Included services that include others in turn (Vol 3, Part G, 3.2): every level is found.
    @Test func includedServicesAreFollowedAtEveryDepth() throws {
        var chain: [Service] = []
        for level in 0..<300 {
            chain.append(Service(BluetoothUUID(UInt16(0xA000 + level)), primary: false, includes: chain.last.map { [$0] } ?? []) {
                Characteristic(0x2A19, properties: [.read], cachedValue: [UInt8(truncatingIfNeeded: level)])
            })
        }
        let top = Service(0x180F, includes: [chain[chain.count - 1]]) { Characteristic(0x2A19, properties: [.read], cachedValue: [1]) }
        let b = try DatabaseBearer(chain + [top])
        let services = try #require(b.run { $0.discoverAll(completion: $1) }?.value)
        #expect(services.count == 301)
        #expect(services.map(\.handles) == b.database.services.map { $0.startHandle...$0.endHandle })
        #expect(services.filter(\.service.isPrimary).map(\.uuid) == [BluetoothUUID(0x180F)])
    }

    /// What a discovery holds is capped: a server reporting more ends it with a clear error.
    @Test func theAttributeLimitEndsADiscoveryOfMore() throws {
        let services = [Service(0xFFF0) { (0..<150).map(readOnly) }]
        let capped = try DatabaseBearer(services, attributeLimit: 100)
        #expect(capped.run { $0.discoverAll(completion: $1) }?.error == .tooManyAttributes(limit: 100))
        #expect(capped.client.services.isEmpty)
        let roomy = try DatabaseBearer(services, attributeLimit: 151)
        #expect(roomy.run { $0.discoverAll(completion: $1) }?.value?.first?.characteristics.count == 150)
        #expect(GATTClient(scheduler: ManualScheduler(), attributeLimit: 1_000_000) { _ in true }.attributeLimit == 65_535)
    }

    /// Items within one response move forward too: a server repeating an item in a response
    /// cannot multiply what the client holds (each walk holds at most one item per handle).
    @Test func itemsRepeatedWithinAResponseAreMalformed() throws {
        let b = try DatabaseBearer([Service(0xFFF0) { Characteristic(0x2A37, properties: [.notify]) }])
        b.tamper = { pdu in if pdu.first == 0x11 { pdu = hex("11 06 0100 0500 F0FF 0100 0500 F0FF") } }
        guard case .malformedResponse = b.run({ $0.discoverPrimaryServices(completion: $1) })?.error else {
            Issue.record("repeated services accepted")
            return
        }
        b.tamper = { pdu in if pdu.first == 0x09 { pdu = hex("09 07 0200 10 0300 372A 0200 10 0300 372A") } }
        guard case .malformedResponse = b.run({ $0.discoverCharacteristics(of: DiscoveredService(uuid: BluetoothUUID(0xFFF0), handles: 1...4),
                                                                           completion: $1) })?.error else {
            Issue.record("repeated characteristics accepted")
            return
        }
        b.tamper = { pdu in if pdu.first == 0x05 { pdu = hex("05 01 0400 0229 0400 0229") } }
        let characteristic = DiscoveredCharacteristic(uuid: BluetoothUUID(0x2A37), properties: [.notify], declarationHandle: 2,
                                                      valueHandle: 3, endHandle: 4)
        guard case .malformedResponse = b.run({ $0.discoverDescriptors(of: characteristic, completion: $1) })?.error else {
            Issue.record("repeated descriptors accepted")
            return
        }
    }
}
