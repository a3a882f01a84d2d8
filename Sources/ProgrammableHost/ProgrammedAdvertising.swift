import BlemuConnection
import BlemuCore
import BlemuDevice
import BlemuGATT
import BlemuHCI
import BlemuHost
import BlemuSecurity
import Logging

/// The programmable host's advertising (issue 36; Docs/CONTROL.md, "The programmable host": ops
/// `advertise` and `advertise-stop`): advertisements started and stopped on request, each with
/// its data, scan response, kind (legacy or extended, connectable, scannable, directed), own
/// address, interval and PHYs, each in an advertising set of its own and known by an id that is
/// never reused.
///
/// The peripheral side of one controller: a `PeripheralHost` whose one device is a blank one
/// (GAP and GATT only, `ProgrammedHostDevice`), configured with `programmedAdvertising` so it
/// never advertises by itself. A central that connects to an advertisement gets a link of that
/// device, with what every peripheral link has: its GATT server, the Security Manager on CID 6
/// (`PeripheralSecurity`, with the bond file of the configuration), credit based channels. Each
/// accepted link is told to `onConnection`; the advertisement then goes on (re-enabled as a
/// device's is) until stopped. Why an advertisement stopped is told to `onStopped`: stopped on
/// request, the controller reset or lost, the host stopping, a high duty cycle directed
/// advertisement's timeout (Advertising Timeout 0x3C, Vol 4, Part E, 7.7.65.1 and 7.7.65.18), or a
/// command of its start the controller refused.
///
/// Make it before the controller comes up (`ControllerHost.controllerUp`): the controller's
/// choice of legacy or extended commands counts it (`wantsExtendedAdvertising`), so a controller
/// with LE Extended Advertising is driven with the extended commands and takes both kinds.
public final class ProgrammedAdvertising {
    /// Why an advertisement stopped.
    public enum StopReason: Equatable, Sendable {
        /// `stop` (`advertise-stop`), or `stopAll` with no other reason.
        case stopped
        /// The programmable host's `reset` (`stopAll`).
        case hostReset
        /// High duty cycle directed advertising ended with no connection (Advertising Timeout, 0x3C).
        case timeout
        /// The controller was reset (a hardware error): its sets are gone.
        case controllerReset
        /// The controller's transport went away.
        case controllerLost
        /// The host stops (`ControllerHost.stop`).
        case hostStopping
        /// The controller refused a command of the advertisement's start (`status` nil: no answer).
        case refused(command: String, status: UInt8?)
        /// The controller ended the set with another status (LE Advertising Set Terminated, 7.7.65.18).
        case ended(status: UInt8)

        /// The word for the `advertising-stopped` event's `reason`.
        public var word: String {
            switch self {
            case .stopped: return "stopped"
            case .hostReset: return "reset"
            case .timeout: return "timeout"
            case .controllerReset: return "controller-reset"
            case .controllerLost: return "controller-lost"
            case .hostStopping: return "host-stopping"
            case .refused: return "controller-refused"
            case .ended: return "controller-ended"
            }
        }

        /// The HCI status behind it, when the controller gave one.
        public var status: UInt8? {
            switch self {
            case .timeout: return HCIStatus.advertisingTimeout
            case .refused(_, let status): return status
            case .ended(let status): return status
            default: return nil
            }
        }
    }

    /// A request refused before anything went to the controller.
    public struct Refusal: Error, Equatable, Sendable {
        /// Why, naming the rule (one line).
        public let message: String
        /// The control socket's stable word (`not-ready`, `no-room`), nil for a broken rule.
        public let code: String?

        public init(_ message: String, code: String? = nil) {
            self.message = message
            self.code = code
        }
    }

