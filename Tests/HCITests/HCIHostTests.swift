import Testing
import BlemuCore
import Logging
@testable import BlemuHCI
import BlemuL2CAP
import BlemuSimulator
import BlemuTestSupport

/// HCIHost against a controller played by hand: command flow control (Vol 4, Part E, 4.4),
/// initialization (Vol 4, Part E, 4 and 7), ACL flow control (Vol 4, Part E, 4.1.1 and 4.3).

private final class RecordingDelegate: HCIHostDelegate {
    var readyCount = 0
    var resetReasons: [String] = []
    var events: [HCIEvent] = []
    var aclPackets: [ACLPacket] = []
    var roomFor: [UInt16] = []
    /// Runs when the host reports room, to test re-entrant sends.
    var onRoom: ((UInt16) -> Void)?

    func hciHostDidBecomeReady(_ host: HCIHost) { readyCount += 1 }
    func hciHostDidReset(_ host: HCIHost, reason: String) { resetReasons.append(reason) }
    func hciHost(_ host: HCIHost, didReceive event: HCIEvent) { events.append(event) }
    func hciHost(_ host: HCIHost, didReceiveACL packet: ACLPacket) { aclPackets.append(packet) }
    func hciHost(_ host: HCIHost, transmitQueueHasRoomFor handle: UInt16) {
        roomFor.append(handle)
        onRoom?(handle)
    }
}

private struct SentPacket {
    let type: UInt8
    let bytes: [UInt8]
    var opcode: UInt16? { type == 0x01 && bytes.count >= 2 ? UInt16(bytes[0]) | UInt16(bytes[1]) << 8 : nil }
    var acl: ACLPacket? { type == 0x02 ? try? ACLPacket(packet: bytes[...]) : nil }
}

/// An HCIHost against the simulated controller, answered by hand (the test says when each
/// command is answered, and how), with a manual clock and a recording delegate. The controller
/// by default: C0:DE:00:00:BE:EF, Bluetooth 5.4 from manufacturer 0x005F, no LE features, two
/// LE ACL buffers of 27 bytes.
private final class Rig {
    /// A controller with `buffers` ACL buffers of 27 bytes, initialized, with links 0x0040 and
    /// 0x0041 open and nothing recorded yet.
    static func twoLinks(buffers: UInt8) -> Rig {
        let rig = Rig { $0.aclBufferSize = 27; $0.aclBufferCount = buffers }
        rig.bringUp()
        rig.host.openLink(0x0040)
        rig.host.openLink(0x0041)
        rig.clearSent()
        return rig
    }

    let scheduler = ManualScheduler()
    let delegate = RecordingDelegate()
    let controller = SimulatedController()
    /// Every packet the host sent, commands and ACL data in order.
    private(set) var sent: [SentPacket] = []
    var completesInsideOutput = false
    /// How many of `commands` have been answered by `answer...`.
    private var answeredCommands = 0
    var host: HCIHost!

    init(logger: Logger = Logger(label: "hci-test", factory: { _ in SwiftLogNoOpLogHandler() }),
         _ configure: (SimulatedController) -> Void = { _ in }) {
        controller.address = BluetoothAddress("C0:DE:00:00:BE:EF")!
        controller.manufacturer = 0x005F
        controller.supportsDataLengthExtension = false
        controller.aclBufferSize = 27
        controller.aclBufferCount = 2
        // The test answers every command and completes every packet itself.
        controller.answersCommands = false
        controller.autoComplete = false
        controller.recordsTraffic = false
        configure(controller)
        host = HCIHost(scheduler: scheduler, logger: logger,
                       output: { [unowned self] type, bytes in
                           self.sent.append(SentPacket(type: type, bytes: Array(bytes)))
                           _ = self.controller.output(type, bytes)
                           if type == 0x02, self.completesInsideOutput, let acl = self.sent.last?.acl {
                               // An in-process controller: its Number Of Completed Packets comes
                               // back before `output` returns.
                               self.numberOfCompletedPackets([(acl.handle, 1)])
                           }
                           return true
                       })
        controller.host = host
        host.delegate = delegate
    }

    var commands: [UInt16] { sent.compactMap(\.opcode) }
    var aclSent: [ACLPacket] { sent.compactMap(\.acl) }
    var unansweredCommand: UInt16? { commands.count > answeredCommands ? commands.last : nil }

    func clearSent() {
        sent.removeAll()
        answeredCommands = 0
    }

    func event(_ code: UInt8, _ parameters: [UInt8]) { controller.event(code, parameters) }

    /// Command Complete (Vol 4, Part E, 7.7.14).
    func complete(_ opcode: UInt16, numPackets: UInt8 = 1, _ returnParameters: [UInt8] = [0x00]) {
        if opcode != 0 && opcode == unansweredCommand { answeredCommands = commands.count }
        event(0x0E, [numPackets, UInt8(opcode & 0xFF), UInt8(opcode >> 8)] + returnParameters)
    }

    /// Command Status (Vol 4, Part E, 7.7.15).
    func status(_ opcode: UInt16, _ status: UInt8, numPackets: UInt8 = 1) {
        if opcode == unansweredCommand { answeredCommands = commands.count }
        event(0x0F, [status, numPackets, UInt8(opcode & 0xFF), UInt8(opcode >> 8)])
    }

    func numberOfCompletedPackets(_ entries: [(handle: UInt16, count: UInt16)]) {
        var p: [UInt8] = [UInt8(entries.count)]
        for entry in entries {
            p.appendLE(entry.handle)
            p.appendLE(entry.count)
        }
        event(0x13, p)
    }

    /// The return parameters a healthy controller gives for `opcode` (Vol 4, Part E, 7.3 / 7.4 / 7.8).
    func successParameters(for opcode: UInt16) -> [UInt8] { controller.successParameters(for: opcode) }

    /// Answers the command in flight as a healthy controller would.
    func answer(numPackets: UInt8 = 1) {
        guard unansweredCommand != nil, let command = sent.last(where: { $0.opcode != nil }) else {
            Issue.record("no command waiting for an answer")
            return
        }
        answeredCommands = commands.count
        controller.commandCredits = numPackets
        controller.answer(HCICommand(opcode: command.opcode!, parameters: Array(command.bytes.dropFirst(3))))
    }

    /// Starts the host and answers every command until it is ready.
    func bringUp(sourceLocation: SourceLocation = #_sourceLocation) {
        host.start()
        answerUntilReady(sourceLocation: sourceLocation)
    }

    func answerUntilReady(sourceLocation: SourceLocation = #_sourceLocation) {
        let readyBefore = delegate.readyCount
        for _ in 0..<20 where delegate.readyCount == readyBefore {
            guard unansweredCommand != nil else { break }
            answer()
        }
        #expect(delegate.readyCount == readyBefore + 1, "host did not become ready", sourceLocation: sourceLocation)
    }

    /// An L2CAP PDU with a basic header on the ATT channel and `payloadLength` bytes counting up from `seed`.
    static func pdu(payloadLength: Int, seed: UInt8 = 0) -> [UInt8] {
        var out: [UInt8] = []
        let payload = (0..<payloadLength).map { UInt8(truncatingIfNeeded: $0 &+ Int(seed)) }
        appendL2CAPFrame(cid: L2CAPChannel.att, payload: payload[...], to: &out)
        return out
    }
}

private let initSequenceV1: [UInt16] = [
    HCIOpcode.reset, HCIOpcode.readLocalVersion, HCIOpcode.readBDAddr, HCIOpcode.readLocalSupportedCommands,
    HCIOpcode.leReadLocalSupportedFeatures, HCIOpcode.setEventMask, HCIOpcode.leSetEventMask, HCIOpcode.leReadBufferSize,
]

