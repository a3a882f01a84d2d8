import BlemuCore

/// The initialization sequence of a controller (Vol 4, Part E, 4 and 7): the command of each
/// stage, what each answer tells of the controller, and what a refusal changes. It sends
/// nothing and logs nothing: `HCIHost` sends each command, hands the answer here, and says
/// what comes back as a warning.
struct ControllerInitialization {
    /// One command per stage, in order.
    enum Stage: Int {
        // No Read Local Supported Features: nothing of BR/EDR's LMP features is used, and on a
        // controller that answers one command per tick each command delays advertising.
        case reset, readLocalVersion, readBDAddr, readSupportedCommands, leReadFeatures
        case setEventMask, leSetEventMask, leReadBufferSize, readBufferSize, suggestDataLength, readAdvertisingSets
        case readMaximumAdvertisingDataLength, done

        var next: Stage { Stage(rawValue: rawValue + 1) ?? .done }
    }

    /// What to do after an answer.
    enum Step: Equatable {
        /// Send this stage's command (the next stage, or the same one asked another way).
        case ask(Stage)
        /// A command the sequence cannot go on without failed: start again (after a pause).
        case restart
    }

    /// An answer's step, and what it changed that the log should say (with the answer's status
    /// when `namesStatus`).
    struct Answer: Equatable {
        var step: Step
        var warning: String?
        var namesStatus = false
    }

    /// Vol 4, Part E, 7.3.1: Disconnection Complete (bit 4), Encryption Change (7), Hardware
    /// Error (15), Data Buffer Overflow (25), Encryption Key Refresh Complete (47), LE Meta (61).
    static let eventMask: UInt64 = 1 << 4 | 1 << 7 | 1 << 15 | 1 << 25 | 1 << 47 | 1 << 61
    /// Vol 4, Part E, 7.8.1: Connection Complete (0), Advertising Report (1), Connection Update
    /// Complete (2), Read Remote Features Complete (3), LTK Request (4), Remote Connection Parameter
    /// Request (5), Data Length Change (6), Enhanced Connection Complete (9), PHY Update Complete (11),
    /// Extended Advertising Report (12), Periodic Advertising Sync Established, Report and Sync
    /// Lost (13-15: `blemu scan --periodic`), Advertising Set Terminated (17).
    static let leEventMask: UInt64 = 1 << 0 | 1 << 1 | 1 << 2 | 1 << 3 | 1 << 4 | 1 << 5 | 1 << 6 | 1 << 9 | 1 << 11
        | 1 << 12 | 1 << 13 | 1 << 14 | 1 << 15 | 1 << 17

    /// The controller answered LE Read Buffer Size v2 with an error: v1 is asked instead.
    private(set) var leReadBufferSizeV2Refused = false

    /// The command of a stage, whether the sequence can go on without it, or nil to skip it.
    func command(for stage: Stage, info: ControllerInfo) -> (HCICommand, required: Bool)? {
        switch stage {
        case .reset: return (.reset, true)
        case .readLocalVersion: return (.readLocalVersion, false)
        case .readBDAddr: return (.readBDAddr, true)
        case .readSupportedCommands: return (.readLocalSupportedCommands, false)
        case .leReadFeatures: return (.leReadLocalSupportedFeatures, true)
        case .setEventMask: return (.setEventMask(Self.eventMask), true)
        case .leSetEventMask: return (.leSetEventMask(Self.leEventMask), true)
        case .leReadBufferSize:
            // LE Read Buffer Size v2 is bit 5 of octet 41 of Supported Commands (Vol 4, Part E, 6.27).
            // A controller that claims it and refuses it (a proxy, an emulator) is asked v1, which
            // every LE controller supports (7.8.2; v2, 7.8.2 too, belongs to the isochronous channels).
            let v2 = info.supports(octet: 41, bit: 5) && !leReadBufferSizeV2Refused
            return (v2 ? .leReadBufferSizeV2 : .leReadBufferSize, true)
        case .readBufferSize:
            // Vol 4, Part E, 7.8.2: zero LE buffers means LE shares the BR/EDR buffers.
            return info.aclMaxLength == 0 || info.aclTotalPackets == 0 ? (.readBufferSize, true) : nil
        case .suggestDataLength:
            return info.supportsDataLengthExtension ? (.leWriteSuggestedDefaultDataLength(), false) : nil
        case .readAdvertisingSets:
            return info.supportsExtendedAdvertising ? (.leReadNumberOfSupportedAdvertisingSets, false) : nil
        case .readMaximumAdvertisingDataLength:
            // What an extended set can take decides whether a long payload is handed to it
            // (`Advertiser.canCarry`) rather than refused (7.8.54: Memory Capacity Exceeded).
            return info.supportsExtendedAdvertising ? (.leReadMaximumAdvertisingDataLength, false) : nil
        case .done: return nil
        }
    }

