import BlemuCore

/// What one advertiser asks the controller for: connectable undirected advertising at an
/// interval, from its own static random address, with its payloads.
public struct AdvertisingRequest: Sendable, Equatable {
    /// Units of 0.625 ms (Vol 4, Part E, 7.8.5).
    public var interval: UInt16
    public var address: BluetoothAddress
    public var advertisingData: [UInt8]
    public var scanResponseData: [UInt8]
    /// False for a broadcaster: non-connectable and non-scannable advertising (ADV_NONCONN_IND,
    /// Vol 6, Part B, 2.3.1.3, or its extended form), which no central can connect to or scan;
    /// the scan response is then not sent.
    public var connectable: Bool
    /// A broadcaster's periodic train (Vol 6, Part B, 4.4.2.12) beside its advertising, carrying
    /// the same advertising data: Periodic_Advertising_Interval in units of 1.25 ms (Vol 4,
    /// Part E, 7.8.61: 0x0006 and up). Nil: no train.
    public var periodicInterval: UInt16?
    /// A connectable set that advertises with extended PDUs all the same: a recorded device
    /// that did (its data may pass 31 octets). Connectable extended advertising is not
    /// scannable (7.8.53), so the scan response is then not sent.
    public var connectableExtended: Bool

    public init(interval: UInt16, address: BluetoothAddress, advertisingData: [UInt8], scanResponseData: [UInt8],
                connectable: Bool = true, periodicInterval: UInt16? = nil, connectableExtended: Bool = false) {
        self.connectableExtended = connectable && connectableExtended
        self.interval = interval
        self.address = address
        self.advertisingData = advertisingData
        self.scanResponseData = scanResponseData
        self.connectable = connectable
        self.periodicInterval = connectable ? nil : periodicInterval
    }

    /// Whether the set advertises with extended PDUs: only a non-connectable set whose data does
    /// not fit a legacy PDU's 31 octets, or that has a periodic train (connectable sets keep to
    /// legacy PDUs, which every central scans for). A train is found through the SyncInfo of
    /// extended advertising PDUs; a set with legacy properties cannot have one (Vol 4, Part E,
    /// 7.8.61: "If the advertising set ... specified scannable, connectable, legacy, or
    /// anonymous advertising, the Controller shall return ... Invalid HCI Command Parameters").
    public var usesExtendedPDUs: Bool {
        connectableExtended || !connectable && (advertisingData.count > AdvertisingPayload.maximumLength || periodicInterval != nil)
    }
}

/// The advertising sets of one controller: the bookkeeping that lets several devices share one
/// radio. On a controller with LE Extended Advertising each device gets its own set — own
/// address, own interval, own payloads — and an incoming connection names its set in LE
/// Advertising Set Terminated (Vol 4, Part E, 7.7.65.18). A legacy-only controller has one
/// set of size one: the legacy advertising commands (7.8.5 – 7.8.9).
///
/// A controller takes either the legacy or the extended commands, never both (Vol 4, Part E,
/// 3.1.1), so the mode is chosen once per initialization.
public final class Advertiser {
    public enum Mode: Equatable, Sendable {
        case legacy
        case extended(sets: Int)
    }

    public let hci: HCIHost
    public private(set) var mode: Mode = .legacy
    /// Set handles in use, by whoever took them.
    private var taken: Set<UInt8> = []
    /// The random address last given to a legacy controller (LE Set Random Address).
    private var legacyAddress: BluetoothAddress?
    /// Sets whose periodic train the host enabled and has not disabled since.
    public private(set) var periodicSets: Set<UInt8> = []

    public init(hci: HCIHost) {
        self.hci = hci
    }

    /// Takes the controller's choice of legacy or extended commands (`ControllerHost.usesExtendedCommands`,
    /// made once per initialization for every role) for a controller that just became ready.
    public func configure(extendedCommands: Bool) {
        taken.removeAll()
        legacyAddress = nil
        periodicSets.removeAll()
        if extendedCommands, hci.info.advertisingSets > 0 {
            mode = .extended(sets: hci.info.advertisingSets)
        } else {
            mode = .legacy
        }
    }

