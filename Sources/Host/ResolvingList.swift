import BlemuCore
import BlemuHCI
import BlemuSMP
import BlemuSecurity
import Logging

/// One entry of the controller's resolving list (Vol 6, Part B, 4.7): a bonded central's
/// identity address and IRK, and the local IRK of the device it bonded with.
struct ResolvingEntry: Equatable {
    /// The identity address with its type (Peer_Identity_Address_Type 0x00 public, 0x01 random,
    /// Vol 4, Part E, 7.8.38).
    let identity: LEAddress
    var address: BluetoothAddress { identity.address }
    let peerIRK: [UInt8]
    let localIRK: [UInt8]

    /// The entry a bond makes: a central that gave its identity address and a non-zero IRK.
    init?(bond: Bond, localIRK: [UInt8]?) {
        guard let identity = bond.identity, let irk = bond.identityResolvingKey, irk.count == 16,
              irk.contains(where: { $0 != 0 }) else { return nil }
        self.identity = identity
        peerIRK = irk
        self.localIRK = localIRK ?? [UInt8](repeating: 0, count: 16)
    }

    /// The list holds one entry per peer identity address (7.8.38: the same identity twice is
    /// Invalid HCI Command Parameters).
    func sameIdentity(_ other: ResolvingEntry) -> Bool { identity == other.identity }

    var removeCommand: HCICommand {
        .leRemoveDeviceFromResolvingList(peerIdentity: identity)
    }

    var addCommand: HCICommand {
        .leAddDeviceToResolvingList(peerIdentity: identity, peerIRK: peerIRK, localIRK: localIRK)
    }
}

/// What the host loaded into the controller's resolving list.
struct ResolvingListState {
    /// LE Read Resolving List Size (7.8.41).
    var capacity = 0
    /// Address resolution is on in the controller (7.8.44): links from listed centrals come
    /// with their identity (LE Enhanced Connection Complete, Peer_Address_Type 0x02/0x03).
    var enabled = false
    /// The entries the controller took, in order.
    var loaded: [ResolvingEntry] = []
    /// Tells completions of an earlier controller (or initialization) from the current one's.
    var generation = 0
    /// A change is under way with advertising stopped: no device starts advertising until it
    /// is done (a link closing meanwhile would otherwise start it between the commands).
    var changing = false
    /// No bonded central had an IRK at start, so nothing was sent: the list is loaded when the
    /// first one bonds. After Reset the controller's list is empty and resolution off (Vol 4,
    /// Part E, 7.3.2), which is what the host wants meanwhile.
    var deferred = false
}

/// The controller's resolving list (Vol 6, Part B, 4.7; Vol 4, Part E, 7.8.38 – 7.8.44): on a
/// controller with LL Privacy the bonded centrals' IRKs are loaded into it at start, so the
/// controller resolves a central's private address itself and reports its identity. What the
/// list cannot hold (it is full, the controller refused a change, or has no LL Privacy) is
/// resolved by the host with ah() as before (`BondStore.bond(for:)`).
///
/// Several devices share one controller and so one list: an entry per central identity, with
/// the local IRK of the first device that bonded with it (blemu never has the controller make
/// its own addresses, so the local IRK only fills the field). A central bonded with two devices
/// is resolved once; each device then looks its bond up by the identity.
extension PeripheralHost {
    /// The entries every device's bonds make, one per central identity, oldest device first.
    func wantedResolvingEntries() -> [ResolvingEntry] {
        var entries: [ResolvingEntry] = []
        // A broadcaster has no bonds (nor a Security Manager to keep them).
        for security in peripherals.compactMap({ $0.madeConnectionParts?.security }) {
            let localIRK = security.existingIdentity?.resolvingKey
            for bond in security.bonds.bonds {
                guard let entry = ResolvingEntry(bond: bond, localIRK: localIRK),
                      !entries.contains(where: { $0.sameIdentity(entry) }) else { continue }
                entries.append(entry)
            }
        }
        return entries
    }

    func resolvingListReset() {
        resolvingList = ResolvingListState(generation: resolvingList.generation + 1)
    }