    /// Takes the answer to `stage`'s `command` (`required`: as `command(for:info:)` gave it):
    /// what it tells of the controller goes into `info`.
    mutating func take(_ result: CommandResult, of command: HCICommand, required: Bool, at stage: Stage,
                       into info: inout ControllerInfo) -> Answer {
        if command.opcode == HCIOpcode.leReadBufferSizeV2, !result.succeeded, result.status != nil {
            leReadBufferSizeV2Refused = true
            return Answer(step: .ask(stage),
                          warning: "the controller refused LE Read Buffer Size v2 although it lists it: asking LE Read Buffer Size (v1)",
                          namesStatus: true)
        }
        var warning: String?
        if command.opcode == HCIOpcode.leReadNumberOfSupportedAdvertisingSets, result.status == 0x01 {
            // Unknown HCI Command (Vol 1, Part F, 2.1) to the first of the extended advertising
            // commands, from a controller whose features list LE Extended Advertising (Vol 6,
            // Part B, 4.6, bit 12): it has not got them (an emulator's proxy, netsim): the
            // feature is taken as off, so advertising, scanning and connecting use the legacy commands.
            info.leFeatures &= ~(UInt64(1) << 12)
            warning = "the controller refused LE Read Number of Supported Advertising Sets (Unknown HCI Command) although it lists LE Extended Advertising: extended advertising, scanning and connecting are off, the legacy commands are used"
        }
        if required && !result.succeeded { return Answer(step: .restart, warning: warning) }
        Self.record(stage, result, into: &info)
        return Answer(step: .ask(stage.next), warning: warning)
    }

    private static func record(_ stage: Stage, _ result: CommandResult, into info: inout ControllerInfo) {
        guard case .complete(let p) = result, p.first == HCIStatus.success else { return }
        switch stage {
        case .readLocalVersion where p.count >= 9:
            info.hciVersion = p[1]
            info.manufacturer = UInt16(p[5]) | UInt16(p[6]) << 8
        case .readBDAddr where p.count >= 7:
            if let address = try? BluetoothAddress(littleEndian: p[1..<7]) { info.address = address }
        case .readSupportedCommands where p.count >= 65:
            info.supportedCommands = Array(p[1..<65])
        case .leReadFeatures where p.count >= 9:
            var reader = ByteReader(p[1..<9])
            info.leFeatures = (try? reader.u64()) ?? 0
        case .leReadBufferSize where p.count >= 4:
            info.aclMaxLength = Int(UInt16(p[1]) | UInt16(p[2]) << 8)
            info.aclTotalPackets = Int(p[3])
        case .readAdvertisingSets where p.count >= 2:
            info.advertisingSets = Int(p[1])
        case .readMaximumAdvertisingDataLength where p.count >= 3:
            // 7.8.57: 0x001F to 0x0672; a value outside is not believed.
            let length = Int(UInt16(p[1]) | UInt16(p[2]) << 8)
            if (AdvertisingPayload.maximumLength...AdvertisingPayload.extendedMaximumLength).contains(length) {
                info.maximumAdvertisingDataLength = length
            }
        case .readBufferSize where p.count >= 8:
            info.aclMaxLength = Int(UInt16(p[1]) | UInt16(p[2]) << 8)
            info.aclTotalPackets = Int(UInt16(p[4]) | UInt16(p[5]) << 8)
        default:
            break
        }
    }
}