@Suite struct HCIHostInitializationTests {
    @Test func initSequenceRunsInOrderOneCommandAtATimeAndEndsReady() {
        let rig = Rig()
        rig.host.start()
        var order: [UInt16] = []
        for _ in 0..<20 where rig.delegate.readyCount == 0 {
            // Exactly one command waits at every step.
            #expect(rig.commands.count == order.count + 1)
            guard let opcode = rig.unansweredCommand else { break }
            order.append(opcode)
            #expect(!rig.host.isReady)
            rig.answer()
        }
        #expect(order == initSequenceV1)
        #expect(rig.delegate.readyCount == 1)
        #expect(rig.host.isReady)
        #expect(rig.commands.count == initSequenceV1.count, "nothing is sent after the sequence")
        #expect(rig.aclSent.isEmpty)
    }

    @Test func initRecordsWhatTheControllerSays() {
        let rig = Rig { $0.aclBufferSize = 251; $0.aclBufferCount = 4 }
        rig.bringUp()
        let info = rig.host.info
        #expect(info.address == rig.controller.address)
        #expect(info.hciVersion == 0x0D)
        #expect(info.manufacturer == 0x005F)
        #expect(info.versionDescription == "Bluetooth 5.4, manufacturer 0x005f")
        var older = ControllerInfo()
        older.hciVersion = 0x05
        #expect(older.versionDescription == "HCI version 0x05, manufacturer 0x0000")
        #expect(info.aclMaxLength == 251)
        #expect(info.aclTotalPackets == 4)
        #expect(!info.supports(octet: 41, bit: 5))
        #expect(info.supports(octet: 41, bit: 4))
    }

    /// With LE Extended Advertising the sequence ends with the number of sets (7.8.58) and what
    /// a set takes (7.8.57); a length outside 31...1650 is not believed, and a refusal (the
    /// command is optional) leaves 1650.
    @Test func initReadsTheAdvertisingSetsAndTheirMaximumDataLength() {
        let rig = Rig { $0.extendedAdvertisingSets = 6; $0.maximumAdvertisingDataLength = 191 }
        rig.bringUp()
        #expect(Array(rig.commands.suffix(2)) == [HCIOpcode.leReadNumberOfSupportedAdvertisingSets, HCIOpcode.leReadMaximumAdvertisingDataLength])
        #expect(rig.host.info.advertisingSets == 6)
        #expect(rig.host.info.maximumAdvertisingDataLength == 191)
        for (reported, kept) in [(0, 1650), (30, 1650), (31, 31), (1650, 1650), (1651, 1650), (0xFFFF, 1650)] {
            let rig = Rig { $0.extendedAdvertisingSets = 1; $0.maximumAdvertisingDataLength = UInt16(reported) }
            rig.bringUp()
            #expect(rig.host.info.maximumAdvertisingDataLength == kept, "reported \(reported)")
        }
        let refusing = Rig { $0.extendedAdvertisingSets = 1; $0.failures[HCIOpcode.leReadMaximumAdvertisingDataLength] = 0x01 }
        refusing.bringUp()
        #expect(refusing.host.isReady)
        #expect(refusing.host.info.maximumAdvertisingDataLength == 1650)
        // Without LE Extended Advertising neither is asked.
        let legacy = Rig()
        legacy.bringUp()
        #expect(!legacy.commands.contains(HCIOpcode.leReadMaximumAdvertisingDataLength))
    }

    /// Vol 4, Part E, 7.3.1 and 7.8.1: the masks go out as 8 octets.
    @Test func eventMasksAreSentWithTheInitSequence() {
        let rig = Rig()
        rig.bringUp()
        let setEventMask = rig.sent.first { $0.opcode == HCIOpcode.setEventMask }
        #expect(setEventMask?.bytes == [0x01, 0x0C, 0x08, 0x90, 0x80, 0x00, 0x02, 0x00, 0x80, 0x00, 0x20])
        let leSetEventMask = rig.sent.first { $0.opcode == HCIOpcode.leSetEventMask }
        // 0xFA: bits 13-15, the periodic advertising sync events, beside 9, 11 and 12.
        #expect(leSetEventMask?.bytes == [0x01, 0x20, 0x08, 0x7F, 0xFA, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00])
    }

    /// Vol 4, Part E, 6.27: LE Read Buffer Size [v2] is octet 41 bit 5 of Supported Commands.
    @Test func leReadBufferSizeV2WhenTheControllerSupportsIt() {
        let rig = Rig { $0.supportsBufferSizeV2 = true; $0.aclBufferSize = 100; $0.aclBufferCount = 6 }
        rig.bringUp()
        #expect(rig.commands.contains(HCIOpcode.leReadBufferSizeV2))
        #expect(!rig.commands.contains(HCIOpcode.leReadBufferSize))
        #expect(rig.commands.last == HCIOpcode.leReadBufferSizeV2)
        #expect(rig.host.info.aclMaxLength == 100)
        #expect(rig.host.info.aclTotalPackets == 6)
    }

    /// A controller that lists LE Read Buffer Size [v2] and refuses it with Unknown HCI Command
    /// (a proxy, an emulator) is asked v1 (7.8.2), which every LE controller has: the sequence
    /// goes on instead of starting over every second for ever.
    @Test func aRefusedLEReadBufferSizeV2IsAskedAsV1() {
        let rig = Rig {
            $0.supportsBufferSizeV2 = true; $0.aclBufferSize = 100; $0.aclBufferCount = 6
            $0.failures[HCIOpcode.leReadBufferSizeV2] = 0x01
        }
        rig.bringUp()
        #expect(rig.host.isReady)
        #expect(Array(rig.commands.suffix(2)) == [HCIOpcode.leReadBufferSizeV2, HCIOpcode.leReadBufferSize])
        #expect(rig.host.info.aclMaxLength == 100)
        #expect(rig.host.info.aclTotalPackets == 6)
    }

    /// A controller whose features list LE Extended Advertising (Vol 6, Part B, 4.6, bit 12) and
    /// that refuses its first command, LE Read Number of Supported Advertising Sets (7.8.58), with
    /// Unknown HCI Command has not got the feature: it is taken as off, so the roles use the
    /// legacy advertising, scanning and connecting commands (netsim behind a proxy).
    @Test func aRefusedFirstExtendedAdvertisingCommandTurnsTheFeatureOff() {
        let rig = Rig { $0.extendedAdvertisingSets = 4; $0.failures[HCIOpcode.leReadNumberOfSupportedAdvertisingSets] = 0x01 }
        rig.bringUp()
        #expect(rig.host.isReady)
        #expect(!rig.host.info.supportsExtendedAdvertising)
        #expect(!rig.commands.contains(HCIOpcode.leReadMaximumAdvertisingDataLength))
        // Another refusal (Command Disallowed, a busy controller) says nothing about the feature.
        let busy = Rig { $0.extendedAdvertisingSets = 4; $0.failures[HCIOpcode.leReadNumberOfSupportedAdvertisingSets] = 0x0C }
        busy.bringUp()
        #expect(busy.host.info.supportsExtendedAdvertising)
    }

    /// Vol 4, Part E, 7.8.2: zero LE buffers mean LE shares the BR/EDR buffers, read with Read Buffer Size.
    @Test(arguments: [(UInt16(0), UInt8(0)), (0, 5), (27, 0)])
    func readBufferSizeWhenLEBuffersAreZero(length: UInt16, packets: UInt8) {
        let rig = Rig { $0.aclBufferSize = length; $0.aclBufferCount = packets; $0.brEdrACLLength = 1021; $0.brEdrACLPackets = 8 }
        rig.bringUp()
        #expect(rig.commands == initSequenceV1 + [HCIOpcode.readBufferSize])
        #expect(rig.host.info.aclMaxLength == 1021)
        #expect(rig.host.info.aclTotalPackets == 8)
    }