    /// A link an advertisement accepted.
    public struct AcceptedLink {
        /// The advertisement's id.
        public let advertisement: Int
        /// The link: its L2CAP, ATT server, security state, channels (`connection.handle` its handle).
        public let connection: LEConnection
        /// The central, as LE Connection Complete gives it (an identity address when the controller resolved it).
        public let peer: LEAddress
        /// Peer_Address_Type as the controller gave it (Vol 4, Part E, 7.7.65.10): 0x00 public,
        /// 0x01 random, 0x02 public identity, 0x03 random identity (resolved by the controller).
        public let peerAddressType: UInt8
        /// The address the central connected to: the one advertised from.
        public let ownAddress: LEAddress
        /// The link's interval, latency and supervision timeout as it was made.
        public let parameters: LinkParameters
    }

    /// One advertisement while it runs.
    public struct Advertisement: Equatable, Sendable {
        public let id: Int
        public let parameters: Parameters
        /// Its advertising set (0 on a controller driven with legacy commands, which has one).
        public let set: UInt8
        /// The address it advertises from: with a resolvable own address type, the resolvable
        /// private address of the moment (a new one every `parameters.privateAddressTimeout`).
        public internal(set) var ownAddress: LEAddress
        /// The identity a resolvable `ownAddress` stands for (the public address, or the host's
        /// static random one), which a link's pairing distributes; nil for the other types.
        public let identityAddress: LEAddress?
        /// The controller advertises it now (false while its start is under way, and between a
        /// connection and its re-enable).
        public internal(set) var isOn: Bool
    }

    /// The peripheral role on the controller.
    public let peripheralHost: PeripheralHost
    /// The blank device whose links the advertisements accept.
    public let peripheral: Peripheral
    /// The host's static random address (Vol 6, Part B, 1.3.2.1): own address type random.
    public var randomAddress: BluetoothAddress
    public var logger: Logger

    /// Each link an advertisement accepted.
    public var onConnection: ((AcceptedLink) -> Void)?
    /// Each advertisement that stopped, with why (once per advertisement).
    public var onStopped: ((Int, StopReason) -> Void)?
    /// Each link of the blank device that closed: its connection handle and the reason of
    /// Disconnection Complete (Vol 4, Part E, 7.7.5; 0x16 when this side disconnected). Its
    /// `LEConnection` is closed by then.
    public var onLinkClosed: ((UInt16, UInt8) -> Void)?

    /// The advertisements that run (or start), by id.
    public private(set) var advertisements: [Int: Advertisement] = [:]
    /// The last advertisement of each set, kept after it stopped: a link the controller made from
    /// the set as it was being stopped is still routed to the device (and told, with that id).
    private var lastOfSet: [UInt8: (id: Int, ownAddress: LEAddress, identityAddress: LEAddress?)] = [:]
    /// Each advertisement's timer for its next resolvable private address (one a running
    /// advertisement with a resolvable own address type; nothing else wakes the loop for it).
    private var privateAddressTimers: [Int: TimerID] = [:]
    private var privateAddressRandom = SystemRandomNumberGenerator()
    /// Advertisements whose re-enable after a connection the controller refused (no room for a
    /// link): tried again when a link closes.
    private var waitingForRoom: Set<Int> = []
    private var nextID = 1
    private var stopping = false
    /// The controller's resolving list is being changed: advertising is off meanwhile (7.8.38),
    /// and these advertisements go on when it is done.
    private var resolvingListChanging = false
    private var pausedForResolvingList: Set<Int> = []

    private var hci: HCIHost { peripheralHost.hci }
    private var advertiser: Advertiser { peripheralHost.advertiser }

    /// The peripheral side on `controller`: `configuration` names the blank device (GAP Device
    /// Name), its identity address (the host's static random address when it gives none) and its
    /// security (bond file, pairing); `programmedAdvertising` is set here. `randomAddress`: the
    /// host's static random address. `device`: what the advertised links are served, the blank
    /// `ProgrammedHostDevice` unless the host serves a device or a profile (`blemu host --serve`),
    /// whose database, values and behaviour then answer every central an advertisement accepts.
    public init(controller: ControllerHost, configuration: PeripheralConfiguration, randomAddress: BluetoothAddress,
                device: Device = ProgrammedHostDevice(), logger: Logger) throws(GATTDatabaseError) {
        var configuration = configuration
        configuration.programmedAdvertising = true
        configuration.address = configuration.address ?? randomAddress
        peripheralHost = PeripheralHost(on: controller)
        peripheral = try Peripheral(device: device, configuration: configuration, host: peripheralHost, logger: logger)
        self.randomAddress = randomAddress
        self.logger = logger
        peripheralHost.programmedAdvertising = self
    }

