import BlemuBroadcast
import BlemuConfig
import BlemuCore
import BlemuDevice
import BlemuDevices
import BlemuHCI
import BlemuHost
import BlemuProfile
import BlemuTransport

/// One device to run, with everything the command line and the configuration file say about
/// it, merged: the command line wins over the file, the file over the device's defaults.
public struct DevicePlan {
    public var device: String
    public var spec: ControllerSpec
    public var name: String?
    public var address: BluetoothAddress?
    /// Initial values, in order: the file's settings, then the PIN.
    public var settings: [DeviceConfiguration.Setting] = []
    public var passkey: String?
    /// An encrypted BTHome device's bindkey file (`--bindkey-file`, else the entry's `bindkey_file:`).
    public var bindkeyFile: String?
    /// The config file's io-capability (`--io-capability` overrides it).
    public var ioCapability: String?
    public var privacy = false
    public var privateAddressTimeout: Int?
    public var advertising: AdvertisingTiming?
    public var connection: ConnectionParameters?
    /// A DEVICE that names a `.json` file: the GATT profile it holds.
    public var profile: GATTProfile?
    /// `--seed`: the device's models draw their randomness from this (derived from the seed
    /// and the device's place), so a run repeats exactly; nil: a new seed each start.
    public var seed: UInt64?
    /// The config file's `scenario:` for this device: its path.
    public var scenario: String?
    /// A fleet member's drawn jitter: its advertising intervals this many 0.625 ms units longer
    /// (`DevicePlanning.advertisingTiming`, and a broadcaster's `interval` in `applySettings`).
    public var advertisingShift: UInt16 = 0
    /// A fleet member's drawn part of the fleet's `start_spread_s`.
    public var startDelay: Duration = .zero
    /// The fleet (`fleets[N]`) the device is a member of; nil for any other device.
    public var fleet: String?
    /// What the control socket calls the fleet (`fleet:REF`); nil for any other device.
    public var fleetReference: String?

    public init(device: String, spec: ControllerSpec) {
        self.device = device
        self.spec = spec
    }

    /// Whether a DEVICE argument names a GATT profile file rather than a device module.
    public static func isProfilePath(_ device: String) -> Bool { DeviceConfiguration.isProfilePath(device) }
}

/// `blemu run --passkey`: DIGITS for every device, or DEVICE=DIGITS for one (repeatable; the
/// device as named on the command line or in the file's `device:`). A device's own wins over
/// the one for every device, and both over the file's `passkey:`.
public struct PasskeyOptions: Equatable {
    /// The bare `--passkey DIGITS`.
    public var everyDevice: String?
    /// `--passkey DEVICE=DIGITS`, in the order given.
    public var byDevice: [Named] = []

    public struct Named: Equatable {
        public var device: String
        public var digits: String
        public init(device: String, digits: String) {
            self.device = device
            self.digits = digits
        }
    }

    public init(everyDevice: String? = nil, byDevice: [Named] = []) {
        self.everyDevice = everyDevice
        self.byDevice = byDevice
    }

    /// The values of `--passkey`, each DIGITS or DEVICE=DIGITS (split at the last `=`: a
    /// profile's path may hold one). A passkey is 6 digits (Vol 3, Part H, 2.3.5.3: 000000 to 999999).
    public static func parse(_ values: [String]) throws -> PasskeyOptions {
        var options = PasskeyOptions()
        for value in values {
            guard let equals = value.lastIndex(of: "=") else {
                guard isPasskey(value) else { throw PlanError("--passkey must be 6 digits, not '\(VisibleText.make(value))'") }
                guard options.everyDevice == nil else {
                    throw PlanError("--passkey DIGITS is given twice: one passkey for every device, or --passkey DEVICE=DIGITS for each")
                }
                options.everyDevice = value
                continue
            }
            let device = String(value[..<equals])
            let digits = String(value[value.index(after: equals)...])
            guard !device.isEmpty else { throw PlanError("--passkey =DIGITS needs the device before the `=`: --passkey lock=123456") }
            let shown = VisibleText.make(device)
            guard isPasskey(digits) else { throw PlanError("--passkey \(shown)=…: a passkey is 6 digits") }
            guard !options.byDevice.contains(where: { $0.device == device }) else {
                throw PlanError("--passkey \(shown)=… is given twice")
            }
            options.byDevice.append(Named(device: device, digits: digits))
        }
        return options
    }

    static func isPasskey(_ text: String) -> Bool {
        text.utf8.count == 6 && text.utf8.allSatisfy { (0x30...0x39).contains($0) }
    }

