import BlemuCore
import BlemuHCI

// What one programmed advertisement is (the programmable host's `advertise` op, Docs/CONTROL.md
// "The programmable host"), and the rules of Vol 4, Part E, 7.8.5 and 7.8.53 – 7.8.57 that a
// combination of its fields must keep: checked before anything goes to the controller, each
// refusal naming its rule.
extension ProgrammedAdvertising {
    /// Own_Address_Type (Vol 4, Part E, 7.8.5, 7.8.53): the address the advertisement goes out from.
    public enum OwnAddressType: UInt8, Sendable, Equatable, CaseIterable {
        /// The controller's public address (Read BD_ADDR).
        case publicAddress = 0x00
        /// The host's static random address (LE Set Random Address 7.8.4, or the set's own, 7.8.52).
        case randomAddress = 0x01
        /// A resolvable private address standing for the public address (its identity). In HCI
        /// (7.8.5) the controller makes it from a resolving list entry with a local IRK, else uses
        /// the public address; the programmable host always has an IRK, so it makes the address
        /// itself (Vol 6, Part B, 1.3.2.2) and advertises it as a random address: the fallback
        /// never happens, on every controller.
        case resolvableOrPublic = 0x02
        /// A resolvable private address standing for the host's static random address, made the same way.
        case resolvableOrRandom = 0x03

        /// The address is a resolvable private address the host makes.
        public var isResolvable: Bool { self == .resolvableOrPublic || self == .resolvableOrRandom }
    }

    /// An advertising PHY (Vol 4, Part E, 7.8.53: Primary_Advertising_PHY 0x01 LE 1M or 0x03 LE
    /// Coded; Secondary_Advertising_PHY 0x01 LE 1M, 0x02 LE 2M, 0x03 LE Coded).
    public enum PHY: UInt8, Sendable, Equatable, CaseIterable {
        case le1M = 0x01
        case le2M = 0x02
        case leCoded = 0x03
    }

    /// One advertisement as asked for.
    public struct Parameters: Sendable, Equatable {
        /// The advertising data: AD structures as on the air (Vol 3, Part C, 11).
        public var data: [UInt8]
        /// The scan response data, nil for none (a scannable advertisement has one).
        public var scanResponse: [UInt8]?
        /// Legacy advertising PDUs (ADV_IND, ADV_DIRECT_IND, ADV_SCAN_IND, ADV_NONCONN_IND; Vol 6,
        /// Part B, 2.3.1) rather than extended ones (ADV_EXT_IND with AUX_ADV_IND, 2.3.4).
        public var legacy: Bool
        public var connectable: Bool
        /// Scannable: it answers scan requests with `scanResponse`. A legacy undirected connectable
        /// advertisement is always scannable (ADV_IND).
        public var scannable: Bool
        /// The central a directed advertisement is for (Peer_Address and Peer_Address_Type), nil: undirected.
        public var directedTo: LEAddress?
        /// High duty cycle directed advertising (Vol 6, Part B, 4.4.2.4.2: legacy ADV_DIRECT_IND
        /// every 3.75 ms or less, for 1.28 s at most, then Advertising Timeout 0x3C); false: low
        /// duty cycle, at `intervalMilliseconds`.
        public var highDutyCycle: Bool
        public var ownAddressType: OwnAddressType
        /// The advertising interval, 20 to 10240 ms (sent in units of 0.625 ms, 7.8.5).
        public var intervalMilliseconds: Double
        public var primaryPHY: PHY
        public var secondaryPHY: PHY
        /// How long one resolvable private address lasts before the next is made, in ms (own
        /// address types resolvable-or-public and resolvable-or-random only); nil: 15 minutes,
        /// TGAP(private_addr_int) of Vol 3, Part C, Appendix A.
        public var privateAddressTimeoutMilliseconds: Int?