    /// What this controller can do, for the checks (`ruleBroken`).
    public var capabilities: Capabilities {
        Capabilities(extendedCommands: advertiser.mode != .legacy, maximumDataLength: hci.info.maximumAdvertisingDataLength,
                     supports2MPHY: hci.info.supports2MPHY, supportsCodedPHY: hci.info.supportsCodedPHY,
                     hasPublicAddress: hci.info.address != BluetoothAddress(value: 0))
    }

    // MARK: Start and stop

    /// Starts an advertisement: its id, or why not (nothing sent then). The controller's answer
    /// comes later: a refused command stops it (`onStopped` with `.refused`).
    public func start(_ parameters: Parameters) -> Result<Int, Refusal> {
        guard hci.isReady, !stopping, !peripheralHost.controller.isStopping else {
            return .failure(Refusal("the controller is not ready", code: "not-ready"))
        }
        if let rule = Self.ruleBroken(by: parameters, on: capabilities) { return .failure(Refusal(rule)) }
        guard let set = advertiser.takeSet() else {
            let room = advertiser.mode == .legacy
                ? "the controller is driven with the legacy advertising commands, which advertise one at a time (Vol 4, Part E, 7.8.5 – 7.8.9)"
                : "the controller's \(advertiser.capacity) advertising sets are all in use (LE Read Number of Supported Advertising Sets, Vol 4, Part E, 7.8.58)"
            return .failure(Refusal("no advertising set free: \(room); stop one first", code: "no-room"))
        }
        let ownAddress: LEAddress
        var identityAddress: LEAddress?
        switch parameters.ownAddressType {
        case .publicAddress: ownAddress = LEAddress(hci.info.address, isRandom: false)
        case .randomAddress: ownAddress = LEAddress(randomAddress, isRandom: true)
        case .resolvableOrPublic, .resolvableOrRandom:
            identityAddress = parameters.ownAddressType == .resolvableOrPublic
                ? LEAddress(hci.info.address, isRandom: false) : LEAddress(randomAddress, isRandom: true)
            ownAddress = LEAddress(makePrivateAddress(), isRandom: true)
        }
        let id = nextID
        nextID += 1
        advertisements[id] = Advertisement(id: id, parameters: parameters, set: set, ownAddress: ownAddress,
                                           identityAddress: identityAddress, isOn: false)
        lastOfSet[set] = (id, ownAddress, identityAddress)
        send(start: id, set: set, parameters: parameters, ownAddress: ownAddress)
        if parameters.ownAddressType.isResolvable { schedulePrivateAddress(id, after: parameters.privateAddressTimeout) }
        let from = identityAddress.map { "resolvable private address \(ownAddress.address) (identity \($0.address))" } ?? "\(ownAddress.address)"
        logger.event(.advertisingStarted, .info, "advertisement \(id) starting: \(Self.describe(parameters)) from \(from)",
                     ["advertisement": .string("\(id)")])
        return .success(id)
    }

    /// Stops advertisement `id`; false when no such advertisement runs (nothing changes).
    @discardableResult
    public func stop(_ id: Int) -> Bool {
        guard let advertisement = advertisements[id] else { return false }
        turnOff(advertisement)
        end(id, .stopped)
        return true
    }

    /// Stops every advertisement with `reason` (the host's `reset`).
    public func stopAll(reason: StopReason = .stopped) {
        for id in advertisements.keys.sorted() {
            if let advertisement = advertisements[id] { turnOff(advertisement) }
            end(id, reason)
        }
    }

