import BlemuCore
import BlemuCrypto
import BlemuSMP
import Testing
@testable import BlemuSecurity

/// The one driver of a link's pairing machine, the same for both roles: PDUs out in order, the
/// 30 s SMP timer (Vol 3, Part H, 3.4), then the events.
@Suite struct SMPLinkDriverTests {
    static let central = LEAddress(BluetoothAddress(value: 0xC0_11_22_33_44_55), isRandom: true)
    static let peripheral = LEAddress(BluetoothAddress(value: 0x00_AA_BB_CC_DD_EE), isRandom: false)

    final class Recorder<Event> {
        var pdus: [[UInt8]] = []
        var events: [Event] = []
    }

    static func responder(_ scheduler: ManualScheduler) -> (SMPLinkDriver<SMPResponder>, Recorder<SMPResponderEvent>) {
        let recorder = Recorder<SMPResponderEvent>()
        let machine = SMPResponder(configuration: SMPResponderConfiguration(), initiatorAddress: central, responderAddress: peripheral)
        let driver = SMPLinkDriver(machine, scheduler: scheduler) { recorder.pdus.append($0) }
        driver.onEvent = { recorder.events.append($0) }
        return (driver, recorder)
    }

    static func initiator(_ scheduler: ManualScheduler) -> (SMPLinkDriver<SMPInitiator>, Recorder<SMPInitiatorEvent>) {
        let recorder = Recorder<SMPInitiatorEvent>()
        let machine = SMPInitiator(configuration: SMPInitiatorConfiguration(), initiatorAddress: central, responderAddress: peripheral)
        let driver = SMPLinkDriver(machine, scheduler: scheduler) { recorder.pdus.append($0) }
        driver.onEvent = { recorder.events.append($0) }
        return (driver, recorder)
    }

    /// The responder answers a Pairing Request, the timer runs; 30 s later the pairing fails with
    /// the timeout and SMP is over on the link.
    @Test func aResponderTimesOutThirtySecondsAfterItsLastPDU() {
        let scheduler = ManualScheduler()
        let (driver, recorder) = Self.responder(scheduler)
        let request = SMPPairingRequest(SMPPairingFeatures(
            ioCapability: .noInputNoOutput, oobDataPresent: false,
            authRequirements: SMPAuthRequirements(bonding: true, mitm: false, secureConnections: true),
            initiatorKeyDistribution: [], responderKeyDistribution: [])).encoded
        driver.run { $0.receive(request[...]) }
        #expect(recorder.pdus.first?.first == SMPCode.pairingResponse.rawValue)
        #expect(scheduler.pendingCount == 1)
        scheduler.advance(by: .seconds(29))
        #expect(driver.machine.isPairing && recorder.events.isEmpty)
        scheduler.advance(by: .seconds(2))
        #expect(recorder.events == [.failed(reason: nil, origin: .timeout)])
        #expect(driver.machine.hasTimedOut && scheduler.pendingCount == 0)
    }

    /// The initiator's Pairing Request starts the same timer; Pairing Failed from the peer stops it.
    @Test func anInitiatorsTimerStopsWhenThePairingEnds() {
        let scheduler = ManualScheduler()
        let (driver, recorder) = Self.initiator(scheduler)
        driver.run { $0.start() }
        #expect(recorder.pdus.first?.first == SMPCode.pairingRequest.rawValue)
        #expect(scheduler.pendingCount == 1)
        driver.run { $0.receive(SMPPairingFailed(reason: .pairingNotSupported).encoded[...]) }
        #expect(recorder.events == [.failed(reason: .pairingNotSupported, origin: .peer)])
        #expect(scheduler.pendingCount == 0)
        scheduler.advance(by: .seconds(31))
        #expect(recorder.events.count == 1)
    }

    /// A closed link's timer never fires and its machine's events reach no one.
    @Test func closingStopsTheTimerAndTheEvents() {
        let scheduler = ManualScheduler()
        let (driver, recorder) = Self.initiator(scheduler)
        driver.run { $0.start() }
        driver.close()
        #expect(scheduler.pendingCount == 0)
        scheduler.advance(by: .seconds(31))
        driver.run { $0.abort(.unspecifiedReason) }
        #expect(recorder.events.isEmpty)
        #expect(driver.machine.isPairing == false)
    }
}