    @Test func noReadBufferSizeWhenLEHasItsOwnBuffers() {
        let rig = Rig { $0.aclBufferSize = 27; $0.aclBufferCount = 1 }
        rig.bringUp()
        #expect(!rig.commands.contains(HCIOpcode.readBufferSize))
    }

    /// Vol 6, Part B, 4.6: LE feature bit 5 = LE Data Packet Length Extension.
    @Test func suggestedDefaultDataLengthWhenDataLengthExtensionIsSupported() {
        let rig = Rig { $0.otherLEFeatures = 1 << 5 }
        rig.bringUp()
        #expect(rig.commands == initSequenceV1 + [HCIOpcode.leWriteSuggestedDefaultDataLength])
        #expect(rig.sent.last?.bytes == [0x24, 0x20, 0x04, 0xFB, 0x00, 0x48, 0x08])
        #expect(rig.host.info.supportsDataLengthExtension)
    }

    @Test func noSuggestedDataLengthWithoutTheFeature() {
        let rig = Rig { $0.otherLEFeatures = 0xFFFF_FFFF_FFFF_FFDF }   // every bit but 5
        rig.bringUp()
        #expect(!rig.commands.contains(HCIOpcode.leWriteSuggestedDefaultDataLength))
    }

    @Test func fullSequenceWithEveryOptionalStep() {
        let rig = Rig { $0.supportsBufferSizeV2 = true; $0.otherLEFeatures = 1 << 5; $0.aclBufferSize = 0; $0.aclBufferCount = 0 }
        rig.bringUp()
        #expect(rig.commands == [
            HCIOpcode.reset, HCIOpcode.readLocalVersion, HCIOpcode.readBDAddr, HCIOpcode.readLocalSupportedCommands,
            HCIOpcode.leReadLocalSupportedFeatures, HCIOpcode.setEventMask, HCIOpcode.leSetEventMask,
            HCIOpcode.leReadBufferSizeV2, HCIOpcode.readBufferSize,
            HCIOpcode.leWriteSuggestedDefaultDataLength,
        ])
    }

    @Test func requiredStepFailingRetriesFromResetAfterOneSecond() {
        let rig = Rig()
        rig.host.start()
        rig.answer()                                                        // Reset
        rig.answer()                                                        // Read Local Version
        #expect(rig.unansweredCommand == HCIOpcode.readBDAddr)
        rig.complete(HCIOpcode.readBDAddr, [HCIStatus.hardwareFailure])     // required: fails
        let sentAfterFailure = rig.commands.count
        rig.scheduler.advance(by: .milliseconds(999))
        #expect(rig.commands.count == sentAfterFailure, "no command before the retry delay")
        rig.scheduler.advance(by: .milliseconds(1))
        #expect(rig.commands.count == sentAfterFailure + 1)
        #expect(rig.commands.last == HCIOpcode.reset, "the retry starts over from Reset")
        #expect(rig.delegate.readyCount == 0)
        rig.answerUntilReady()
        #expect(rig.host.isReady)
    }

    @Test func requiredStepRefusedByCommandStatusAlsoRetries() {
        let rig = Rig()
        rig.host.start()
        rig.status(HCIOpcode.reset, HCIStatus.commandDisallowed)
        rig.scheduler.advance(by: .seconds(1))
        #expect(rig.commands == [HCIOpcode.reset, HCIOpcode.reset])
    }

    @Test func aResetAnsweredSecondsLateIsWaitedForAsLinuxWaits() {
        // A saturated rootcanal answers a new connection's Reset late: not given up at 3 s.
        let rig = Rig()
        rig.host.start()
        rig.scheduler.advance(by: .seconds(8))
        #expect(rig.commands == [HCIOpcode.reset])
        rig.answerUntilReady()
        #expect(rig.host.isReady)
        #expect(rig.commands.filter { $0 == HCIOpcode.reset }.count == 1)
    }

    @Test func requiredStepTimingOutRetriesAfterTimeoutAndOneSecond() {
        let rig = Rig()
        rig.host.start()
        rig.answer()                                                        // Reset
        rig.answer()                                                        // Read Local Version
        rig.answer()                                                        // Read BD_ADDR
        rig.answer()                                                        // Read Local Supported Commands
        #expect(rig.unansweredCommand == HCIOpcode.leReadLocalSupportedFeatures)
        rig.scheduler.advance(by: HCIHost.initializationCommandTimeout)
        #expect(rig.commands.last == HCIOpcode.leReadLocalSupportedFeatures, "timed out, retry not yet due")
        rig.scheduler.advance(by: .seconds(1))
        #expect(rig.commands.last == HCIOpcode.reset)
        rig.answerUntilReady()
    }

    @Test func optionalStepFailingDoesNotStopTheSequence() {
        let rig = Rig()
        rig.host.start()
        rig.answer()                                                        // Reset
        rig.complete(HCIOpcode.readLocalVersion, [0x01])                    // Unknown HCI Command
        #expect(rig.unansweredCommand == HCIOpcode.readBDAddr, "the next step follows at once")
        rig.answerUntilReady()
        #expect(rig.host.info.hciVersion == 0, "nothing recorded from a failed step")
    }

    @Test func shortReturnParametersAreNotRecorded() {
        let rig = Rig()
        rig.host.start()
        rig.answer()                                                        // Reset
        rig.answer()                                                        // Read Local Version
        rig.complete(HCIOpcode.readBDAddr, [0x00, 0x01, 0x02])              // success, but 4 bytes short
        rig.answerUntilReady()
        #expect(rig.host.info.address == BluetoothAddress(value: 0))
    }

    @Test func lateAnswersFromABeforeResetGenerationAreIgnored() {
        let rig = Rig()
        rig.host.start()
        rig.answer()                                                        // Reset
        rig.host.start()                                                    // start over
        #expect(rig.commands == [HCIOpcode.reset, HCIOpcode.readLocalVersion, HCIOpcode.reset])
        rig.complete(HCIOpcode.readLocalVersion, rig.successParameters(for: HCIOpcode.readLocalVersion))
        #expect(rig.commands.count == 3, "a stale answer must not advance the new sequence")
        rig.answerUntilReady()
        #expect(rig.delegate.readyCount == 1)
    }
}