    /// The commands of a start, in order; the enable's answer (with the others' failures) decides.
    private func send(start id: Int, set: UInt8, parameters p: Parameters, ownAddress: LEAddress) {
        var firstFailure: (command: String, status: UInt8?)?
        func note(_ command: HCICommand) -> (CommandResult) -> Void {
            { result in
                guard !result.succeeded, result != .cancelled, firstFailure == nil else { return }
                firstFailure = (command.name, result.status)
            }
        }
        func send(_ command: HCICommand) { hci.send(command, completion: note(command)) }
        // A resolvable private address the host made goes out as a random address (Own_Address_Type
        // 0x01, the set's or the controller's random address), so no resolving list is needed.
        let ownType: AddressType = p.ownAddressType == .publicAddress ? .publicDevice : .randomDevice
        let enable: HCICommand
        switch advertiser.mode {
        case .legacy:
            send(.leSetAdvertisingParameters(intervalMin: p.intervalUnits, intervalMax: p.intervalUnits, type: p.legacyAdvertisingType,
                                             ownAddressType: ownType, peer: p.directedTo))
            if ownAddress.isRandom {
                advertiser.setAddress(ownAddress.address, completion: note(.leSetRandomAddress(ownAddress.address)))
            }
            if p.directedTo == nil {
                send(.leSetAdvertisingData(p.data))
                if p.answersScans { send(.leSetScanResponseData(p.scanResponse ?? [])) }
            }
            enable = .leSetAdvertisingEnable(true)
        case .extended:
            send(.leSetExtendedAdvertisingParameters(set: set, intervalMin: p.intervalUnits, intervalMax: p.intervalUnits,
                                                     ownAddressType: ownType, properties: p.eventProperties, peer: p.directedTo,
                                                     primaryPHY: p.primaryPHY.rawValue, secondaryPHY: p.secondaryPHY.rawValue))
            if ownAddress.isRandom { send(.leSetAdvertisingSetRandomAddress(set: set, ownAddress.address)) }
            if p.legacy {
                // Legacy PDUs: complete data of at most 31 octets (7.8.54, 7.8.55); ADV_DIRECT_IND has none.
                if p.directedTo == nil { send(.leSetExtendedAdvertisingData(set: set, p.data)) }
                if p.answersScans { send(.leSetExtendedScanResponseData(set: set, p.scanResponse ?? [])) }
            } else {
                // The set is disabled, so its data may go in fragments (7.8.54, 7.8.55).
                if !p.data.isEmpty {
                    for command in HCICommand.leSetExtendedAdvertisingDataFragments(set: set, p.data) { send(command) }
                }
                if p.scannable {
                    for command in HCICommand.leSetExtendedScanResponseDataFragments(set: set, p.scanResponse ?? []) { send(command) }
                }
            }
            // High duty cycle directed advertising lasts 1.28 s at most (7.8.56: a Duration of
            // at most 128, not 0).
            enable = .leSetExtendedAdvertisingEnable(true, set: set, duration: p.highDutyCycle ? Self.highDutyCycleDuration : 0)
        }
        hci.send(enable) { [weak self] result in
            guard let self, result != .cancelled, var advertisement = self.advertisements[id] else { return }
            if let failure = firstFailure ?? (result.succeeded ? nil : (enable.name, result.status)) {
                self.logger.warning("advertisement \(id) refused by the controller: \(failure.command)",
                                    metadata: [LogKey.hciStatus: .string(failure.status.map(Hex.byte) ?? "timeout")])
                if result.succeeded { self.turnOff(advertisement) }
                self.end(id, .refused(command: failure.command, status: failure.status))
                return
            }
            // Turned off meanwhile for a resolving list change: on again when it is done.
            guard !self.pausedForResolvingList.contains(id) else { return }
            advertisement.isOn = true
            self.advertisements[id] = advertisement
        }
    }

    /// 7.8.56: Duration in units of 10 ms; 1.28 s for high duty cycle directed advertising.
    public static let highDutyCycleDuration: UInt16 = 128