    /// How many sets can advertise at once.
    public var capacity: Int {
        switch mode {
        case .legacy: return 1
        case .extended(let sets): return sets
        }
    }

    /// A free set handle, or nil when every set is taken.
    public func takeSet() -> UInt8? {
        guard let handle = (0..<UInt8(clamping: capacity)).first(where: { !taken.contains($0) }) else { return nil }
        taken.insert(handle)
        return handle
    }

    /// Gives a set handle back (the programmable host's advertisements take one each and give
    /// it back when stopped); a handle not taken changes nothing.
    public func releaseSet(_ handle: UInt8) {
        taken.remove(handle)
    }

    /// Legacy advertising uses one address per controller (LE Set Random Address, 7.8.4);
    /// extended sets carry their own, set with their parameters.
    public func setAddress(_ address: BluetoothAddress, completion: ((CommandResult) -> Void)? = nil) {
        guard mode == .legacy else {
            completion?(.complete([HCIStatus.success]))
            return
        }
        legacyAddress = address
        hci.send(.leSetRandomAddress(address), completion: completion)
    }

    /// The TX power a set advertises with, for the TX Power Level in its payload: on a legacy
    /// controller LE Read Advertising Physical Channel Tx Power (7.8.6); with extended sets
    /// that legacy command is refused (3.1.1), and the set's parameters return the power the
    /// controller selected (7.8.53). Nil when the controller does not say.
    public func readTxPower(set: UInt8, interval: UInt16, completion: @escaping (Int8?) -> Void) {
        let command: HCICommand
        switch mode {
        case .legacy: command = .leReadAdvertisingChannelTxPower
        case .extended:
            command = .leSetExtendedAdvertisingParameters(set: set, intervalMin: interval, intervalMax: interval,
                                                          ownAddressType: .randomDevice)
        }
        hci.send(command) { result in
            guard case .complete(let p) = result, p.count >= 2, p[0] == HCIStatus.success else {
                completion(nil)
                return
            }
            completion(Int8(bitPattern: p[1]))
        }
    }

    /// Whether the controller can carry `request`: legacy commands carry at most 31 octets of
    /// advertising data (Vol 4, Part E, 7.8.7); extended sets up to 251 in one command (7.8.54);
    /// a connectable extended set what one AUX_ADV_IND carries
    /// (`AdvertisingPayload.connectableExtendedMaximumLength`); and never more than the
    /// controller says a set takes (7.8.57).
    public func canCarry(_ request: AdvertisingRequest) -> Bool {
        switch mode {
        case .legacy: return !request.usesExtendedPDUs
        case .extended:
            return request.advertisingData.count <= extendedDataLimit(connectable: request.connectableExtended)
                && (request.periodicInterval == nil || supportsPeriodicAdvertising)
        }
    }

    /// The most advertising data an extended set of this controller is given: see `canCarry`.
    public func extendedDataLimit(connectable: Bool) -> Int {
        min(connectable ? AdvertisingPayload.connectableExtendedMaximumLength : HCICommand.extendedDataMaximumLength,
            hci.info.maximumAdvertisingDataLength)
    }

    /// Whether a set can have a periodic train: extended advertising commands and LE Periodic
    /// Advertising (Vol 6, Part B, 4.6, bit 13; the periodic commands are 7.8.61 – 7.8.63).
    public var supportsPeriodicAdvertising: Bool { mode != .legacy && hci.info.supportsPeriodicAdvertising }