@Suite struct HCIHostCommandFlowTests {
    @Test func onlyOneCommandIsInFlightWhateverTheCredits() {
        let rig = Rig()
        rig.bringUp()
        rig.clearSent()
        var results: [String] = []
        rig.host.send(.leSetAdvertisingEnable(true)) { results.append("enable \($0)") }
        rig.host.send(.readBDAddr) { results.append("addr \($0.succeeded)") }
        rig.host.send(.disconnect(handle: 0x40, reason: 0x13)) { results.append("disc \($0)") }
        #expect(rig.commands == [HCIOpcode.leSetAdvertisingEnable])
        rig.complete(HCIOpcode.leSetAdvertisingEnable, numPackets: 10)
        #expect(rig.commands == [HCIOpcode.leSetAdvertisingEnable, HCIOpcode.readBDAddr],
                "10 credits still means one command at a time")
        rig.answer(numPackets: 10)
        #expect(rig.commands.last == HCIOpcode.disconnect)
        rig.status(HCIOpcode.disconnect, 0x00, numPackets: 10)
        #expect(results == ["enable complete([0])", "addr true", "disc status(0)"])
        #expect(rig.commands.count == 3)
    }

    /// Vol 4, Part E, 4.4 and 7.7.14: Num_HCI_Command_Packets = 0 stops the host until a
    /// Command Complete (possibly with opcode 0x0000) hands out credits again.
    @Test func zeroCommandCreditsHoldTheQueueUntilANoOpCommandComplete() {
        let rig = Rig()
        rig.bringUp()
        rig.clearSent()
        var done: [UInt16] = []
        rig.host.send(.leSetAdvertisingEnable(false)) { _ in done.append(HCIOpcode.leSetAdvertisingEnable) }
        rig.complete(HCIOpcode.leSetAdvertisingEnable, numPackets: 0)
        #expect(done == [HCIOpcode.leSetAdvertisingEnable])
        rig.host.send(.readBDAddr) { _ in done.append(HCIOpcode.readBDAddr) }
        #expect(rig.commands == [HCIOpcode.leSetAdvertisingEnable], "no credits: the command waits")
        rig.scheduler.advance(by: .seconds(2))
        #expect(rig.commands.count == 1, "within the command timeout, the host waits for credits")
        rig.complete(0x0000, numPackets: 1, [])
        #expect(rig.commands == [HCIOpcode.leSetAdvertisingEnable, HCIOpcode.readBDAddr])
        rig.answer()
        #expect(done == [HCIOpcode.leSetAdvertisingEnable, HCIOpcode.readBDAddr])
    }

    /// A controller that says Num_HCI_Command_Packets = 0 and never gives a credit again is
    /// one that does not answer: after the command timeout the host takes a credit back and
    /// goes on, or nothing (advertising, a clean stop) would ever happen again.
    @Test func zeroCreditsThatNeverComeBackAreTimedOut() {
        let rig = Rig()
        rig.bringUp()
        rig.clearSent()
        var done: [CommandResult] = []
        rig.host.send(.leSetAdvertisingEnable(false))
        rig.complete(HCIOpcode.leSetAdvertisingEnable, numPackets: 0)
        rig.host.send(.readBDAddr) { done.append($0) }
        rig.host.send(.reset) { done.append($0) }
        rig.scheduler.advance(by: HCIHost.commandTimeout - .milliseconds(1))
        #expect(rig.commands == [HCIOpcode.leSetAdvertisingEnable])
        rig.scheduler.advance(by: .milliseconds(1))
        #expect(rig.commands == [HCIOpcode.leSetAdvertisingEnable, HCIOpcode.readBDAddr])
        // Its answer again gives no credit: the next one waits its timeout too, then goes.
        rig.complete(HCIOpcode.readBDAddr, numPackets: 0, rig.successParameters(for: HCIOpcode.readBDAddr))
        #expect(done.count == 1)
        rig.scheduler.advance(by: HCIHost.commandTimeout)
        #expect(rig.commands.last == HCIOpcode.reset)
        rig.answer()
        #expect(done.count == 2)
        // Nothing waits, so no timer is left running: an idle host makes no wakeups.
        #expect(rig.scheduler.pendingCount == 0)
    }

    /// A stop drops what no longer matters: queued commands end as cancelled, at once.
    @Test func cancelQueuedCommandsLeavesTheOneInFlight() {
        let rig = Rig()
        rig.bringUp()
        rig.clearSent()
        var results: [CommandResult] = []
        rig.host.send(.leSetAdvertisingEnable(false)) { results.append($0) }
        rig.host.send(.readBDAddr) { results.append($0) }
        rig.host.send(.readBDAddr) { results.append($0) }
        rig.host.cancelQueuedCommands()
        #expect(results == [.cancelled, .cancelled])
        rig.host.send(.reset) { results.append($0) }
        rig.answer()
        #expect(rig.commands == [HCIOpcode.leSetAdvertisingEnable, HCIOpcode.reset])
    }

    @Test func zeroCreditsFromCommandStatusHoldTheQueueToo() {
        let rig = Rig()
        rig.bringUp()
        rig.clearSent()
        rig.host.send(.disconnect(handle: 0x40, reason: 0x13))
        rig.host.send(.readBDAddr)
        rig.status(HCIOpcode.disconnect, 0x00, numPackets: 0)
        #expect(rig.commands == [HCIOpcode.disconnect])
        rig.status(0x0000, 0x00, numPackets: 2)
        #expect(rig.commands == [HCIOpcode.disconnect, HCIOpcode.readBDAddr])
    }

    @Test func commandTimeoutCompletesWithTimeoutAndTheQueueGoesOn() {
        let rig = Rig()
        rig.bringUp()
        rig.clearSent()
        var results: [CommandResult] = []
        rig.host.send(.leSetAdvertisingEnable(true)) { results.append($0) }
        rig.host.send(.readBDAddr) { results.append($0) }
        rig.scheduler.advance(by: .milliseconds(2999))
        #expect(results.isEmpty)
        #expect(rig.commands == [HCIOpcode.leSetAdvertisingEnable])
        rig.scheduler.advance(by: .milliseconds(1))
        #expect(results == [.timeout])
        #expect(rig.commands == [HCIOpcode.leSetAdvertisingEnable, HCIOpcode.readBDAddr])
        // The late answer to the timed-out command must not complete the next one.
        rig.complete(HCIOpcode.leSetAdvertisingEnable)
        #expect(results == [.timeout])
        rig.complete(HCIOpcode.readBDAddr, [0x00, 1, 2, 3, 4, 5, 6])
        #expect(results == [.timeout, .complete([0x00, 1, 2, 3, 4, 5, 6])])
        #expect(rig.host.isReady, "a user command timing out does not reset the host")
    }

    @Test func answeredCommandsDoNotTimeOutLater() {
        let rig = Rig()
        rig.bringUp()
        var results: [CommandResult] = []
        rig.host.send(.leSetAdvertisingEnable(true)) { results.append($0) }
        rig.answer()
        rig.scheduler.advance(by: .seconds(5))
        #expect(results == [.complete([0x00])])
    }

    @Test func answerForACommandNotInFlightIsIgnored() {
        let rig = Rig()
        rig.bringUp()
        var results: [CommandResult] = []
        rig.host.send(.leSetAdvertisingEnable(true)) { results.append($0) }
        rig.complete(HCIOpcode.leSetScanEnable)
        #expect(results.isEmpty)
        rig.complete(HCIOpcode.leSetAdvertisingEnable, [0x0C])
        #expect(results == [.complete([0x0C])])
        #expect(results.first?.status == HCIStatus.commandDisallowed)
        #expect(results.first?.succeeded == false)
    }

    @Test func commandQueueIsBounded() {
        let rig = Rig()
        rig.bringUp()
        rig.clearSent()
        var cancelled = 0
        #expect(rig.host.send(.readBDAddr))                   // in flight
        for _ in 0..<HCIHost.maxQueuedCommands {
            #expect(rig.host.send(.readBDAddr))
        }
        #expect(!rig.host.send(.readBDAddr) { if $0 == .cancelled { cancelled += 1 } })
        #expect(cancelled == 1, "a refused command is completed, not forgotten")
        #expect(rig.commands.count == 1)
    }

    /// A peer can fill the command queue (a peripheral's Connection Parameter Update Requests,
    /// each an LE Connection Update): each refused command is completed, but its line has the
    /// budget of the other refusals, ten a minute, the rest counted (Docs/REFERENCE.md, Budgets).
    @Test func aFullCommandQueueIsLoggedWithinTheBudget() {
        let log = CapturedLog()
        let rig = Rig(logger: log.logger)
        rig.bringUp()
        rig.clearSent()
        log.removeAll()
        #expect(rig.host.send(.readBDAddr))                   // in flight
        for _ in 0..<HCIHost.maxQueuedCommands {
            #expect(rig.host.send(.readBDAddr))
        }
        var cancelled = 0
        for _ in 0..<500 {
            #expect(!rig.host.send(.readBDAddr) { if $0 == .cancelled { cancelled += 1 } })
        }
        #expect(cancelled == 500, "every refused command is completed")
        let full = log.messages.filter { $0.contains("HCI command queue full") }
        #expect(full.count == 10)
        // A minute on, the controller still silent (commands in flight time out one by one):
        // the queue filled again, the next refusal says how many were left out.
        rig.scheduler.advance(by: .seconds(61))
        log.removeAll()
        while rig.host.send(.readBDAddr) {}
        #expect(log.messages.filter { $0.contains("HCI command queue full") }.last?.hasSuffix("(490 similar lines left out)") == true)
    }

    @Test func haltCancelsEveryPendingCommand() {
        let rig = Rig()
        rig.bringUp()
        var results: [CommandResult] = []
        rig.host.send(.readBDAddr) { results.append($0) }
        rig.host.send(.readBDAddr) { results.append($0) }
        rig.host.halt()
        #expect(results == [.cancelled, .cancelled])
        #expect(!rig.host.isReady)
        rig.scheduler.advance(by: .seconds(10))
        #expect(results.count == 2, "no timeout for a cancelled command")
    }

    @Test func commandResultStatus() {
        #expect(CommandResult.complete([]).status == HCIStatus.success)
        #expect(CommandResult.complete([0x12, 0x00]).status == 0x12)
        #expect(CommandResult.status(0x0C).succeeded == false)
        #expect(CommandResult.timeout.status == nil)
        #expect(CommandResult.cancelled.succeeded == false)
    }
}