    /// Advertising off and, for an extended set, the set removed and given back.
    private func turnOff(_ advertisement: Advertisement) {
        waitingForRoom.remove(advertisement.id)
        pausedForResolvingList.remove(advertisement.id)
        guard hci.isReady else { return }
        switch advertiser.mode {
        case .legacy:
            hci.send(.leSetAdvertisingEnable(false))
        case .extended:
            hci.send(.leSetExtendedAdvertisingEnable(false, set: advertisement.set))
            // Its next use starts from no data (7.8.53 refuses properties the old data does not fit).
            hci.send(.leRemoveAdvertisingSet(set: advertisement.set))
        }
    }

    /// The advertisement is over: its set given back, `onStopped` told.
    private func end(_ id: Int, _ reason: StopReason) {
        guard let advertisement = advertisements.removeValue(forKey: id) else { return }
        waitingForRoom.remove(id)
        pausedForResolvingList.remove(id)
        if let timer = privateAddressTimers.removeValue(forKey: id) { scheduler.cancel(timer) }
        advertiser.releaseSet(advertisement.set)
        if advertisement.identityAddress != nil, advertiser.mode == .legacy, hci.isReady, !stopping {
            // The controller's one random address (7.8.4) was the private address: the host's
            // static random address again, which its scans and connections use.
            advertiser.setAddress(randomAddress)
        }
        logger.event(.advertisingStopped, reason == .stopped ? .info : .notice,
                     "advertisement \(id) stopped: \(reason.word)\(reason.status.map { " (\(Hex.byte($0)))" } ?? "")",
                     ["advertisement": .string("\(id)")])
        onStopped?(id, reason)
    }

    /// Advertising on again after a connection ended it (legacy advertising ends with the
    /// connection it made, Vol 6, Part B, 4.4.2; an extended set with LE Advertising Set
    /// Terminated, Vol 4, Part E, 7.8.56). A controller that refuses (no room for another link:
    /// Command Disallowed, Connection Limit Exceeded) is tried again when a link closes.
    private func resume(_ id: Int) {
        guard var advertisement = advertisements[id], hci.isReady, !stopping else { return }
        advertisement.isOn = false
        advertisements[id] = advertisement
        waitingForRoom.remove(id)
        guard !resolvingListChanging else {
            pausedForResolvingList.insert(id)
            return
        }
        let enable: HCICommand = advertiser.mode == .legacy ? .leSetAdvertisingEnable(true)
            : .leSetExtendedAdvertisingEnable(true, set: advertisement.set,
                                              duration: advertisement.parameters.highDutyCycle ? Self.highDutyCycleDuration : 0)
        hci.send(enable) { [weak self] result in
            guard let self, result != .cancelled, var advertisement = self.advertisements[id],
                  !self.pausedForResolvingList.contains(id) else { return }
            guard result.succeeded else {
                self.logger.notice("advertisement \(id) could not go on after a connection; it will when a link closes",
                                   metadata: [LogKey.hciStatus: .string(result.status.map(Hex.byte) ?? "timeout")])
                self.waitingForRoom.insert(id)
                return
            }
            advertisement.isOn = true
            self.advertisements[id] = advertisement
        }
    }

    // MARK: Resolvable private addresses (Vol 6, Part B, 1.3.2.2; Vol 3, Part C, 10.7)

    /// The IRK the addresses are made from: the one the peripheral side's pairings distribute
    /// (Identity Information, Vol 3, Part H, 3.6.4), and the programmable host's central too
    /// (`HostSecurity`), so a peer that bonded with either role resolves them.
    public var resolvingKey: [UInt8] { peripheral.security.identity.resolvingKey }

    private var scheduler: TimerScheduling { peripheralHost.scheduler }

    /// On a controller driven with the legacy commands, the one random address (7.8.4) is an
    /// advertisement's resolvable private address now, not the host's static random one.
    public var controllerRandomAddressIsPrivate: Bool {
        advertiser.mode == .legacy && advertisements.values.contains { $0.identityAddress != nil }
    }

    private func makePrivateAddress() -> BluetoothAddress {
        ResolvablePrivateAddress.make(irk: resolvingKey, random: &privateAddressRandom)
    }

