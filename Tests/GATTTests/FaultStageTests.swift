import BlemuATT
import BlemuCore
import Testing
@testable import BlemuGATT

/// What a fault stage heard it applied.
private final class InjectedFaults: FaultStageDelegate {
    var applied: [(action: FaultPlan.Action, handle: UInt16, opcode: UInt8)] = []
    func faultStage(_ stage: FaultStage, injected fault: FaultPlan.Action, handle: UInt16, opcode: UInt8) {
        applied.append((fault, handle, opcode))
    }
}

/// Faults asked for by a test script look on the air exactly like a device that answered so.
/// They are a stage between the bearer and the server: the fixture's requests go in through the
/// bearer, and its updates through the stage, as a device's links do.
@Suite struct FaultStageTests {
    private final class Rig {
        let f: Fixture
        let plan = FaultPlan()
        let stage: FaultStage
        let heard = InjectedFaults()
        init() throws {
            f = try Fixture()
            stage = FaultStage(server: f.server, plan: plan, scheduler: f.scheduler)
            stage.delegate = heard
        }
        /// One PDU from the client through the bearer; the responses sent for it.
        @discardableResult
        func request(_ hex: String) -> [[UInt8]] {
            let before = f.delegate.sent.count
            f.server.bearer.receive(bytes(hex)[...])
            return f.delegate.sent[before...].filter { $0.kind == .response }.map(\.pdu)
        }
        var log: DeviceLog { f.log }
        var scheduler: ManualScheduler { f.scheduler }
        func sent(_ kind: ATTSendKind) -> [[UInt8]] { f.sent(kind) }
    }

    private func rig() throws -> (Rig, FaultPlan) {
        let r = try Rig()
        return (r, r.plan)
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
        f.f.configure(13, 0x0003)
        plan.add(.drop, valueHandle: 0x000C, count: 2)
        #expect(f.stage.notify(f.f.notifyIndicate, value: [1]) == .queued)
        var outcomes: [IndicationOutcome] = []
        #expect(f.stage.indicate(f.f.notifyIndicate, value: [2], completion: { _, o in outcomes.append(o) }) == .queued)
        #expect(f.sent(.notification).isEmpty)
        #expect(f.sent(.indication).isEmpty)
        #expect(outcomes == [.notSent])
        #expect(f.stage.notify(f.f.notifyIndicate, value: [3]) == .queued)
        #expect(f.sent(.notification) == [bytes("1B 0C00 03")])
        // A drop never touches requests.
        plan.add(.drop, valueHandle: 0x000A, count: nil)
        #expect(f.request("0A 0A00") == [bytes("0B 01")])
    }

    @Test func closingTheLinkDropsAHeldRequest() throws {
        let (f, plan) = try rig()
        plan.add(.delay(.seconds(5)), valueHandle: 0x000A, count: 1)
        #expect(f.request("0A 0A00") == [])
        f.stage.close()
        _ = f.f.server.close()
        #expect(f.scheduler.pendingCount == 0)
        f.scheduler.advance(by: .seconds(6))
        #expect(f.sent(.response).isEmpty)
    }

    /// With nothing planned the stage passes everything through as it came, both ways.
    @Test func nothingPlannedPassesThrough() throws {
        let (f, _) = try rig()
        #expect(f.request("0A 0A00") == [bytes("0B 01")])
        #expect(f.request("12 0F00 05") == [bytes("13")])
        f.f.configure(13, 0x0003)
        var outcomes: [IndicationOutcome] = []
        #expect(f.stage.notify(f.f.notifyIndicate, value: [1]) == .queued)
        #expect(f.stage.indicate(f.f.notifyIndicate, value: [2], completion: { _, o in outcomes.append(o) }) == .queued)
        #expect(f.sent(.notification) == [bytes("1B 0C00 01")])
        #expect(f.sent(.indication) == [bytes("1D 0C00 02")])
        // The confirmation reaches the server through the stage.
        f.request("1E")
        #expect(outcomes == [.confirmed])
        #expect(f.heard.applied.isEmpty)
        #expect(f.scheduler.pendingCount == 0)
    }

    /// The stage's delegate hears each fault it applied, with the handle and the opcode it hit.
    @Test func theDelegateHearsEachFault() throws {
        let (f, plan) = try rig()
        f.f.configure(13, 0x0001)
        plan.add(.error(.application(0x80)), valueHandle: 0x000A, count: 1)
        plan.add(.drop, valueHandle: 0x000C, count: 1)
        f.request("0A 0A00")
        _ = f.stage.notify(f.f.notifyIndicate, value: [1])
        #expect(f.heard.applied.map(\.action) == [.error(.application(0x80)), .drop])
        #expect(f.heard.applied.map(\.handle) == [0x000A, 0x000C])
        #expect(f.heard.applied.map(\.opcode) == [0x0A, 0x1B])
        // An error answered by the stage is still an answer the server counts.
        #expect(f.f.delegate.answered.last?.error == .application(0x80))
    }