@Suite struct HCIHostEventTests {
    /// Vol 4, Part E, 7.7.16: after a hardware error the host resets the controller.
    @Test func hardwareErrorResetsAndReinitializes() {
        let rig = Rig()
        rig.bringUp()
        rig.host.openLink(0x0040)
        #expect(rig.host.sendL2CAP(handle: 0x0040, pdu: Rig.pdu(payloadLength: 100)[...], priority: .required))
        var results: [CommandResult] = []
        rig.host.send(.leSetAdvertisingEnable(true)) { results.append($0) }
        rig.clearSent()
        rig.event(0x10, [0x42])
        #expect(rig.delegate.resetReasons.count == 1)
        #expect(rig.delegate.resetReasons.first?.contains("0x42") == true)
        #expect(results == [.cancelled])
        #expect(!rig.host.isReady)
        #expect(rig.commands == [HCIOpcode.reset], "initialization starts again from Reset")
        #expect(rig.host.queuedPDUs(0x0040) == 0)
        #expect(!rig.host.sendL2CAP(handle: 0x0040, pdu: Rig.pdu(payloadLength: 4)[...], priority: .required),
                "every link is gone")
        rig.answerUntilReady()
        #expect(rig.delegate.readyCount == 2)
        // The controller was reset: all of its buffers are free again.
        rig.host.openLink(0x0041)
        rig.clearSent()
        #expect(rig.host.sendL2CAP(handle: 0x0041, pdu: Rig.pdu(payloadLength: 50)[...], priority: .required))
        #expect(rig.aclSent.count == 2)
    }

    @Test func eventsTheHostDoesNotHandleGoToTheDelegate() {
        let rig = Rig()
        rig.bringUp()
        let before = rig.delegate.events.count
        rig.event(0x3E, [0x03, 0x00, 0x40, 0x00, 0x28, 0x00, 0x02, 0x00, 0x90, 0x01])
        rig.event(0xFF, [0x01])
        #expect(Array(rig.delegate.events.dropFirst(before)) == [
            .leConnectionUpdateComplete(status: 0, handle: 0x40, parameters: LinkParameters(interval: 40, latency: 2,
                                                                                            supervisionTimeout: 400)),
            .other(code: 0xFF),
        ])
        rig.host.send(.readBDAddr)
        rig.answer()
        rig.numberOfCompletedPackets([(0x0040, 1)])
        #expect(rig.delegate.events.count == before + 2, "command and credit events stay in the host")
    }

    @Test func aclFromTheControllerGoesToTheDelegate() {
        let rig = Rig()
        rig.bringUp()
        rig.host.receiveACL([0x40, 0x20, 0x05, 0x00, 0x01, 0x00, 0x04, 0x00, 0x0A][...])
        #expect(rig.delegate.aclPackets == [ACLPacket(handle: 0x40, boundary: .firstFlushable, data: [0x01, 0x00, 0x04, 0x00, 0x0A])])
    }

    @Test func malformedEventsAndACLAreDroppedWithoutTrapping() {
        let rig = Rig()
        rig.bringUp()
        let sentBefore = rig.sent.count
        let events: [[UInt8]] = [
            [], [0x0E], [0x0E, 0x05, 0x01], [0x0E, 0x02, 0x01, 0x03], [0x0F, 0x03, 0x00, 0x01, 0x03],
            [0x13, 0x05, 0x02, 0x40, 0x00, 0x01, 0x00], [0x3E, 0x00], [0x3E, 0x02, 0x01, 0x00],
            [0x3E, 0x03, 0x02, 0x01, 0x00], [0x10, 0x00], [0x05, 0x03, 0x00, 0x40, 0x00], [0xFF, 0xFF],
        ]
        for packet in events { rig.host.receiveEvent(packet[...]) }
        for packet: [UInt8] in [[], [0x40], [0x40, 0x20, 0x05], [0x40, 0x20, 0x05, 0x00, 0x01], [0x40, 0x20, 0x00, 0x00, 0xFF]] {
            rig.host.receiveACL(packet[...])
        }
        #expect(rig.delegate.events.isEmpty)
        #expect(rig.delegate.aclPackets.isEmpty)
        #expect(rig.delegate.resetReasons.isEmpty)
        #expect(rig.sent.count == sentBefore)
        #expect(rig.host.isReady)
        // And the host still works.
        var result: CommandResult?
        rig.host.send(.readBDAddr) { result = $0 }
        rig.answer()
        #expect(result?.succeeded == true)
    }

    @Test func randomEventsAndACLNeverTrapTheHost() {
        var random = HCITestRandom(seed: 0x48_43_49_48)
        let rig = Rig()
        rig.bringUp()
        rig.host.openLink(0x0040)
        rig.host.openLink(0x0041)
        let codes: [UInt8] = [0x05, 0x08, 0x0E, 0x0F, 0x10, 0x13, 0x1A, 0x3E, 0x57]
        for _ in 0..<3000 {
            var packet: [UInt8] = []
            let length = Int.random(in: 0...40, using: &random)
            packet.append(Bool.random(using: &random) ? codes.randomElement(using: &random)! : UInt8.random(in: 0...255, using: &random))
            packet.append(Bool.random(using: &random) ? UInt8(length) : UInt8.random(in: 0...255, using: &random))
            for _ in 0..<length { packet.append(UInt8.random(in: 0...255, using: &random)) }
            rig.host.receiveEvent(packet[...])
            rig.host.receiveACL(packet[...])
            if Int.random(in: 0..<10, using: &random) == 0 {
                _ = rig.host.sendL2CAP(handle: 0x0040, pdu: Rig.pdu(payloadLength: Int.random(in: 0...80, using: &random))[...],
                                       priority: .bestEffort)
            }
        }
        // Whatever it went through, the host still comes up and works.
        rig.host.halt()
        rig.clearSent()
        rig.bringUp()
        rig.host.openLink(0x0040)
        rig.clearSent()
        #expect(rig.host.sendL2CAP(handle: 0x0040, pdu: Rig.pdu(payloadLength: 23)[...], priority: .required))
        #expect(rig.aclSent.count == 1)
    }
}