    /// The passkey the command line gives `device`, if any.
    public func digits(for device: String) -> String? {
        byDevice.first { $0.device == device }?.digits ?? everyDevice
    }
}

public enum DevicePlanning {
    /// The plans for `blemu run`: devices from the command line (each taking the options of
    /// the file's first unused entry for the same device), or else the file's devices.
    /// Controllers: --controller, then the entry's, then the file's, then $BLEMU_CONTROLLER.
    public static func plans(devices: [String], specs: [ControllerSpec], environmentSpec: () throws -> ControllerSpec?,
                      file: RunConfiguration?, fileName: String?, name: String?, address: BluetoothAddress?,
                      pin: String?, passkeys: PasskeyOptions = PasskeyOptions(), bindkeyFile: String? = nil) throws -> [DevicePlan] {
        var entries: [DeviceConfiguration?]
        if devices.isEmpty {
            entries = (file?.devices ?? []).map { $0 }
        } else {
            var unused = file?.devices ?? []
            entries = devices.map { device in
                guard let index = unused.firstIndex(where: { $0.device == device }) else { return nil }
                return unused.remove(at: index)
            }
        }
        let names = devices.isEmpty ? entries.map { $0?.device ?? "" } : devices
        guard !names.isEmpty else {
            throw PlanError("name at least one device (\(DeviceRegistry.all.map(\.name).joined(separator: ", "))) or give --config FILE with a `devices:` list")
        }
        // Before any profile is read or controller opened: the ceiling, the memory budget and the descriptors.
        if let problem = ProcessLimits.check(demand(names)) { throw PlanError(problem) }
        if devices.isEmpty, let file { try checkFleetRanges(file) }
        var plans: [DevicePlan] = []
        for (index, device) in names.enumerated() {
            let entry = entries[index]
            var profile: GATTProfile?
            if DevicePlan.isProfilePath(device) {
                do { profile = try GATTProfile.load(path: device) } catch {
                    throw PlanError((entry.map { "\($0.location): \(path($0, index)).device: " } ?? "") + error.description)
                }
            } else if DeviceRegistry.entry(named: device) == nil {
                let known = DeviceRegistry.all.map(\.name).joined(separator: ", ")
                if let entry { throw PlanError("\(entry.location): \(path(entry, index)).device: unknown device '\(device)'; known devices: \(known)") }
                throw PlanError("unknown device '\(device)'; known devices: \(known) (see `blemu devices`), or a GATT profile FILE.json")
            }
            let spec: ControllerSpec
            var fromFile = entry?.controller ?? file?.controller
            if specs.isEmpty, fromFile == nil { fromFile = try environmentSpec() }
            if !specs.isEmpty {
                spec = specs[min(index, specs.count - 1)]
            } else if let chosen = fromFile {
                spec = chosen
            } else {
                throw PlanError("no controller: give --controller SPEC (e.g. tcp:127.0.0.1:6402 for rootcanal), `controller:` in --config, or set BLEMU_CONTROLLER")
            }
            var plan = DevicePlan(device: device, spec: spec)
            plan.profile = profile
            plan.name = entry?.name
            // A recording's static random address, unless one is given.
            plan.address = entry?.address ?? profile?.replayAddress
            plan.settings = entry?.settings ?? []
            plan.passkey = passkeys.digits(for: device) ?? entry?.passkey
            // --bindkey-file is for the BTHome devices (like --pin for the lock); an entry's own
            // `bindkey_file:` is refused by a device that does not encrypt.
            if let bindkeyFile, encrypts(device) {
                plan.bindkeyFile = bindkeyFile
            } else if let own = entry?.bindkeyFile {
                guard encrypts(device) else {
                    throw PlanError("\(entry?.location ?? fileName ?? "--config"): \(entry.map { path($0, index) } ?? "devices[\(index)]").bindkey_file: \(device) does not encrypt (\(encryptingDevices.joined(separator: ", ")) do)")
                }
                plan.bindkeyFile = own
            }
            plan.ioCapability = entry?.ioCapability
            plan.privacy = entry?.privacy ?? false
            plan.privateAddressTimeout = entry?.privateAddressTimeout
            plan.advertising = entry?.advertising
            plan.connection = entry?.connection
            plan.scenario = entry?.scenario
            plan.advertisingShift = entry?.advertisingShift ?? 0
            plan.startDelay = entry?.startDelay ?? .zero
            plan.fleet = entry?.fleet
            plan.fleetReference = entry?.fleetReference
            // --pin is for the devices that take a PIN (the lock), so one command line serves a
            // bench of several devices (and wins over the file's); a file's `pin:` is for its own
            // entry, refused by a device that takes none.
            if let pin, takesPIN(plan) {
                plan.settings.append(.init(key: "pin", value: pin, location: "--pin"))
            } else if let pinText = entry?.pin {
                plan.settings.append(.init(key: "pin", value: pinText,
                                           location: "\(entry?.location ?? fileName ?? "--config"): \(entry.map { path($0, index) } ?? "devices[\(index)]").pin"))
            }
            plans.append(plan)
        }
        if pin != nil, !plans.contains(where: takesPIN) {
            let takers = DeviceRegistry.all.filter { $0.make().settings.contains { $0.key == "pin" } }.map(\.name)
            throw PlanError("--pin: none of \(plans.map(\.device).joined(separator: ", ")) takes a PIN (\(takers.joined(separator: ", ")) does)")
        }
        for named in passkeys.byDevice where !plans.contains(where: { $0.device == named.device }) {
            throw PlanError("--passkey \(VisibleText.make(named.device))=…: no such device runs (\(plans.map(\.device).joined(separator: ", ")))")
        }
        if bindkeyFile != nil, !plans.contains(where: { encrypts($0.device) }) {
            throw PlanError("--bindkey-file: none of \(plans.map(\.device).joined(separator: ", ")) encrypts (\(encryptingDevices.joined(separator: ", ")) do)")
        }
        if let name {
            for index in plans.indices {
                plans[index].name = plans.count == 1 ? name : "\(name) \(plans[index].device)"
            }
        }
        if let address {
            guard plans.count == 1 else { throw PlanError("--address needs exactly one device (each device needs its own address)") }
            plans[0].address = address
        }
        try checkRunningNamesAgainstFleets(plans, entries: entries, fileName: fileName, nameGiven: name != nil)
        return plans
    }