        public init(data: [UInt8] = [], scanResponse: [UInt8]? = nil, legacy: Bool = false, connectable: Bool = false,
                    scannable: Bool = false, directedTo: LEAddress? = nil, highDutyCycle: Bool = false,
                    ownAddressType: OwnAddressType = .publicAddress, intervalMilliseconds: Double = 100,
                    primaryPHY: PHY = .le1M, secondaryPHY: PHY = .le1M, privateAddressTimeoutMilliseconds: Int? = nil) {
            self.privateAddressTimeoutMilliseconds = privateAddressTimeoutMilliseconds
            self.data = data
            self.scanResponse = scanResponse
            self.legacy = legacy
            self.connectable = connectable
            self.scannable = scannable
            self.directedTo = directedTo
            self.highDutyCycle = highDutyCycle
            self.ownAddressType = ownAddressType
            self.intervalMilliseconds = intervalMilliseconds
            self.primaryPHY = primaryPHY
            self.secondaryPHY = secondaryPHY
        }

        /// The bounds of `privateAddressTimeoutMilliseconds`: 1 s to 11.5 hours, the range of
        /// RPA_Timeout in LE Set Resolvable Private Address Timeout (Vol 4, Part E, 7.8.45:
        /// 0x0001 to 0xA1B8 seconds), as `blemu run --rpa-timeout` takes it.
        public static let privateAddressTimeoutRange = 1_000...41_400_000
        /// TGAP(private_addr_int), Vol 3, Part C, Appendix A: 15 minutes.
        public static let defaultPrivateAddressTimeoutMilliseconds = 900_000

        /// How long one resolvable private address lasts (held to its range; `ruleBroken` refuses one out of it).
        public var privateAddressTimeout: Duration {
            let milliseconds = privateAddressTimeoutMilliseconds ?? Self.defaultPrivateAddressTimeoutMilliseconds
            return .milliseconds(min(max(milliseconds, Self.privateAddressTimeoutRange.lowerBound), Self.privateAddressTimeoutRange.upperBound))
        }

        /// The interval limits of Advertising_Interval_Min/Max (Vol 4, Part E, 7.8.5: 0x0020 to
        /// 0x4000 units of 0.625 ms), in ms.
        public static let intervalRange: ClosedRange<Double> = 20...10240

        /// The interval in units of 0.625 ms: 0x0020 to 0x4000 (an interval out of range, or not
        /// a number, is held to the range; `ruleBroken` refuses it).
        public var intervalUnits: UInt16 {
            let held = intervalMilliseconds.isNaN ? Self.intervalRange.lowerBound
                : min(max(intervalMilliseconds, Self.intervalRange.lowerBound), Self.intervalRange.upperBound)
            return UInt16((held / 0.625).rounded())
        }

        /// Whether the advertisement answers scan requests: as asked, and always for legacy
        /// undirected connectable advertising (ADV_IND is scannable, 7.8.53).
        public var answersScans: Bool { scannable || legacy && connectable && directedTo == nil }

        /// Advertising_Event_Properties (Vol 4, Part E, 7.8.53): bit 0 connectable, 1 scannable,
        /// 2 directed, 3 high duty cycle directed, 4 legacy PDUs. For legacy PDUs one of the five
        /// the table allows: ADV_IND 0x13, ADV_DIRECT_IND 0x15 (low duty cycle) or 0x1D (high),
        /// ADV_SCAN_IND 0x12, ADV_NONCONN_IND 0x10.
        public var eventProperties: UInt16 {
            var bits: UInt16 = 0
            if connectable { bits |= 0x01 }
            if answersScans { bits |= 0x02 }
            if directedTo != nil { bits |= 0x04 }
            if highDutyCycle { bits |= 0x08 }
            if legacy { bits |= 0x10 }
            return bits
        }

        /// Advertising_Type of LE Set Advertising Parameters (7.8.5), for a controller driven
        /// with the legacy commands: 0x00 ADV_IND, 0x01 ADV_DIRECT_IND high duty cycle, 0x02
        /// ADV_SCAN_IND, 0x03 ADV_NONCONN_IND, 0x04 ADV_DIRECT_IND low duty cycle.
        public var legacyAdvertisingType: UInt8 {
            if directedTo != nil { return highDutyCycle ? 0x01 : 0x04 }
            if connectable { return 0x00 }
            return answersScans ? 0x02 : 0x03
        }
    }