@Suite struct HCIHostACLTests {
    /// Vol 4, Part E, 4.1.1 and 5.4.2: fragments of at most the controller's ACL length, the first
    /// with PB 0b00 (first non-flushable, host to controller), the rest 0b01 (continuing), and
    /// never more packets than the controller has buffers.
    @Test func fragmentsAgainstTwoBuffersOf27Bytes() throws {
        let rig = Rig { $0.aclBufferSize = 27; $0.aclBufferCount = 2 }
        rig.bringUp()
        rig.host.openLink(0x0040)
        rig.clearSent()
        let pdu = Rig.pdu(payloadLength: 96)                       // 100 bytes with the basic header
        #expect(pdu.count == 100)
        #expect(rig.host.sendL2CAP(handle: 0x0040, pdu: pdu[...], priority: .required))
        #expect(rig.sent.count == 2, "two buffers: two fragments, then wait")
        #expect(rig.sent.allSatisfy { $0.type == 0x02 })
        #expect(rig.sent.map { Array($0.bytes.prefix(4)) } == [[0x40, 0x00, 27, 0x00], [0x40, 0x10, 27, 0x00]])
        #expect(rig.host.queuedPDUs(0x0040) == 1)

        rig.numberOfCompletedPackets([(0x0040, 1)])
        #expect(rig.sent.count == 3, "one buffer freed: one more fragment")
        rig.numberOfCompletedPackets([(0x0040, 2)])
        #expect(rig.sent.count == 4)
        let fragments = rig.aclSent
        #expect(fragments.map(\.data.count) == [27, 27, 27, 19])
        #expect(fragments.map(\.boundary) == [.firstNonFlushable, .continuing, .continuing, .continuing])
        #expect(fragments.allSatisfy { $0.handle == 0x0040 })
        #expect(fragments.flatMap(\.data) == pdu, "the fragments carry the PDU, in order")
        #expect(rig.host.queuedPDUs(0x0040) == 0)
        rig.numberOfCompletedPackets([(0x0040, 1)])
        #expect(rig.sent.count == 4, "nothing left to send")
    }

    @Test func fragmentsUseTheBufferSizeOfReadBufferSizeWhenLESharesBuffers() {
        let rig = Rig { $0.aclBufferSize = 0; $0.aclBufferCount = 0; $0.brEdrACLLength = 60; $0.brEdrACLPackets = 1 }
        rig.bringUp()
        rig.host.openLink(0x0001)
        rig.clearSent()
        #expect(rig.host.sendL2CAP(handle: 0x0001, pdu: Rig.pdu(payloadLength: 96)[...], priority: .required))
        #expect(rig.aclSent.map(\.data.count) == [60])
        rig.numberOfCompletedPackets([(0x0001, 1)])
        #expect(rig.aclSent.map(\.data.count) == [60, 40])
    }

    @Test func pduThatFitsGoesOutWhole() {
        let rig = Rig()
        rig.bringUp()
        rig.host.openLink(0x0040)
        rig.clearSent()
        let pdu = Rig.pdu(payloadLength: 23)
        #expect(rig.host.sendL2CAP(handle: 0x0040, pdu: pdu[...], priority: .bestEffort))
        #expect(rig.sent.map(\.bytes) == [[0x40, 0x00, 27, 0x00] + pdu])
        #expect(rig.host.queuedPDUs(0x0040) == 0)
    }

    @Test func unknownLinkIsRefused() {
        let rig = Rig()
        rig.bringUp()
        #expect(!rig.host.sendL2CAP(handle: 0x0099, pdu: Rig.pdu(payloadLength: 4)[...], priority: .required))
        #expect(rig.aclSent.isEmpty)
    }

    /// Completions for more packets than were sent on a link must not create credits.
    @Test func completionsBeyondWhatWasSentAddNoCredits() {
        let rig = Rig.twoLinks(buffers: 2)
        #expect(rig.host.sendL2CAP(handle: 0x0040, pdu: Rig.pdu(payloadLength: 23)[...], priority: .required))
        rig.numberOfCompletedPackets([(0x0040, 50), (0x0041, 7), (0x0999, 3)])
        // 0x41 alone now: its share is every buffer.
        rig.host.closeLink(0x0040)
        #expect(rig.host.sendL2CAP(handle: 0x0041, pdu: Rig.pdu(payloadLength: 200)[...], priority: .required))
        #expect(rig.aclSent.count == 3, "1 + the 2 real buffers, not more")
    }

    /// Vol 4, Part E, 4.1.1: the controller's buffers are shared by all links; the host must
    /// share them fairly: one each of two, even when one link asks first for more.
    @Test func twoCreditsAtOnceAreSharedBetweenTwoLinks() {
        let rig = Rig.twoLinks(buffers: 2)
        #expect(rig.host.sendL2CAP(handle: 0x0040, pdu: Rig.pdu(payloadLength: 200)[...], priority: .required))
        #expect(rig.host.sendL2CAP(handle: 0x0041, pdu: Rig.pdu(payloadLength: 200)[...], priority: .required))
        #expect(rig.aclSent.map(\.handle) == [0x40, 0x41])
        rig.numberOfCompletedPackets([(0x0040, 1)])
        #expect(rig.aclSent.map(\.handle) == [0x40, 0x41, 0x40])
    }