    /// Why this controller sends no periodic train, for a log line; nil when it can.
    public var periodicAdvertisingUnsupportedReason: String? {
        if !hci.info.supportsExtendedAdvertising { return "the controller has no LE Extended Advertising, which periodic advertising needs" }
        if !hci.info.supportsPeriodicAdvertising { return "the controller has no LE Periodic Advertising (LE feature bit 13)" }
        if mode == .legacy { return "the controller is driven with legacy advertising commands (it reports no advertising sets)" }
        return nil
    }

    /// The set's kind of advertising changed between legacy and extended PDUs, or its periodic
    /// train's interval, which need new parameters (a restart), not only new data (periodic
    /// parameters are refused while the train runs: Command Disallowed, 7.8.61).
    public func needsRestart(from old: AdvertisingRequest, to new: AdvertisingRequest) -> Bool {
        old.usesExtendedPDUs != new.usesExtendedPDUs || old.periodicInterval != new.periodicInterval
    }

    /// (Re)starts a set: parameters, address, payloads, enable. `wasOn` turns it off first,
    /// because parameters cannot change while a set advertises (7.8.5, 7.8.53).
    public func start(set: UInt8, _ request: AdvertisingRequest, wasOn: Bool, completion: @escaping (CommandResult) -> Void) {
        switch mode {
        case .legacy:
            if wasOn { hci.send(.leSetAdvertisingEnable(false)) }
            // LE Set Random Address is refused while legacy advertising is on (Command
            // Disallowed, 7.8.4), so a new address (privacy) goes in after the stop.
            if request.address != legacyAddress {
                legacyAddress = request.address
                hci.send(.leSetRandomAddress(request.address)) { [weak self] result in
                    // Refused (e.g. Command Disallowed while the controller scans or initiates
                    // for a central sharing it): the next start sends the address again.
                    if !result.succeeded, self?.legacyAddress == request.address { self?.legacyAddress = nil }
                }
            }
            // Advertising_Type 0x03: ADV_NONCONN_IND, non-connectable undirected (7.8.5).
            hci.send(.leSetAdvertisingParameters(intervalMin: request.interval, intervalMax: request.interval,
                                                 type: request.connectable ? 0x00 : 0x03, ownAddressType: .randomDevice))
            sendPayloads(set: set, advertisingData: request.advertisingData,
                         scanResponseData: request.connectable ? request.scanResponseData : nil, extendedPDUs: false)
            hci.send(.leSetAdvertisingEnable(true), completion: completion)
        case .extended:
            if wasOn {
                stopPeriodicTrain(set: set)
                hci.send(.leSetExtendedAdvertisingEnable(false, set: set))
            }
            let properties = request.connectableExtended ? HCICommand.connectableExtendedProperties
                : request.connectable ? HCICommand.connectableLegacyProperties
                : request.usesExtendedPDUs ? HCICommand.nonConnectableExtendedProperties : HCICommand.nonConnectableLegacyProperties
            hci.send(.leSetExtendedAdvertisingParameters(set: set, intervalMin: request.interval, intervalMax: request.interval,
                                                         ownAddressType: .randomDevice, properties: properties))
            hci.send(.leSetAdvertisingSetRandomAddress(set: set, request.address))
            // A non-scannable set takes no scan response data (7.8.55: Invalid HCI Command Parameters).
            if request.connectableExtended {
                // The set is disabled here, so its data may go in fragments (7.8.54).
                for command in HCICommand.leSetExtendedAdvertisingDataFragments(set: set, request.advertisingData) { hci.send(command) }
            } else {
                sendPayloads(set: set, advertisingData: request.advertisingData,
                             scanResponseData: request.connectable ? request.scanResponseData : nil, extendedPDUs: request.usesExtendedPDUs)
            }
            if let periodic = request.periodicInterval, let data = HCICommand.leSetPeriodicAdvertisingData(set: set, data: request.advertisingData) {
                // The train's parameters and data, then its enable; it is sent once the set's
                // advertising is enabled too (7.8.63), which carries the SyncInfo that finds it.
                hci.send(.leSetPeriodicAdvertisingParameters(set: set, intervalMin: periodic, intervalMax: periodic))
                hci.send(data)
                hci.send(.leSetPeriodicAdvertisingEnable(true, set: set)) { [weak self] result in
                    if !result.succeeded { self?.periodicSets.remove(set) }
                }
                periodicSets.insert(set)
            }
            hci.send(.leSetExtendedAdvertisingEnable(true, set: set), completion: completion)
        }
    }

