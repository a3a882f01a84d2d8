import BlemuCore

/// What one advertiser asks the controller for: connectable undirected advertising at an
/// interval, from its own static random address, with its payloads.
public struct AdvertisingRequest: Sendable, Equatable {
    /// Units of 0.625 ms (Vol 4, Part E, 7.8.5).
    public var interval: UInt16
    public var address: BluetoothAddress
    public var advertisingData: [UInt8]
    public var scanResponseData: [UInt8]

    public init(interval: UInt16, address: BluetoothAddress, advertisingData: [UInt8], scanResponseData: [UInt8]) {
        self.interval = interval
        self.address = address
        self.advertisingData = advertisingData
        self.scanResponseData = scanResponseData
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

    public init(hci: HCIHost) {
        self.hci = hci
    }

    /// Takes the controller's choice of legacy or extended commands (`ControllerHost.usesExtendedCommands`,
    /// made once per initialization for every role) for a controller that just became ready.
    public func configure(extendedCommands: Bool) {
        taken.removeAll()
        legacyAddress = nil
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
            hci.send(.leSetAdvertisingParameters(intervalMin: request.interval, intervalMax: request.interval,
                                                 ownAddressType: .randomDevice))
            sendPayloads(set: set, advertisingData: request.advertisingData, scanResponseData: request.scanResponseData)
            hci.send(.leSetAdvertisingEnable(true), completion: completion)
        case .extended:
            if wasOn { hci.send(.leSetExtendedAdvertisingEnable(false, set: set)) }
            hci.send(.leSetExtendedAdvertisingParameters(set: set, intervalMin: request.interval, intervalMax: request.interval,
                                                         ownAddressType: .randomDevice))
            hci.send(.leSetAdvertisingSetRandomAddress(set: set, request.address))
            sendPayloads(set: set, advertisingData: request.advertisingData, scanResponseData: request.scanResponseData)
            hci.send(.leSetExtendedAdvertisingEnable(true, set: set), completion: completion)
        }
    }

    /// New payloads for a set that advertises (or is being started), without stopping it; nil
    /// leaves that payload as it is. Legacy: LE Set Advertising Data and LE Set Scan Response
    /// Data are allowed while advertising is enabled, "the Controller shall use the new data in
    /// subsequent advertising events" (Vol 4, Part E, 7.8.7, 7.8.8). Extended: the sets use
    /// legacy PDUs (`leSetExtendedAdvertisingParameters`), whose data goes in one command with
    /// Operation 0x03 (complete data) of at most 31 octets, the one operation a set that is
    /// enabled accepts for its scan response and one of the two for its advertising data
    /// (7.8.54, 7.8.55; any other is Command Disallowed). `completion` hears each command sent.
    public func update(set: UInt8, advertisingData: [UInt8]?, scanResponseData: [UInt8]?,
                       completion: @escaping (HCICommand, CommandResult) -> Void) {
        sendPayloads(set: set, advertisingData: advertisingData, scanResponseData: scanResponseData, completion: completion)
    }

    /// The payload commands of the mode, for what is not nil.
    private func sendPayloads(set: UInt8, advertisingData: [UInt8]?, scanResponseData: [UInt8]?,
                              completion: ((HCICommand, CommandResult) -> Void)? = nil) {
        let extended = mode != .legacy
        var commands: [HCICommand] = []
        if let advertisingData {
            commands.append(extended ? .leSetExtendedAdvertisingData(set: set, advertisingData) : .leSetAdvertisingData(advertisingData))
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
        case .extended: hci.send(.leSetExtendedAdvertisingEnable(false, set: set), completion: completion)
        }
    }
}