    /// Controllers usually complete one packet at a time. Each freed buffer must go to the
    /// next link in turn, or a busy link starves the others (a starved link's ATT responses
    /// then miss the 30 s ATT transaction timeout, Vol 3, Part F, 3.3.3).
    @Test func creditsFreedOneAtATimeAlternateBetweenLinks() {
        let rig = Rig.twoLinks(buffers: 2)
        #expect(rig.host.sendL2CAP(handle: 0x0040, pdu: Rig.pdu(payloadLength: 200)[...], priority: .required))
        #expect(rig.host.sendL2CAP(handle: 0x0041, pdu: Rig.pdu(payloadLength: 200)[...], priority: .required))
        #expect(rig.aclSent.map(\.handle) == [0x40, 0x41])
        // The controller completes packets in the order they were sent, one at a time.
        var completed = 0
        for _ in 0..<6 {
            rig.numberOfCompletedPackets([(rig.aclSent[completed].handle, 1)])
            completed += 1
        }
        // After the first fragment of each, each freed buffer goes to the other link than the
        // one served last, while both have data waiting.
        let afterFastPath = Array(rig.aclSent.map(\.handle).dropFirst(2))
        #expect(afterFastPath.count == 6)
        #expect(zip(afterFastPath, afterFastPath.dropFirst()).allSatisfy { $0 != $1 },
                "freed buffers did not alternate between the links: \(afterFastPath.map { Hex.word($0) })")
        #expect(afterFastPath.filter { $0 == 0x41 }.count == 3)
    }

    @Test func pdusOfOneLinkGoOutInOrder() {
        let rig = Rig { $0.aclBufferSize = 27; $0.aclBufferCount = 1 }
        rig.bringUp()
        rig.host.openLink(0x0040)
        rig.clearSent()
        let pdus = (0..<5).map { Rig.pdu(payloadLength: 10 + $0 * 13, seed: UInt8($0 * 50)) }
        for pdu in pdus {
            #expect(rig.host.sendL2CAP(handle: 0x0040, pdu: pdu[...], priority: .required))
        }
        for _ in 0..<50 { rig.numberOfCompletedPackets([(0x0040, 1)]) }
        var reassembler = L2CAPReassembler()
        var delivered: [[UInt8]] = []
        for fragment in rig.aclSent {
            do {
                try reassembler.receive(fragment) { cid, payload in
                    var frame: [UInt8] = []
                    appendL2CAPFrame(cid: cid, payload: payload, to: &frame)
                    delivered.append(frame)
                }
            } catch {
                Issue.record("fragment could not be reassembled: \(error)")
            }
        }
        #expect(delivered == pdus)
    }

    /// Notifications are refused once `bestEffortQueueLimit` wait; the delegate hears once
    /// when there is room again.
    @Test func bestEffortRefusedWhenItsQueueIsFullAndRoomIsReportedOnce() {
        let rig = Rig { $0.aclBufferSize = 27; $0.aclBufferCount = 2 }
        rig.bringUp()
        rig.host.openLink(0x0040)
        rig.clearSent()
        // A 3-fragment response: two fragments use up both buffers, the third waits at the head.
        #expect(rig.host.sendL2CAP(handle: 0x0040, pdu: Rig.pdu(payloadLength: 60)[...], priority: .required))
        #expect(rig.aclSent.count == 2)
        for index in 0..<HCIHost.bestEffortQueueLimit {
            #expect(rig.host.sendL2CAP(handle: 0x0040, pdu: Rig.pdu(payloadLength: 20, seed: UInt8(index))[...],
                                       priority: .bestEffort))
        }
        #expect(!rig.host.sendL2CAP(handle: 0x0040, pdu: Rig.pdu(payloadLength: 20)[...], priority: .bestEffort))
        #expect(!rig.host.sendL2CAP(handle: 0x0040, pdu: Rig.pdu(payloadLength: 20)[...], priority: .bestEffort))
        #expect(rig.host.sendL2CAP(handle: 0x0040, pdu: Rig.pdu(payloadLength: 20)[...], priority: .required),
                "responses are not limited by the notification limit")
        #expect(rig.host.queuedPDUs(0x0040) == 1 + HCIHost.bestEffortQueueLimit + 1)
        #expect(rig.delegate.roomFor.isEmpty)

        rig.numberOfCompletedPackets([(0x0040, 1)])   // the response's last fragment goes
        #expect(rig.delegate.roomFor.isEmpty, "no notification left the queue yet")
        rig.numberOfCompletedPackets([(0x0040, 1)])   // the first notification goes
        #expect(rig.delegate.roomFor == [0x0040])
        rig.numberOfCompletedPackets([(0x0040, 2)])
        #expect(rig.delegate.roomFor == [0x0040], "reported once, not at every completion")
        #expect(rig.host.sendL2CAP(handle: 0x0040, pdu: Rig.pdu(payloadLength: 20)[...], priority: .bestEffort))
    }

    @Test func roomCallbackMaySendAgainAtOnce() {
        let rig = Rig { $0.aclBufferSize = 27; $0.aclBufferCount = 1 }
        rig.bringUp()
        rig.host.openLink(0x0040)
        #expect(rig.host.sendL2CAP(handle: 0x0040, pdu: Rig.pdu(payloadLength: 20)[...], priority: .bestEffort))
        for _ in 0..<HCIHost.bestEffortQueueLimit {
            #expect(rig.host.sendL2CAP(handle: 0x0040, pdu: Rig.pdu(payloadLength: 20)[...], priority: .bestEffort))
        }
        #expect(!rig.host.sendL2CAP(handle: 0x0040, pdu: Rig.pdu(payloadLength: 20)[...], priority: .bestEffort))
        var accepted: [Bool] = []
        rig.delegate.onRoom = { handle in
            accepted.append(rig.host.sendL2CAP(handle: handle, pdu: Rig.pdu(payloadLength: 20)[...], priority: .bestEffort))
        }
        rig.numberOfCompletedPackets([(0x0040, 1)])
        #expect(accepted == [true])
        #expect(rig.host.queuedPDUs(0x0040) == HCIHost.bestEffortQueueLimit)
    }

    @Test func requiredPDUsHitTheHardCap() {
        let rig = Rig { $0.aclBufferSize = 27; $0.aclBufferCount = 1 }
        rig.bringUp()
        rig.host.openLink(0x0040)
        #expect(rig.host.sendL2CAP(handle: 0x0040, pdu: Rig.pdu(payloadLength: 60)[...], priority: .required))
        while rig.host.queuedPDUs(0x0040) < HCIHost.linkQueueLimit {
            guard rig.host.sendL2CAP(handle: 0x0040, pdu: Rig.pdu(payloadLength: 4)[...], priority: .required) else {
                Issue.record("refused before the hard cap at \(rig.host.queuedPDUs(0x0040))")
                return
            }
        }
        #expect(!rig.host.sendL2CAP(handle: 0x0040, pdu: Rig.pdu(payloadLength: 4)[...], priority: .required))
        #expect(rig.host.queuedPDUs(0x0040) == HCIHost.linkQueueLimit)
        // A refusal is followed by word of room once the queue drains (an indication waits on it).
        #expect(rig.delegate.roomFor.isEmpty)
        // The first PDU goes out in three fragments; only when it is all out is there room.
        rig.numberOfCompletedPackets([(0x0040, 1)])
        #expect(rig.delegate.roomFor.isEmpty)
        rig.numberOfCompletedPackets([(0x0040, 1)])
        #expect(rig.host.queuedPDUs(0x0040) == HCIHost.linkQueueLimit - 1)
        #expect(rig.delegate.roomFor == [0x0040])
    }

    /// A controller that completes each packet inside `output` (as in-process ones do) re-enters
    /// the host: no fragment may be lost, sent twice or reordered, and no credit miscounted.
    @Test func aControllerAnsweringInsideOutputIsCountedRight() {
        let rig = Rig.twoLinks(buffers: 2)
        rig.completesInsideOutput = true
        var pdus: [[UInt8]] = []
        for seed in 0..<6 {
            let pdu = Rig.pdu(payloadLength: 60, seed: UInt8(seed * 16))
            pdus.append(pdu)
            #expect(rig.host.sendL2CAP(handle: seed % 2 == 0 ? 0x0040 : 0x0041, pdu: pdu[...], priority: .required))
        }
        for (handle, expected) in [(UInt16(0x0040), [pdus[0], pdus[2], pdus[4]]), (0x0041, [pdus[1], pdus[3], pdus[5]])] {
            let fragments = rig.aclSent.filter { $0.handle == handle }
            #expect(fragments.count == 9, "three fragments of 27 bytes for each 64-byte PDU")
            #expect(Array(fragments.flatMap(\.data)) == expected.flatMap { $0 })
        }
        // Every packet was completed, so a new PDU goes out at once, all of it.
        rig.completesInsideOutput = false
        let before = rig.aclSent.count
        #expect(rig.host.sendL2CAP(handle: 0x0040, pdu: Rig.pdu(payloadLength: 20)[...], priority: .required))
        #expect(rig.aclSent.count == before + 1)
        #expect(rig.host.queuedPDUs(0x0040) == 0)
    }

    /// Vol 4, Part E, 4.3: when a link disconnects, the packets the controller still held for it
    /// are flushed, so their buffers count as free without a Number Of Completed Packets event.
    @Test func closingALinkReturnsItsInFlightCredits() {
        let rig = Rig.twoLinks(buffers: 2)
        #expect(rig.host.sendL2CAP(handle: 0x0040, pdu: Rig.pdu(payloadLength: 100)[...], priority: .required))
        #expect(rig.host.sendL2CAP(handle: 0x0041, pdu: Rig.pdu(payloadLength: 100)[...], priority: .required))
        #expect(rig.aclSent.map(\.handle) == [0x40, 0x41], "one buffer each")
        rig.host.closeLink(0x0040)
        #expect(rig.aclSent.map(\.handle) == [0x40, 0x41, 0x41], "the freed buffer goes to the other link at once")
        #expect(rig.host.queuedPDUs(0x0040) == 0)
        // A late completion for the closed link must not free buffers a second time.
        rig.numberOfCompletedPackets([(0x0040, 2)])
        #expect(rig.aclSent.count == 3, "both buffers are held by 0x41: nothing more goes out")
        rig.numberOfCompletedPackets([(0x0041, 1)])
        #expect(rig.aclSent.count == 4)
    }

    /// A link whose packets never complete (a slow or hostile peer: a buffer is only freed
    /// when the peer acknowledged the packet) holds at most its fair share of the controller's
    /// buffers, so the other links keep sending with the rest instead of waiting for the
    /// supervision timeout to drop it.
    @Test func aStalledLinkHoldsAtMostItsFairShareAndTheOtherKeepsSending() {
        let rig = Rig.twoLinks(buffers: 32)
        for _ in 0..<40 {
            #expect(rig.host.sendL2CAP(handle: 0x0040, pdu: Rig.pdu(payloadLength: 23)[...], priority: .required))
        }
        #expect(rig.aclSent.filter { $0.handle == 0x40 }.count == 16, "the stalled link took more than half the buffers")
        // The honest link sends, its packets complete, and it is idle between its PDUs while the
        // stalled link has a backlog: it is served every time.
        for round in 0..<40 {
            let before = rig.aclSent.filter { $0.handle == 0x41 }.count
            #expect(rig.host.sendL2CAP(handle: 0x0041, pdu: Rig.pdu(payloadLength: 23)[...], priority: .required))
            #expect(rig.aclSent.filter { $0.handle == 0x41 }.count == before + 1, "round \(round): the honest link waits")
            rig.numberOfCompletedPackets([(0x0041, 1)])
        }
        #expect(rig.aclSent.filter { $0.handle == 0x40 }.count == 16, "the stalled link never holds more than its share")
        // Once its packets complete, the stalled link goes on with its backlog.
        rig.numberOfCompletedPackets([(0x0040, 16)])
        #expect(rig.aclSent.filter { $0.handle == 0x40 }.count == 32)
    }

    /// The share follows the open links: one closing gives the others a larger share at once.
    @Test func theShareGrowsWhenALinkCloses() {
        let rig = Rig { $0.aclBufferSize = 27; $0.aclBufferCount = 30 }
        rig.bringUp()
        for handle: UInt16 in [0x40, 0x41, 0x42] { rig.host.openLink(handle) }
        rig.clearSent()
        for _ in 0..<20 {
            #expect(rig.host.sendL2CAP(handle: 0x0040, pdu: Rig.pdu(payloadLength: 23)[...], priority: .required))
        }
        #expect(rig.aclSent.count == 10, "a third of 30")
        rig.host.closeLink(0x0042)
        #expect(rig.aclSent.count == 15, "half of 30")
        rig.host.closeLink(0x0041)
        #expect(rig.aclSent.count == 20, "alone: all it has")
    }

    @Test func disconnectionCompleteClosesTheLinkAndIsForwarded() {
        let rig = Rig.twoLinks(buffers: 1)
        #expect(rig.host.sendL2CAP(handle: 0x0040, pdu: Rig.pdu(payloadLength: 23)[...], priority: .required))
        #expect(rig.host.sendL2CAP(handle: 0x0041, pdu: Rig.pdu(payloadLength: 23)[...], priority: .required))
        // A failed disconnection (status != 0) leaves the link up.
        rig.event(0x05, [0x0C, 0x40, 0x00, 0x13])
        #expect(rig.aclSent.count == 1)
        rig.event(0x05, [0x00, 0x40, 0x00, 0x13])
        #expect(rig.aclSent.map(\.handle) == [0x40, 0x41])
        #expect(rig.delegate.events.suffix(2) == [.disconnectionComplete(status: 0x0C, handle: 0x40, reason: 0x13),
                                                   .disconnectionComplete(status: 0x00, handle: 0x40, reason: 0x13)])
        #expect(!rig.host.sendL2CAP(handle: 0x0040, pdu: Rig.pdu(payloadLength: 4)[...], priority: .required))
    }

    /// Property: whatever the order of sends, completions and disconnections, the controller
    /// never holds more ACL packets than it has buffers (Vol 4, Part E, 4.1.1), and every
    /// accepted PDU arrives whole, in order, on its own link.
    @Test(arguments: [1, 2, 3, 4, 5, 6, 7, 8] as [UInt64])
    func neverMoreACLPacketsOutstandingThanBuffers(seed: UInt64) {
        var random = HCITestRandom(seed: seed)
        let buffers = Int.random(in: 1...4, using: &random)
        let length = [27, 31, 64, 251].randomElement(using: &random)!
        let rig = Rig { $0.aclBufferSize = UInt16(length); $0.aclBufferCount = UInt8(buffers) }
        rig.bringUp()
        rig.clearSent()
        let handles: [UInt16] = [0x0040, 0x0041, 0x0042]
        for handle in handles { rig.host.openLink(handle) }
        var outstanding: [UInt16: Int] = [:]
        var expected: [UInt16: [[UInt8]]] = [:]
        var delivered: [UInt16: [[UInt8]]] = [:]
        var reassemblers: [UInt16: L2CAPReassembler] = [:]
        var seen = 0
        var violations = 0
        var reassemblyErrors = 0

        func collect() {
            for packet in rig.sent[seen...] {
                guard let fragment = packet.acl else {
                    Issue.record("unexpected packet type \(packet.type)")
                    continue
                }
                #expect(fragment.data.count <= length && !fragment.data.isEmpty)
                outstanding[fragment.handle, default: 0] += 1
                var reassembler = reassemblers[fragment.handle] ?? L2CAPReassembler(maxPDU: 4096)
                do {
                    try reassembler.receive(fragment) { cid, payload in
                        var frame: [UInt8] = []
                        appendL2CAPFrame(cid: cid, payload: payload, to: &frame)
                        delivered[fragment.handle, default: []].append(frame)
                    }
                } catch {
                    reassemblyErrors += 1
                }
                reassemblers[fragment.handle] = reassembler
            }
            seen = rig.sent.count
            if outstanding.values.reduce(0, +) > buffers { violations += 1 }
        }

        for _ in 0..<400 {
            switch Int.random(in: 0..<10, using: &random) {
            case 0..<5:
                let handle = handles.randomElement(using: &random)!
                let pdu = Rig.pdu(payloadLength: Int.random(in: 0...300, using: &random), seed: UInt8.random(in: 0...255, using: &random))
                let priority: TransmitPriority = Bool.random(using: &random) ? .required : .bestEffort
                if rig.host.sendL2CAP(handle: handle, pdu: pdu[...], priority: priority) {
                    expected[handle, default: []].append(pdu)
                }
            case 5..<9:
                let busy = outstanding.filter { $0.value > 0 }.map(\.key).sorted()
                guard !busy.isEmpty else { break }
                var entries: [(handle: UInt16, count: UInt16)] = []
                for handle in busy where Bool.random(using: &random) || entries.isEmpty {
                    let count = Int.random(in: 1...outstanding[handle]!, using: &random)
                    outstanding[handle]! -= count
                    entries.append((handle, UInt16(count)))
                }
                rig.numberOfCompletedPackets(entries)
            default:
                // A link drops and comes back (the controller flushes what it held, Vol 4, Part E, 4.3).
                let handle = handles.randomElement(using: &random)!
                rig.host.closeLink(handle)
                outstanding[handle] = 0
                reassemblers[handle]?.reset()
                // What was accepted but not yet delivered is lost with the link.
                expected[handle] = delivered[handle] ?? []
                rig.host.openLink(handle)
            }
            collect()
        }
        // Drain: complete everything until nothing moves.
        for _ in 0..<10_000 {
            let busy = outstanding.filter { $0.value > 0 }
            guard !busy.isEmpty else { break }
            rig.numberOfCompletedPackets(busy.map { (handle: $0.key, count: UInt16($0.value)) })
            for handle in busy.keys { outstanding[handle] = 0 }
            collect()
        }
        #expect(violations == 0, "more ACL packets outstanding than the controller's \(buffers) buffers")
        #expect(reassemblyErrors == 0)
        for handle in handles {
            #expect(rig.host.queuedPDUs(handle) == 0)
            #expect((delivered[handle] ?? []) == (expected[handle] ?? []), "link \(Hex.word(handle))")
        }
    }
}