    private func schedulePrivateAddress(_ id: Int, after timeout: Duration) {
        if let timer = privateAddressTimers[id] { scheduler.cancel(timer) }
        privateAddressTimers[id] = scheduler.schedule(after: timeout) { [weak self] in
            guard let self else { return }
            self.privateAddressTimers[id] = nil
            self.renewPrivateAddress(id)
        }
    }

    /// TGAP(private_addr_int) passed (Vol 3, Part C, Appendix A): advertisement `id` gets a new
    /// resolvable private address. The controller refuses a new random address while legacy
    /// advertising is on (7.8.4) and while a connectable set is enabled (7.8.52: Command
    /// Disallowed), so advertising that runs is turned off, given the address and turned on
    /// again. The advertisement's `ownAddress` changes once the controller took the address: a
    /// link it reports before then was made from the old one (events come in order). A refused
    /// address leaves the old one in use until the next renewal.
    func renewPrivateAddress(_ id: Int) {
        guard let advertisement = advertisements[id], advertisement.identityAddress != nil else { return }
        schedulePrivateAddress(id, after: advertisement.parameters.privateAddressTimeout)
        guard hci.isReady, !stopping else { return }
        let address = makePrivateAddress()
        let wasOn = advertisement.isOn
        let set = advertisement.set
        let took: (CommandResult) -> Void = { [weak self] result in
            guard let self, result != .cancelled, var current = self.advertisements[id] else { return }
            guard result.succeeded else {
                self.logger.warning("advertisement \(id): the controller refused the new resolvable private address \(address); it goes on from \(current.ownAddress.address) until the next",
                                    metadata: [LogKey.hciStatus: .string(result.status.map(Hex.byte) ?? "timeout")])
                return
            }
            let old = current.ownAddress
            current.ownAddress = LEAddress(address, isRandom: true)
            self.advertisements[id] = current
            if self.lastOfSet[set]?.id == id { self.lastOfSet[set] = (id, current.ownAddress, current.identityAddress) }
            self.logger.event(.addressChanged, .debug,
                              "advertisement \(id): resolvable private address now \(address) (was \(old.address)); the next in \(current.parameters.privateAddressTimeout)",
                              ["advertisement": .string("\(id)"), "address": .string(address.description)])
        }
        switch advertiser.mode {
        case .legacy:
            if wasOn { hci.send(.leSetAdvertisingEnable(false)) }
            advertiser.setAddress(address, completion: took)
        case .extended:
            if wasOn { hci.send(.leSetExtendedAdvertisingEnable(false, set: set)) }
            hci.send(.leSetAdvertisingSetRandomAddress(set: set, address), completion: took)
        }
        if wasOn { resume(id) }
    }

    /// A line for the journal.
    static func describe(_ p: Parameters) -> String {
        var kind: [String] = [p.legacy ? "legacy" : "extended"]
        if p.connectable { kind.append("connectable") }
        if p.answersScans { kind.append("scannable") }
        if let peer = p.directedTo { kind.append("directed to \(peer.address)\(p.highDutyCycle ? " (high duty cycle)" : "")") }
        return kind.joined(separator: " ") + ", every \(Double(p.intervalUnits) * 0.625) ms, \(p.data.count) bytes of data"
            + (p.answersScans ? ", \(p.scanResponse?.count ?? 0) of scan response" : "")
    }
}

// MARK: - What the peripheral role tells it

extension ProgrammedAdvertising: ProgrammedAdvertisingRoute {
    public var acceptingPeripheral: Peripheral? { peripheral }
    public var advertisingSetsWanted: Int { 1 }
    public var wantsExtendedAdvertising: Bool { true }

    public func advertisedAddress(ofSet set: UInt8?) -> LEAddress? {
        switch advertiser.mode {
        case .legacy:
            // One advertisement at a time; a link comes only from one that runs.
            return advertisements.values.first?.ownAddress
        case .extended:
            guard let set else { return nil }
            return lastOfSet[set]?.ownAddress
        }
    }