    /// Disabling a set's advertising leaves its periodic train running (7.8.56): the train is
    /// disabled by itself (7.8.63).
    private func stopPeriodicTrain(set: UInt8) {
        guard periodicSets.remove(set) != nil else { return }
        hci.send(.leSetPeriodicAdvertisingEnable(false, set: set))
    }

    /// New payloads for a set that advertises (or is being started), without stopping it; nil
    /// leaves that payload as it is. Legacy: LE Set Advertising Data and LE Set Scan Response
    /// Data are allowed while advertising is enabled, "the Controller shall use the new data in
    /// subsequent advertising events" (Vol 4, Part E, 7.8.7, 7.8.8). Extended: the sets use
    /// legacy PDUs (`leSetExtendedAdvertisingParameters`), whose data goes in one command with
    /// Operation 0x03 (complete data) of at most 31 octets, the one operation a set that is
    /// enabled accepts for its scan response and one of the two for its advertising data
    /// (7.8.54, 7.8.55; any other is Command Disallowed). `completion` hears each command sent.
    /// `extendedPDUs`: the set advertises with extended PDUs (`AdvertisingRequest.usesExtendedPDUs`),
    /// whose data may pass 31 octets; operation 0x03 in one command is allowed while it is enabled
    /// as long as the data fits one AUX_ADV_IND, which a broadcaster's does.
    /// A set with a periodic train gets the new advertising data in its train too: LE Set
    /// Periodic Advertising Data with Operation 0x03, complete data, which the controller takes
    /// while the train runs (7.8.62).
    public func update(set: UInt8, advertisingData: [UInt8]?, scanResponseData: [UInt8]?, extendedPDUs: Bool = false,
                       completion: @escaping (HCICommand, CommandResult) -> Void) {
        sendPayloads(set: set, advertisingData: advertisingData, scanResponseData: scanResponseData, extendedPDUs: extendedPDUs,
                     completion: completion)
        if let advertisingData, periodicSets.contains(set),
           let command = HCICommand.leSetPeriodicAdvertisingData(set: set, data: advertisingData) {
            hci.send(command) { completion(command, $0) }
        }
    }

    /// The payload commands of the mode, for what is not nil.
    private func sendPayloads(set: UInt8, advertisingData: [UInt8]?, scanResponseData: [UInt8]?, extendedPDUs: Bool,
                              completion: ((HCICommand, CommandResult) -> Void)? = nil) {
        let extended = mode != .legacy
        var commands: [HCICommand] = []
        if let advertisingData {
            let maximum = extendedPDUs ? HCICommand.extendedDataMaximumLength : AdvertisingPayload.maximumLength
            commands.append(extended ? .leSetExtendedAdvertisingData(set: set, advertisingData, maximumLength: maximum)
                                     : .leSetAdvertisingData(advertisingData))
        }
        if let scanResponseData {
            commands.append(extended ? .leSetExtendedScanResponseData(set: set, scanResponseData) : .leSetScanResponseData(scanResponseData))
        }
        for command in commands {
            hci.send(command, completion: completion.map { completion in { completion(command, $0) } })
        }
    }

    public func stop(set: UInt8, completion: ((CommandResult) -> Void)? = nil) {
        switch mode {
        case .legacy: hci.send(.leSetAdvertisingEnable(false), completion: completion)
        case .extended:
            stopPeriodicTrain(set: set)
            hci.send(.leSetExtendedAdvertisingEnable(false, set: set), completion: completion)
        }
    }
}