    /// What the controller can do, as the checks need it.
    public struct Capabilities: Sendable, Equatable {
        /// Driven with the extended advertising commands (Vol 4, Part E, 3.1.1: never mixed with the legacy ones).
        public var extendedCommands: Bool
        /// LE Read Maximum Advertising Data Length (7.8.57).
        public var maximumDataLength: Int
        public var supports2MPHY: Bool
        public var supportsCodedPHY: Bool
        /// Read BD_ADDR gave an address (a controller without one answers zeros, 7.4.6).
        public var hasPublicAddress: Bool

        public init(extendedCommands: Bool, maximumDataLength: Int = AdvertisingPayload.extendedMaximumLength,
                    supports2MPHY: Bool = false, supportsCodedPHY: Bool = false, hasPublicAddress: Bool = true) {
            self.extendedCommands = extendedCommands
            self.maximumDataLength = maximumDataLength
            self.supports2MPHY = supports2MPHY
            self.supportsCodedPHY = supportsCodedPHY
            self.hasPublicAddress = hasPublicAddress
        }
    }

    /// The first rule `parameters` breaks on a controller that can do `capabilities`, as a
    /// sentence naming it; nil when the combination is allowed.
    public static func ruleBroken(by parameters: Parameters, on capabilities: Capabilities) -> String? {
        let p = parameters
        guard Parameters.intervalRange.contains(p.intervalMilliseconds) else {
            return "interval_ms must be 20 to 10240 (Vol 4, Part E, 7.8.5: Advertising_Interval 0x0020 to 0x4000 units of 0.625 ms)"
        }
        switch p.ownAddressType {
        case .publicAddress:
            if !capabilities.hasPublicAddress {
                return "own address type public: the controller has no public address (Read BD_ADDR gave 00:00:00:00:00:00, Vol 4, Part E, 7.4.6)"
            }
        case .randomAddress, .resolvableOrRandom:
            break
        case .resolvableOrPublic:
            if !capabilities.hasPublicAddress {
                return "own address type resolvable-or-public: the controller has no public address for the private address to stand for (Read BD_ADDR gave 00:00:00:00:00:00, Vol 4, Part E, 7.4.6); use resolvable-or-random"
            }
        }
        if let timeout = p.privateAddressTimeoutMilliseconds {
            guard p.ownAddressType.isResolvable else {
                return "rpa_timeout_ms goes with own address type resolvable-or-public or resolvable-or-random: only a resolvable private address is renewed (Vol 3, Part C, Appendix A, TGAP(private_addr_int))"
            }
            guard Parameters.privateAddressTimeoutRange.contains(timeout) else {
                return "rpa_timeout_ms must be 1000 to 41400000 (1 s to 11.5 h, RPA_Timeout's range, Vol 4, Part E, 7.8.45), not \(timeout)"
            }
        }
        if p.highDutyCycle {
            if p.directedTo == nil {
                return "high duty cycle is for directed advertising only (Vol 4, Part E, 7.8.53: Advertising_Event_Properties bit 3 needs bit 2)"
            }
            if !p.legacy {
                return "high duty cycle directed advertising is legacy only: ADV_DIRECT_IND (Vol 6, Part B, 4.4.2.4.2; no extended event type has it)"
            }
        }
        let scanResponse = p.scanResponse ?? []
        if p.legacy {
            if p.primaryPHY != .le1M || p.secondaryPHY != .le1M {
                return "legacy advertising PDUs go out on LE 1M only (Vol 4, Part E, 7.8.53: a legacy set's Primary_Advertising_PHY is LE 1M): leave the PHYs at 1m"
            }
            if p.directedTo != nil {
                if !p.connectable {
                    return "legacy directed advertising is connectable: ADV_DIRECT_IND is the only legacy directed PDU (Vol 4, Part E, 7.8.53: legacy properties 0b0010101 or 0b0011101)"
                }
                if p.scannable {
                    return "legacy directed advertising is not scannable (Vol 4, Part E, 7.8.53: ADV_DIRECT_IND, properties 0b0010101 or 0b0011101)"
                }
                if !p.data.isEmpty || !scanResponse.isEmpty {
                    return "legacy directed advertising carries no data: ADV_DIRECT_IND has no AdvData and no scan response (Vol 6, Part B, 2.3.1.2)"
                }
            }
            if p.data.count > AdvertisingPayload.maximumLength {
                return "legacy advertising data is at most 31 bytes, not \(p.data.count) (Vol 6, Part B, 2.3.1.1; Vol 4, Part E, 7.8.7)"
            }
            if scanResponse.count > AdvertisingPayload.maximumLength {
                return "a legacy scan response is at most 31 bytes, not \(scanResponse.count) (Vol 6, Part B, 2.3.2.2; Vol 4, Part E, 7.8.8)"
            }
            if !p.answersScans && !scanResponse.isEmpty {
                return "a scan response needs a scannable advertisement: ADV_NONCONN_IND is not scanned (Vol 4, Part E, 7.8.53, 7.8.55)"
            }
            return nil
        }
        guard capabilities.extendedCommands else {
            return "extended advertising needs a controller driven with the LE extended advertising commands (LE Extended Advertising, LE feature bit 12, Vol 4, Part E, 3.1.1); this one takes the legacy ones: use legacy"
        }
        if p.connectable && p.scannable {
            return "extended advertising cannot be both connectable and scannable (Vol 4, Part E, 7.8.53: connectable and scannable together are legacy only, ADV_IND)"
        }
        if p.primaryPHY == .le2M {
            return "primary_phy is 1m or coded: the primary advertising channels carry no LE 2M (Vol 4, Part E, 7.8.53: Primary_Advertising_PHY 0x01 or 0x03)"
        }
        if (p.primaryPHY == .leCoded || p.secondaryPHY == .leCoded) && !capabilities.supportsCodedPHY {
            return "the controller has no LE Coded PHY (LE feature bit 11, Vol 6, Part B, 4.6; Vol 4, Part E, 7.8.53: Unsupported Feature or Parameter Value)"
        }
        if p.secondaryPHY == .le2M && !capabilities.supports2MPHY {
            return "the controller has no LE 2M PHY (LE feature bit 8, Vol 6, Part B, 4.6; Vol 4, Part E, 7.8.53: Unsupported Feature or Parameter Value)"
        }
        if p.scannable {
            if !p.data.isEmpty {
                return "a scannable extended advertisement carries its data in the scan response: its AUX_ADV_IND has no AdvData (Vol 4, Part E, 7.8.54: a type that does not support advertising data)"
            }
            if scanResponse.isEmpty {
                return "a scannable extended advertisement needs a scan response (Vol 4, Part E, 7.8.56: enabling one without scan response data is Command Disallowed)"
            }
        } else if !scanResponse.isEmpty {
            return "a scan response needs a scannable advertisement (Vol 4, Part E, 7.8.55: a non-scannable set takes no scan response data)"
        }
        if p.connectable {
            let room = min(AdvertisingPayload.connectableExtendedMaximumLength, capabilities.maximumDataLength)
            if p.data.count > room {
                return "connectable extended advertising data is at most \(room) bytes, not \(p.data.count): it goes in one AUX_ADV_IND (Vol 6, Part B, 2.3.4) and never past the controller's Max_Advertising_Data_Length (Vol 4, Part E, 7.8.57)"
            }
        } else if p.data.count > capabilities.maximumDataLength {
            return "advertising data of \(p.data.count) bytes is more than the controller takes: Max_Advertising_Data_Length \(capabilities.maximumDataLength) (Vol 4, Part E, 7.8.57)"
        }
        if scanResponse.count > capabilities.maximumDataLength {
            return "a scan response of \(scanResponse.count) bytes is more than the controller takes: Max_Advertising_Data_Length \(capabilities.maximumDataLength) (Vol 4, Part E, 7.8.57)"
        }
        return nil
    }
}