    public func identityAddress(ofSet set: UInt8?) -> LEAddress? {
        switch advertiser.mode {
        case .legacy: return advertisements.values.first?.identityAddress
        case .extended: return set.flatMap { lastOfSet[$0]?.identityAddress }
        }
    }

    public func linkMade(_ connection: LEConnection?, event: LEConnectionComplete?, set: UInt8?) {
        let id: Int?
        switch advertiser.mode {
        case .legacy: id = advertisements.keys.first
        case .extended: id = set.flatMap { lastOfSet[$0]?.id }
        }
        guard let id else { return }
        if let connection, let event {
            let ownAddress = advertisements[id]?.ownAddress ?? set.flatMap { lastOfSet[$0]?.ownAddress } ?? LEAddress(randomAddress, isRandom: true)
            onConnection?(AcceptedLink(advertisement: id, connection: connection, peer: event.peer,
                                       peerAddressType: event.peerAddressType, ownAddress: ownAddress, parameters: event.parameters))
        }
        // A refused link (the device's limit) does not end the advertisement either.
        resume(id)
    }

    public func advertisingEnded(set: UInt8?, status: UInt8) {
        let id: Int?
        switch advertiser.mode {
        case .legacy: id = advertisements.keys.first
        case .extended:
            // LE Connection Complete with 0x3C names no set unless it is the v2 event: the one
            // high duty cycle directed advertisement is meant.
            id = set.flatMap { lastOfSet[$0]?.id }
                ?? advertisements.values.filter { $0.parameters.highDutyCycle }.map(\.id).min()
        }
        guard let id, let advertisement = advertisements[id] else { return }
        if advertiser.mode != .legacy {
            // The set is off; removed so its next use starts clean.
            hci.send(.leRemoveAdvertisingSet(set: advertisement.set))
        }
        end(id, status == HCIStatus.advertisingTimeout ? .timeout : .ended(status: status))
    }

    public func linkClosed(_ handle: UInt16, reason: UInt8, ofAcceptingPeripheral: Bool) {
        if ofAcceptingPeripheral { onLinkClosed?(handle, reason) }
        for id in waitingForRoom.sorted() { resume(id) }
    }

    public func resolvingListChangeBegins() {
        resolvingListChanging = true
        for (id, advertisement) in advertisements.sorted(by: { $0.key < $1.key }) where !pausedForResolvingList.contains(id) {
            // Off (the set kept, with its data); a start under way is turned off after its enable.
            switch advertiser.mode {
            case .legacy: hci.send(.leSetAdvertisingEnable(false))
            case .extended: hci.send(.leSetExtendedAdvertisingEnable(false, set: advertisement.set))
            }
            var paused = advertisement
            paused.isOn = false
            advertisements[id] = paused
            waitingForRoom.remove(id)
            pausedForResolvingList.insert(id)
        }
    }

    public func resolvingListChangeEnded() {
        resolvingListChanging = false
        let paused = pausedForResolvingList.sorted()
        pausedForResolvingList.removeAll()
        for id in paused { resume(id) }
    }

    public func controllerReady() {
        stopping = false
    }

    public func controllerGone(reset: Bool, reason: String) {
        resolvingListChanging = false
        pausedForResolvingList.removeAll()
        // The controller forgot its sets with the rest (7.3.2); nothing is sent.
        lastOfSet.removeAll()
        for id in advertisements.keys.sorted() { end(id, reset ? .controllerReset : .controllerLost) }
    }

    public func stopBegan() {
        stopping = true
    }

    public func closeForStop() {
        stopAll(reason: .hostStopping)
    }
}

/// The programmable host's device: GAP and GATT alone (the stack adds them, with Diagnostics),
/// no services of its own, no world to simulate. Its links are the ones programmed
/// advertisements accept.
public final class ProgrammedHostDevice: Device {
    public static let deviceName = "host"
    public static let summary = "the programmable host's peripheral side: GAP and GATT only"
    public let profile = DeviceProfile(defaultName: "blemu", advertisedServices: [], appearance: 0, txPowerLevel: nil)
    public var services: [Service] { [] }

    public init() {}

    public func start(context: DeviceContext) {}
}