    /// The file checks the names and addresses it gives (`checkUnique`); a device given neither
    /// gets its name at assembly (the device's own, with its copy number: `RunStack.localName`)
    /// and its address from that name (`identityAddress`). Those are checked here against the
    /// fleet members', so no two running devices share a name or an address.
    static func checkRunningNamesAgainstFleets(_ plans: [DevicePlan], entries: [DeviceConfiguration?], fileName: String?,
                                               nameGiven: Bool) throws {
        guard plans.contains(where: { $0.fleet != nil }) else { return }
        var memberNames: [String: String] = [:], memberAddresses: [BluetoothAddress: String] = [:]
        for (index, plan) in plans.enumerated() where plan.fleet != nil {
            let member = entries[index].map { path($0, index) } ?? "devices[\(index)]"
            if let name = plan.name { memberNames[name] = member }
            if let address = plan.address { memberAddresses[address] = member }
        }
        var copies: [String: Int] = [:]
        var madeByKind: [String: Device] = [:]
        for (index, plan) in plans.enumerated() {
            copies[plan.device, default: 0] += 1
            guard plan.fleet == nil, plan.name == nil || plan.address == nil else { continue }
            guard let device = madeByKind[plan.device] ?? makeDevice(plan) else { continue }
            madeByKind[plan.device] = device
            let name = RunStack.localName(plan: plan, device: device, copy: copies[plan.device] ?? 1, nameGiven: nameGiven)
            let address = PeripheralConfiguration.identityAddress(deviceName: type(of: device).deviceName, localName: name,
                                                                  configured: plan.address)
            let entry = entries[index]
            let location = entry.map { "\($0.location): \(path($0, index))" } ?? "\(plan.device) (devices[\(index)])"
            if plan.name == nil, let member = memberNames[name] {
                throw PlanError("\(location): runs as `\(VisibleText.make(name))` (its own name\(copies[plan.device] ?? 1 > 1 ? " and copy number" : "")), which is also \(member)'s name; give it a `name:` (names are one device's each)")
            }
            if plan.address == nil, let member = memberAddresses[address] {
                throw PlanError("\(location): its address from its name, \(address), is also \(member)'s address; give it an `address:` or another `name:`")
            }
        }
    }

    /// What errors call a file's entry: its own path (`devices[2]`, `fleets[0] member 17`).
    static func path(_ entry: DeviceConfiguration, _ index: Int) -> String {
        entry.path.isEmpty ? "devices[\(index)]" : entry.path
    }