    /// At start, before anything advertises (after Reset the list is empty and resolution
    /// off): Read Resolving List Size, Clear, one Add per central (Set Privacy Mode to Device
    /// Privacy for each where the controller has it), then address resolution on. With no
    /// bonded central to load, nothing is sent (`startingUp`): three commands fewer before the
    /// first advertisement, and the first bond loads the list. `then` runs whatever the
    /// controller answers: a failure leaves the host's ah() to do the work.
    func loadResolvingList(startingUp: Bool, then: @escaping () -> Void) {
        resolvingListReset()
        guard hci.info.supportsLLPrivacy else {
            logger.debug("controller has no LL Privacy: centrals' private addresses are resolved by the host (ah)")
            then()
            return
        }
        if startingUp && wantedResolvingEntries().isEmpty {
            resolvingList.deferred = true
            logger.debug("no bonded central with an IRK: the controller's resolving list is loaded at the first bond")
            then()
            return
        }
        // A load for a new bond runs with advertising stopped, as a change does.
        resolvingList.changing = !startingUp
        let generation = resolvingList.generation
        hci.send(.leReadResolvingListSize) { [weak self] result in
            // Cancelled: the controller went away or the host stops; that path goes on by itself.
            guard let self, self.resolvingList.generation == generation, result != .cancelled else { return }
            guard case .complete(let parameters) = result,
                  let size = try? ResolvingListSizeReturn(returnParameters: parameters), size.status == HCIStatus.success else {
                self.logger.warning("controller did not give its resolving list size: centrals' private addresses are resolved by the host (ah)",
                                    metadata: [LogKey.hciStatus: .string(result.status.map(Hex.byte) ?? "timeout")])
                then()
                return
            }
            self.resolvingList.capacity = Int(size.size)
            self.fillResolvingList(generation: generation, then: then)
        }
    }

    private func fillResolvingList(generation: Int, then: @escaping () -> Void) {
        let wanted = wantedResolvingEntries()
        let fits = Array(wanted.prefix(resolvingList.capacity))
        hci.send(.leClearResolvingList)
        for entry in fits { addResolvingEntry(entry, generation: generation) }
        hci.send(.leSetAddressResolutionEnable(true)) { [weak self] result in
            guard let self, self.resolvingList.generation == generation, result != .cancelled else { return }
            self.resolvingList.enabled = result.succeeded
            if !result.succeeded {
                self.logger.warning("controller refused address resolution: centrals' private addresses are resolved by the host (ah)",
                                    metadata: [LogKey.hciStatus: .string(result.status.map(Hex.byte) ?? "timeout")])
            } else {
                let rest = wanted.count - self.resolvingList.loaded.count
                let restNote = rest > 0 ? "; \(rest) more resolved by the host (ah)" : ""
                self.logger.info("controller resolving list: \(self.resolvingList.loaded.count) bonded central(s) loaded, room for \(self.resolvingList.capacity)\(restNote)")
            }
            then()
        }
    }

    /// LE Add Device To Resolving List, then Device Privacy Mode for it (7.8.77) where the
    /// controller has LE Set Privacy Mode, so a listed central that shows its identity address
    /// is still accepted. `completion`: whether the controller took it.
    private func addResolvingEntry(_ entry: ResolvingEntry, generation: Int, completion: ((UInt8?) -> Void)? = nil) {
        hci.send(entry.addCommand) { [weak self] result in
            guard let self, self.resolvingList.generation == generation else { return }
            if result.succeeded {
                if !self.resolvingList.loaded.contains(where: { $0.sameIdentity(entry) }) { self.resolvingList.loaded.append(entry) }
                if self.hci.info.supportsPrivacyMode {
                    self.hci.send(.leSetPrivacyMode(peerIdentity: entry.identity, deviceMode: true))
                }
            }
            completion?(result.status)
        }
    }

