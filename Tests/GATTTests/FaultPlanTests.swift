import BlemuATT
import BlemuCore
import Testing
@testable import BlemuGATT

/// Faults asked for by a test script look on the air exactly like a device that answered so.
@Suite struct FaultPlanTests {
    private func rig() throws -> (Fixture, FaultPlan) {
        let f = try Fixture()
        let plan = FaultPlan()
        f.server.faults = plan
        return (f, plan)
    }

    @Test func errorForTheNextNRequestsThenNormal() throws {
        let (f, plan) = try rig()
        plan.add(.error(.application(0x05)), valueHandle: 0x000A, count: 2)
        #expect(f.request("0A 0A00") == errorResponse(0x0A, 0x000A, .application(0x05)))
        #expect(f.request("0C 0A00 0000") == errorResponse(0x0C, 0x000A, .application(0x05)))
        #expect(f.request("0A 0A00") == [bytes("0B 01")])
        #expect(f.log.dynamicReads == 1, "a faulted request never reaches the device")
        #expect(plan.isEmpty)
    }

    @Test func writesTooAndCommandsVanish() throws {
        let (f, plan) = try rig()
        plan.add(.error(.writeNotPermitted), valueHandle: 0x000F, count: nil)
        #expect(f.request("12 0F00 01") == errorResponse(0x12, 0x000F, .writeNotPermitted))
        #expect(f.request("52 0F00 01") == [])
        #expect(f.log.writes.isEmpty)
        // Other attributes are untouched; until cleared it keeps applying.
        #expect(f.request("12 1100 0102") == [bytes("13")])
        #expect(f.request("12 0F00 01") == errorResponse(0x12, 0x000F, .writeNotPermitted))
        plan.clear()
        #expect(f.request("12 0F00 01") == [bytes("13")])
    }

    /// A delayed request is answered late, and nothing else is answered before it: the client
    /// has one request outstanding (Vol 3, Part F, 3.3.2).
    @Test func delayKeepsOneRequestAtATime() throws {
        let (f, plan) = try rig()
        plan.add(.delay(.milliseconds(500)), valueHandle: 0x000A, count: 1)
        #expect(f.request("0A 0A00") == [])
        // A misbehaving client's second request waits behind the first.
        #expect(f.request("0A 0300") == [])
        f.scheduler.advance(by: .milliseconds(499))
        #expect(f.sent(.response).isEmpty)
        f.scheduler.advance(by: .milliseconds(1))
        #expect(f.sent(.response) == [bytes("0B 01"), [0x0B] + deviceName.prefix(22)])
        // Commands and confirmations are not held.
        plan.add(.delay(.seconds(1)), valueHandle: 0x000A, count: 1)
        #expect(f.request("0A 0A00") == [])
        _ = f.request("52 0F00 07")
        #expect(f.log.writes.map(\.request.value) == [[7]])
        f.scheduler.advance(by: .seconds(1))
        #expect(f.sent(.response).count == 3)
    }

    @Test func dropNotificationsAndIndications() throws {
        let (f, plan) = try rig()
        f.configure(13, 0x0003)
        plan.add(.drop, valueHandle: 0x000C, count: 2)
        #expect(f.server.notify(f.notifyIndicate, value: [1]) == .queued)
        var outcomes: [IndicationOutcome] = []
        #expect(f.server.indicate(f.notifyIndicate, value: [2], completion: { _, o in outcomes.append(o) }) == .queued)
        #expect(f.sent(.notification).isEmpty)
        #expect(f.sent(.indication).isEmpty)
        #expect(outcomes == [.notSent])
        #expect(f.server.notify(f.notifyIndicate, value: [3]) == .queued)
        #expect(f.sent(.notification) == [bytes("1B 0C00 03")])
        // A drop never touches requests.
        plan.add(.drop, valueHandle: 0x000A, count: nil)
        #expect(f.request("0A 0A00") == [bytes("0B 01")])
    }

    @Test func closingTheLinkDropsAHeldRequest() throws {
        let (f, plan) = try rig()
        plan.add(.delay(.seconds(5)), valueHandle: 0x000A, count: 1)
        #expect(f.request("0A 0A00") == [])
        _ = f.server.close()
        #expect(f.scheduler.pendingCount == 0)
        f.scheduler.advance(by: .seconds(6))
        #expect(f.sent(.response).isEmpty)
    }
}