    /// What the devices ask of the process (`ProcessLimits`): broadcasters cost less than
    /// connectable devices. A profile, or a name the registry does not know (refused after), counts as connectable.
    static func demand(_ names: [String]) -> ProcessLimits.Demand {
        var kinds = BroadcasterKinds()
        let broadcasters = names.count { kinds.isBroadcaster($0) }
        return ProcessLimits.Demand(broadcasters: broadcasters, connectableDevices: names.count - broadcasters)
    }

    /// Whether a device name is a broadcaster's kind (`BroadcastingDevice`), asked of one
    /// throwaway device per name. A profile, or a name the registry does not know, is not.
    struct BroadcasterKinds {
        private var known: [String: Bool] = [:]

        mutating func isBroadcaster(_ name: String) -> Bool {
            if let answer = known[name] { return answer }
            let answer = !DevicePlan.isProfilePath(name) && DeviceRegistry.entry(named: name).map { $0.make() is BroadcastingDevice } == true
            known[name] = answer
            return answer
        }
    }

    /// Every fleet's settings with each range at its low end, then at its high end, tried on a
    /// new device of the fleet's kind: a range reaching past what the device takes is refused
    /// (naming the range's line) whatever the seed happens to draw.
    public static func checkFleetRanges(_ file: RunConfiguration) throws {
        for fleet in file.fleets where !DevicePlan.isProfilePath(fleet.device) {
            guard let entry = DeviceRegistry.entry(named: fleet.device) else { continue }  // refused with its line after
            for settings in [fleet.lowestSettings, fleet.highestSettings] where !settings.isEmpty {
                var plan = DevicePlan(device: fleet.device, spec: .hci(index: 0))
                plan.settings = settings
                try applySettings(plan, to: entry.make())
            }
        }
    }

    /// The advertising timing a plan's device runs with: the plan's, else the device's own,
    /// lengthened by a fleet member's jitter; nil when neither changes the device's own.
    public static func advertisingTiming(_ plan: DevicePlan, device: Device) -> AdvertisingTiming? {
        guard plan.advertisingShift > 0, !(device is BroadcastingDevice) else { return plan.advertising }
        return (plan.advertising ?? device.profile.advertisingTiming).lengthened(by: plan.advertisingShift)
    }

    /// The device `blemu host --serve NAME|FILE.json` serves on the links its advertisements
    /// accept: a device of the registry, or a GATT profile. A broadcaster takes no connection, so
    /// it has nothing to serve and is refused, as an unknown name is.
    public static func servedDevice(_ name: String) throws(PlanError) -> Device {
        if DevicePlan.isProfilePath(name) {
            do { return ProfileDevice(try GATTProfile.load(path: name)) } catch {
                throw PlanError("--serve: " + error.description)
            }
        }
        guard let entry = DeviceRegistry.entry(named: name) else {
            let known = DeviceRegistry.all.map(\.name).joined(separator: ", ")
            throw PlanError("--serve: unknown device '\(VisibleText.make(name))'; known devices: \(known), or a GATT profile FILE.json")
        }
        let device = entry.make()
        guard !(device is BroadcastingDevice) else {
            throw PlanError("--serve: \(name) is a broadcaster: it takes no connection, so it has no GATT database to serve")
        }
        return device
    }

    /// A new device for the plan: its GATT profile, or the registry's device of that name.
    public static func makeDevice(_ plan: DevicePlan) -> Device? {
        if let profile = plan.profile { return ProfileDevice(profile) }
        return DeviceRegistry.entry(named: plan.device)?.make(seed: plan.seed)
    }

    /// The seed of the device at `index` (0-based, command-line order) for `--seed N`: two
    /// copies of one device wander differently, and each the same way on every run.
    public static func deviceSeed(_ seed: UInt64, index: Int) -> UInt64 {
        // One SplitMix64 step per place: nearby places, unrelated seeds.
        var random = SeededRandom(seed: seed &+ UInt64(index) &* 0x9E37_79B9_7F4A_7C15)
        return random.next()
    }

    /// `--seed N`: each plan's device seeded from N and its place (`deviceSeed`).
    public static func seed(_ plans: inout [DevicePlan], with seed: UInt64) {
        for index in plans.indices { plans[index].seed = deviceSeed(seed, index: index) }
    }