    /// A request answered with an error by the stage ends a long read in progress, as any other
    /// request does (Vol 3, Part G, 4.8.3): the next Read Blob asks the device again.
    @Test func anErrorEndsALongRead() throws {
        let (f, plan) = try rig()
        f.request("0A 1900")
        #expect(f.log.longReadOffsets == [0])
        plan.add(.error(.application(0x80)), valueHandle: 0x000A, count: 1)
        #expect(f.request("0A 0A00") == errorResponse(0x0A, 0x000A, .application(0x80)))
        f.request("0C 1900 1600")
        #expect(f.log.longReadOffsets == [0, 22])
    }

    /// A drop is taken by the update the device asks for next, not by one waiting behind an
    /// indication in flight, and the dropped indication never goes in flight.
    @Test func aDroppedIndicationIsTheOneAskedFor() throws {
        let (f, plan) = try rig()
        f.f.configure(13, 0x0002)
        var outcomes: [String] = []
        _ = f.stage.indicate(f.f.notifyIndicate, value: [1], completion: { _, o in outcomes.append("1 \(o)") })
        _ = f.stage.indicate(f.f.notifyIndicate, value: [2], completion: { _, o in outcomes.append("2 \(o)") })
        plan.add(.drop, valueHandle: 0x000C, count: 1)
        _ = f.stage.indicate(f.f.notifyIndicate, value: [3], completion: { _, o in outcomes.append("3 \(o)") })
        #expect(outcomes == ["3 notSent"])
        f.request("1E")
        f.request("1E")
        #expect(f.sent(.indication) == [bytes("1D 0C00 01"), bytes("1D 0C00 02")])
        #expect(outcomes == ["3 notSent", "1 confirmed", "2 confirmed"])
        #expect(f.f.server.indicationsWaiting == 0)
    }

    /// A server that timed out or closed answers nothing and takes no fault: the plan is kept
    /// for the device's other links.
    @Test func aDeadServerTakesNoFault() throws {
        let (f, plan) = try rig()
        f.f.configure(13, 0x0001)
        plan.add(.error(.application(0x80)), valueHandle: 0x000A, count: 1)
        plan.add(.drop, valueHandle: 0x000C, count: 1)
        _ = f.f.server.close()
        #expect(f.request("0A 0A00") == [])
        #expect(f.stage.notify(f.f.notifyIndicate, value: [1]) == .notSubscribed)
        #expect(plan.planned.count == 2)
        #expect(f.heard.applied.isEmpty)
    }
}

/// The stage is on the request path only while its plan has faults: the bearer hands the
/// client's PDUs straight to the server otherwise (Docs/ARCHITECTURE.md, BlemuGATT).
@Suite struct FaultStageInstallationTests {
    @Test func theStageStandsInFrontOfTheServerOnlyWhileAFaultIsPlanned() throws {
        let f = try Fixture()
        let plan = FaultPlan()
        let stage = FaultStage(server: f.server, plan: plan, scheduler: f.scheduler)
        #expect(!stage.isOnRequestPath)
        #expect((f.server.bearer.server as AnyObject?) === f.server)
        plan.add(.error(.application(0x05)), valueHandle: 0x000A, count: 1)
        #expect(stage.isOnRequestPath)
        f.server.bearer.receive(bytes("0A 0A00")[...])
        #expect(f.sent(.response) == errorResponse(0x0A, 0x000A, .application(0x05)))
        // The fault used up, the plan is empty: the stage steps out.
        #expect(plan.isEmpty && !stage.isOnRequestPath)
        #expect((f.server.bearer.server as AnyObject?) === f.server)
    }

    /// A delayed request keeps the stage in place until it is answered, though the plan
    /// emptied when the delay was taken.
    @Test func aHeldRequestKeepsTheStageUntilItIsAnswered() throws {
        let f = try Fixture()
        let plan = FaultPlan()
        let stage = FaultStage(server: f.server, plan: plan, scheduler: f.scheduler)
        plan.add(.delay(.milliseconds(100)), valueHandle: 0x000A, count: 1)
        f.server.bearer.receive(bytes("0A 0A00")[...])
        #expect(plan.isEmpty && stage.isOnRequestPath)
        f.scheduler.advance(by: .milliseconds(100))
        #expect(f.sent(.response) == [bytes("0B 01")])
        #expect(!stage.isOnRequestPath)
    }
}
