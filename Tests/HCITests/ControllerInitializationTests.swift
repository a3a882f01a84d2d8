@testable import BlemuHCI
import Testing

/// The initialization sequence alone, without a host or a controller: what each answer tells
/// and what a refusal changes (Vol 4, Part E, 4 and 7).
@Suite struct ControllerInitializationTests {
    /// Walks the sequence from Reset, answering each command with `answer`, and gives the
    /// commands asked in order and where it stopped.
    private func walk(_ answer: (HCICommand) -> CommandResult) -> (asked: [UInt16], info: ControllerInfo, restarted: Bool) {
        var initialization = ControllerInitialization()
        var info = ControllerInfo()
        var stage = ControllerInitialization.Stage.reset
        var asked: [UInt16] = []
        while stage != .done, asked.count < 40 {
            guard let (command, required) = initialization.command(for: stage, info: info) else {
                stage = stage.next
                continue
            }
            asked.append(command.opcode)
            let taken = initialization.take(answer(command), of: command, required: required, at: stage, into: &info)
            switch taken.step {
            case .ask(let next): stage = next
            case .restart: return (asked, info, true)
            }
        }
        return (asked, info, false)
    }

    /// Supported Commands with LE Read Buffer Size v2 (octet 41, bit 5, 6.27) and LE features
    /// with Data Length Extension (bit 5) and LE Extended Advertising (bit 12).
    private func capable(_ command: HCICommand) -> CommandResult {
        switch command.opcode {
        case HCIOpcode.readLocalSupportedCommands:
            var commands = [UInt8](repeating: 0, count: 64)
            commands[41] = 1 << 5
            return .complete([0] + commands)
        case HCIOpcode.leReadLocalSupportedFeatures:
            return .complete([0, 1 << 5, 1 << 4, 0, 0, 0, 0, 0, 0])
        case HCIOpcode.leReadBufferSizeV2:
            return .complete([0, 251, 0, 8, 0, 0, 0])
        case HCIOpcode.leReadBufferSize:
            return .complete([0, 27, 0, 4])
        case HCIOpcode.leReadNumberOfSupportedAdvertisingSets:
            return .complete([0, 6])
        default:
            return .complete([0])
        }
    }

    @Test func aControllerThatRefusesBufferSizeV2IsAskedV1AndTheSequenceGoesOn() {
        let walked = walk { command in
            command.opcode == HCIOpcode.leReadBufferSizeV2 ? .complete([0x01]) : capable(command)
        }
        #expect(!walked.restarted)
        let v2 = walked.asked.firstIndex(of: HCIOpcode.leReadBufferSizeV2)
        #expect(v2 != nil && walked.asked[v2! + 1] == HCIOpcode.leReadBufferSize)
        #expect(walked.info.aclMaxLength == 27 && walked.info.aclTotalPackets == 4)
        #expect(walked.info.advertisingSets == 6)
    }

    @Test func anUnknownAdvertisingSetsCommandTurnsExtendedAdvertisingOffWithAWarning() {
        var initialization = ControllerInitialization()
        var info = ControllerInfo()
        info.leFeatures = 1 << 12
        let command = HCICommand.leReadNumberOfSupportedAdvertisingSets
        let answer = initialization.take(.complete([0x01]), of: command, required: false, at: .readAdvertisingSets, into: &info)
        #expect(answer.step == .ask(.readMaximumAdvertisingDataLength))
        #expect(answer.warning?.contains("legacy commands") == true && !answer.namesStatus)
        #expect(!info.supportsExtendedAdvertising)
        // With the feature off, the next stage (the extended sets' data length) is skipped.
        #expect(initialization.command(for: .readMaximumAdvertisingDataLength, info: info) == nil)
    }

    @Test func aRequiredCommandThatFailsRestartsTheSequenceAndAnOptionalOneDoesNot() {
        let required = walk { command in
            command.opcode == HCIOpcode.leReadLocalSupportedFeatures ? .timeout : capable(command)
        }
        #expect(required.restarted && required.asked.last == HCIOpcode.leReadLocalSupportedFeatures)
        let optional = walk { command in
            command.opcode == HCIOpcode.readLocalVersion ? .complete([0x0C]) : capable(command)
        }
        #expect(!optional.restarted && optional.info.hciVersion == 0)
        #expect(optional.asked.contains(HCIOpcode.leReadNumberOfSupportedAdvertisingSets))
    }

    @Test func aMaximumDataLengthOutsideTheSpecsRangeIsNotBelieved() {
        var initialization = ControllerInitialization()
        var info = ControllerInfo()
        let command = HCICommand.leReadMaximumAdvertisingDataLength
        _ = initialization.take(.complete([0, 0x00, 0x10]), of: command, required: false, at: .readMaximumAdvertisingDataLength, into: &info)
        #expect(info.maximumAdvertisingDataLength == 1650)
        _ = initialization.take(.complete([0, 0xFB, 0x00]), of: command, required: false, at: .readMaximumAdvertisingDataLength, into: &info)
        #expect(info.maximumAdvertisingDataLength == 251)
    }
}