    /// A pairing made a bond: its central's IRK goes into the list when there is room. The
    /// controller refuses changes while advertising with resolution on (7.8.38), so the devices
    /// that advertise stop for the time of the Add and start again after it; a refusal anyway
    /// (the shared central scans or connects) leaves the central to the host's ah() until the
    /// next start loads it.
    func bondSaved(_ bond: Bond, by peripheral: Peripheral) {
        guard hci.isReady, !isStopping, resolvingList.enabled || resolvingList.deferred,
              let entry = ResolvingEntry(bond: bond, localIRK: peripheral.security.existingIdentity?.resolvingKey) else { return }
        if resolvingList.deferred {
            // The first central with an IRK: the whole load, with advertising stopped for it.
            stopAdvertisingForResolvingListChange()
            loadResolvingList(startingUp: false) { [weak self, weak peripheral] in
                guard let self else { return }
                if self.resolvingList.loaded.contains(where: { $0.sameIdentity(entry) }) {
                    peripheral?.logger.info("controller resolving list: \(entry.address) added (\(self.resolvingList.loaded.count) of \(self.resolvingList.capacity))")
                }
                self.resolvingListChangeDone()
            }
            return
        }
        if let listed = resolvingList.loaded.first(where: { $0.sameIdentity(entry) }) {
            if listed.peerIRK != entry.peerIRK {
                peripheral.logger.info("\(entry.address) bonded again with a new IRK: the host resolves it (ah) until the next start reloads the resolving list")
            }
            return
        }
        guard resolvingList.loaded.count < resolvingList.capacity else {
            peripheral.logger.info("controller resolving list full (\(resolvingList.capacity)): \(entry.address) is resolved by the host (ah)")
            return
        }
        stopAdvertisingForResolvingListChange()
        resolvingList.changing = true
        let generation = resolvingList.generation
        addResolvingEntry(entry, generation: generation) { [weak self, weak peripheral] status in
            guard let self else { return }
            // After the Add (and its Set Privacy Mode, queued first), advertising starts again.
            if status == HCIStatus.success {
                peripheral?.logger.info("controller resolving list: \(entry.address) added (\(self.resolvingList.loaded.count) of \(self.resolvingList.capacity))")
            } else {
                let why = status == HCIStatus.commandDisallowed ? "refused while advertising, scanning or connecting" : "refused"
                peripheral?.logger.notice("controller resolving list: \(entry.address) \(why); the host resolves it (ah) until the next start",
                                          metadata: [LogKey.hciStatus: .string(status.map(Hex.byte) ?? "timeout")])
            }
            self.resolvingListChangeDone()
        }
    }

    /// Bonds were forgotten (`Peripheral.forgetBonds`): the entries no device's bond wants any
    /// more leave the controller's list, with advertising stopped for the change as for an Add
    /// (7.8.39). Forgetting every bond of a device clears the list (7.8.40) when no other device
    /// on the controller keeps a listed entry; otherwise each entry is removed by itself, since
    /// the devices on one controller share its list. Returns how many entries are taken out.
    /// A refusal leaves the entry: the controller still reports that central by its identity,
    /// which no longer names a bond, so it gets the negative reply all the same.
    func bondsForgotten(all: Bool, by peripheral: Peripheral) -> Int {
        guard hci.isReady, !isStopping, resolvingList.enabled else { return 0 }
        let wanted = wantedResolvingEntries()
        let stale = resolvingList.loaded.filter { entry in !wanted.contains(where: { $0.sameIdentity(entry) }) }
        guard !stale.isEmpty else { return 0 }
        stopAdvertisingForResolvingListChange()
        resolvingList.changing = true
        let generation = resolvingList.generation
        let clear = all && stale.count == resolvingList.loaded.count
        let commands = clear ? [(HCICommand.leClearResolvingList, stale)] : stale.map { ($0.removeCommand, [$0]) }
        for (index, (command, entries)) in commands.enumerated() {
            hci.send(command) { [weak self, weak peripheral] result in
                guard let self, self.resolvingList.generation == generation, result != .cancelled else { return }
                let names = entries.map(\.address.description).joined(separator: ", ")
                if result.succeeded {
                    self.resolvingList.loaded.removeAll { loaded in entries.contains { $0.sameIdentity(loaded) } }
                    peripheral?.logger.info("controller resolving list: \(clear ? "cleared" : "\(names) removed") (bond forgotten; \(self.resolvingList.loaded.count) of \(self.resolvingList.capacity) left)")
                } else {
                    peripheral?.logger.notice("controller resolving list: \(names) not removed (refused); it no longer names a bond, so its key requests get the negative reply",
                                              metadata: [LogKey.hciStatus: .string(result.status.map(Hex.byte) ?? "timeout")])
                }
                if index == commands.count - 1 { self.resolvingListChangeDone() }
            }
        }
        return stale.count
    }

    /// After a change of the list: every device that may advertise starts again (each checks
    /// for itself that it can take a link).
    private func resolvingListChangeDone() {
        resolvingList.changing = false
        programmedAdvertising?.resolvingListChangeEnded()
        for member in peripherals where !isStopping { member.startAdvertising(fast: true) }
    }

    /// The controller refuses resolving list changes while advertising with resolution on
    /// (7.8.38): every device that advertises stops until the change is done.
    private func stopAdvertisingForResolvingListChange() {
        programmedAdvertising?.resolvingListChangeBegins()
        for member in peripherals where member.advertisingSet != nil && (member.isAdvertising || member.advertisingRequested) {
            if let set = member.advertisingSet { advertiser.stop(set: set) }
            member.setAdvertising(false, log: false)
        }
    }
}