    /// `--replay loop|once`: how every recorded device (a profile with a recording) plays it.
    /// Refused when it is neither, and when no plan is a recording to replay.
    public static func replay(_ plans: inout [DevicePlan], mode: String) throws(PlanError) {
        guard ["loop", "once"].contains(mode) else { throw PlanError("--replay is loop or once, not '\(mode)'") }
        guard plans.contains(where: { $0.profile != nil }) else {
            throw PlanError("--replay is for a recorded device: blemu run FILE.json (made by `blemu gatt ... record`)")
        }
        for index in plans.indices where plans[index].profile != nil { plans[index].profile?.replay = mode }
    }

    /// The devices that encrypt their broadcasts with a bindkey (BTHome).
    public static var encryptingDevices: [String] { [BTHomeThermometerDevice.deviceName, BTHomeDoorDevice.deviceName] }

    static func encrypts(_ device: String) -> Bool { encryptingDevices.contains(device) }

    /// Reads every plan's bindkey file, so a missing or malformed one ends the command line's
    /// validation (exit status 64) before anything starts. Returns the warnings (a file others
    /// may read).
    public static func checkBindkeys(_ plans: [DevicePlan]) throws -> [String] {
        var warnings: [String] = []
        for plan in plans {
            guard let path = plan.bindkeyFile else { continue }
            switch BTHomeBindkey.read(path: path) {
            case .success(let read): if let warning = read.warning { warnings.append(warning) }
            case .failure(let error): throw PlanError("--bindkey-file: \(error.description)")
            }
        }
        return warnings
    }

    /// What a bare `--passkey DIGITS` changes when several devices run: it applies to every
    /// one of them (the contract), so the devices that pair with Just Works without it now ask
    /// centrals for a passkey. Logged at start, naming them; nil when it changes none of them
    /// (one device, or only devices with a static passkey of their own: the lock).
    public static func passkeyNotice(_ plans: [DevicePlan], passkeys: PasskeyOptions) -> String? {
        guard passkeys.everyDevice != nil, plans.count > 1 else { return nil }
        let changed = plans.filter { plan in
            !passkeys.byDevice.contains { $0.device == plan.device }
                && !(makeDevice(plan).map { type(of: $0).pairsWithStaticPasskey } ?? false)
        }
        guard !changed.isEmpty else { return nil }
        let names = changed.map { VisibleText.make($0.device) }.joined(separator: ", ")
        return "--passkey applies to every device: \(names) now pair\(changed.count == 1 ? "s" : "") with Passkey Entry "
            + "(that passkey) instead of Just Works; --passkey DEVICE=DIGITS gives one device its passkey"
    }

    /// Whether the plan's device has a `pin` setting (the lock).
    public static func takesPIN(_ plan: DevicePlan) -> Bool {
        makeDevice(plan)?.settings.contains { $0.key == "pin" } ?? false
    }

    /// Applies every plan's initial values to a throwaway device, so a refusal ends the command
    /// line's validation (exit status 64) before any file is touched.
    public static func checkSettings(_ plans: [DevicePlan]) throws {
        for plan in plans {
            guard let device = makeDevice(plan) else { continue }
            try applySettings(plan, to: device)
        }
    }

    /// Applies the plan's initial values to a new device before it starts; the first refusal
    /// is one error naming where the value came from.
    public static func applySettings(_ plan: DevicePlan, to device: Device) throws {
        let settings = device.settings
        for setting in plan.settings {
            guard let target = settings.first(where: { $0.key == setting.key }) else {
                let known = settings.map(\.key).joined(separator: ", ")
                if setting.location == "--pin" { throw PlanError("--pin: \(plan.device) takes no PIN") }
                throw PlanError("\(setting.location): \(plan.device) has no setting '\(setting.key)'"
                                      + (known.isEmpty ? "" : " (settings: \(known))"))
            }
            if let refusal = target.apply(setting.value) {
                throw PlanError("\(setting.location): \(refusal)")
            }
        }
        // A broadcaster's advertising interval is its `interval` setting: a fleet member's jitter
        // lengthens it, after the settings (which may set it), within the Core's 10.24 s.
        if plan.advertisingShift > 0, let broadcaster = device as? BroadcastingDevice,
           let interval = settings.first(where: { $0.key == "interval" }) {
            let units = min(Int(AdvertisingTiming.hciIntervalRange.upperBound), Int(broadcaster.broadcastInterval) + Int(plan.advertisingShift))
            if let refusal = interval.apply(ConnectionParameters.ms(Double(units) * AdvertisingTiming.unitMs)) {
                throw PlanError("\(plan.device): advertising jitter: \(refusal)")
            }
        }
    }
}
