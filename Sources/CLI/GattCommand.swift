import ArgumentParser
import BlemuATT
import BlemuCentral
import BlemuControl
import BlemuCore
import BlemuCrypto
import BlemuDevices
import BlemuGATT
import BlemuGATTClient
import BlemuHost
import BlemuProfile
import BlemuSMP
import BlemuSecurity
import Logging

/// `blemu gatt`: find one peripheral, connect, and dump its database, read, write or
/// subscribe to one characteristic, as a test script or a person at a shell needs.
struct GattCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "gatt",
        abstract: "Central: connect to a peripheral and dump its database, read, write or subscribe.",
        discussion: """
            Commands: dump [--profile] | read UUID | write UUID HEX (or --text TEXT) [--no-response] | subscribe UUID [--count N].
            dump --profile writes a GATT profile (JSON) that `blemu run FILE.json` serves: a clone of the peripheral,
            with the read permissions its refusals showed (0x05, 0x0F, 0x0C, 0x08); writes are not tried. With --pair
            it reads everything first as a stranger, then pairs and reads again what was refused for want of security.
            The peripheral: --address, or the one advertiser that matches --name or --service: the scan lasts at
            least 1.5 s, and when several match it ends listing them (name, address, RSSI): give --address.
            Errors name the ATT error (e.g. Write Not Permitted (0x03)); the exit status is then 1.
            Security, as a phone does it: a read, write or subscription refused for want of security
            (0x05, 0x0F, 0x0C) encrypts the link with the bond kept in --state-dir, or pairs, and is tried
            once more (said on stderr). --pair pairs first. A peripheral that shows a passkey (or has it
            on a label) needs --passkey; Numeric Comparison values are printed on stderr and accepted.
            """)

    @Option(name: .customLong("controller"), help: "Controller spec (default: $BLEMU_CONTROLLER).")
    var controller: String?

    @Option(help: ArgumentHelp("The peripheral's address.", valueName: "A"))
    var address: String?

    @Option(help: ArgumentHelp("The advertiser whose name contains this (several: an error listing them).", valueName: "N"))
    var name: String?

    @Option(help: ArgumentHelp("The advertiser that lists this service (several: an error listing them).", valueName: "UUID"))
    var service: String?

    @Argument(help: "dump, read, write or subscribe")
    var command: String

    @Argument(help: "UUID (read, write, subscribe) and HEX (write)")
    var arguments: [String] = []

    @Option(help: ArgumentHelp("write: the value as UTF-8 text instead of HEX.", valueName: "TEXT"))
    var text: String?

    @Flag(name: .customLong("no-response"), help: "write: Write Without Response.")
    var noResponse = false

    @Option(help: ArgumentHelp("subscribe: stop after N values.", valueName: "N"))
    var count: Int?

    @Flag(help: "One JSON object per line.")
    var json = false

    @Flag(help: "dump: write a GATT profile (JSON) for `blemu run FILE.json` instead.")
    var profile = false

    @Option(help: ArgumentHelp("dump --profile: also record S seconds of notifications and indications, which the clone replays.", valueName: "S"))
    var capture: Double?

    @Option(help: ArgumentHelp("Seconds to find and connect to the peripheral (default 10).", valueName: "S"))
    var timeout: Double = 10

    @Option(name: .customLong("log-level"), help: "Log level for stderr (default: warning).")
    var logLevel: Logger.Level = .warning

    @Flag(help: "Pair (or encrypt with the bond) before anything else.")
    var pair = false

    @Option(help: ArgumentHelp("The passkey to type when the peripheral shows one or is labelled with one (Passkey Entry).", valueName: "DIGITS"))
    var passkey: String?

    @Option(name: .customLong("io-capability"),
            help: ArgumentHelp("What this central declares when it pairs: keyboard-display (default), keyboard-only, display-yes-no, display-only, no-input-no-output.", valueName: "CAP"))
    var ioCapability: String = "keyboard-display"

    @Flag(name: .customLong("reject-comparison"), help: "Numeric Comparison: reject the value (Pairing Failed 0x0C) instead of accepting it.")
    var rejectComparison = false

    @Option(name: .customLong("state-dir"),
            help: ArgumentHelp("Where this central keeps its bonds (bonds-central-blemu_central.json; default: $STATE_DIRECTORY, else ~/.local/state/blemu).", valueName: "DIR"))
    var stateDirectory: String?

    /// What to do once connected.
    enum Action {
        case dump
        case read(BluetoothUUID)
        case write(BluetoothUUID, [UInt8])
        case subscribe(BluetoothUUID)
    }

    func action() throws -> Action {
        func uuid(_ index: Int) throws -> BluetoothUUID {
            guard arguments.count > index else { throw ValidationError("\(command) needs a characteristic UUID") }
            guard let uuid = ControlRequest.parseUUID(arguments[index]) else {
                throw ValidationError("'\(arguments[index])' is not a UUID: give 2A37, 0x2A37 or the 128-bit form")
            }
            return uuid
        }
        switch command {
        case "dump":
            guard arguments.isEmpty else { throw ValidationError("dump takes no arguments") }
            return .dump
        case "read":
            guard arguments.count == 1 else { throw ValidationError("usage: read UUID") }
            return .read(try uuid(0))
        case "write":
            let target = try uuid(0)
            if let text {
                guard arguments.count == 1 else { throw ValidationError("write with --text takes only the UUID") }
                return .write(target, Array(text.utf8))
            }
            guard arguments.count == 2, let value = Hex.parse(arguments[1]) else {
                throw ValidationError("usage: write UUID HEX (e.g. 0102ff) or write UUID --text TEXT")
            }
            return .write(target, value)
        case "subscribe":
            guard arguments.count == 1 else { throw ValidationError("usage: subscribe UUID [--count N]") }
            return .subscribe(try uuid(0))
        default:
            throw ValidationError("unknown command '\(command)': dump, read, write or subscribe")
        }
    }

    func validate() throws {
        _ = try action()
        let ways = [address != nil, name != nil, service != nil].filter { $0 }.count
        guard ways == 1 else { throw ValidationError("name the peripheral with one of --address, --name or --service") }
        if let address, BluetoothAddress(address) == nil { throw ValidationError("--address '\(address)' is not an address like C4:12:34:56:78:9A") }
        if let service, ControlRequest.parseUUID(service) == nil { throw ValidationError("--service '\(service)' is not a UUID") }
        if let count, count < 1 { throw ValidationError("--count must be at least 1") }
        if profile && command != "dump" { throw ValidationError("--profile goes with dump") }
        if let capture {
            guard profile else { throw ValidationError("--capture goes with dump --profile") }
            guard capture > 0 && capture <= 3600 else { throw ValidationError("--capture must be above 0 seconds (at most an hour)") }
        }
        guard timeout > 0 && timeout <= 3600 else { throw ValidationError("--timeout must be above 0 seconds") }
        _ = try parsedPasskey()
        guard SMPIOCapability(cliName: ioCapability) != nil else {
            throw ValidationError("--io-capability '\(ioCapability)': give keyboard-display, keyboard-only, display-yes-no, display-only or no-input-no-output")
        }
        if let stateDirectory, stateDirectory.isEmpty { throw ValidationError("--state-dir needs a directory") }
    }

    func parsedPasskey() throws -> UInt32? {
        guard let passkey else { return nil }
        guard (1...6).contains(passkey.count), passkey.allSatisfy(\.isASCII), let value = UInt32(passkey), value <= 999_999 else {
            throw ValidationError("--passkey '\(passkey)': give the six digits (0 to 999999)")
        }
        return value
    }

    /// The central's security: its bonds in the state directory, beside the devices' but in a
    /// file of their own, under a static random address derived from that directory, so a
    /// peripheral that bonded with this central recognises it on the next run; its IRK (which
    /// it distributes when a peripheral asks for IdKey) in an identity file there.
    func makeSecurity(_ host: CentralHost, scheduler: TimerScheduling, logger: Logger) throws -> CentralSecurity {
        let directory = stateDirectoryPath(stateDirectory)
        let address = BluetoothAddress.staticRandom(seed: "blemu central " + (directory ?? ""))
        host.ownRandomAddress = address
        let configuration = CentralSecurityConfiguration(
            ioCapability: SMPIOCapability(cliName: ioCapability) ?? .keyboardDisplay, passkey: try parsedPasskey(),
            acceptNumericComparison: !rejectComparison,
            bondStorePath: directory.map { $0 + "/" + GattCommand.bondOwner(address).fileName },
            identityPath: directory.map { $0 + "/" + GattCommand.bondOwner(address).identityFileName })
        let security = CentralSecurity(configuration: configuration, owner: GattCommand.bondOwner(address),
                                       localAddress: SMPAddress(address, isRandom: true), scheduler: scheduler, logger: logger)
        security.display = { emitNote($0) }
        host.attach(security: security)
        return security
    }

    static func bondOwner(_ address: BluetoothAddress) -> BondOwner {
        BondOwner(device: "central", name: "blemu central", address: address)
    }

    func run() throws {
        try LogSetup.bootstrap(destination: .stderr, level: logLevel)
        defer { LogSetup.finish() }
        let action = try action()
        let session = try CentralSession(controller: controller, logger: Logger(label: "blemu.gatt"))
        let host = session.host
        let security = try makeSecurity(host, scheduler: session.loop, logger: session.logger)
        let pairFirst = pair
        let filter = AdvertiserFilter(name: name, service: service.flatMap(ControlRequest.parseUUID),
                                      address: address.flatMap(BluetoothAddress.init))
        var connecting = false
        // An address names one peripheral; a name or a service may fit several (AdvertiserChoice).
        var choice = AdvertiserChoice(startedAt: 0)
        var windowTimer: TimerID?
        var deadline: TimerID?
        /// The choice is made: no more scanning, no more timers of the search.
        func chosen() {
            connecting = true
            host.stopScanning()
            for timer in [deadline, windowTimer].compactMap({ $0 }) { session.loop.cancel(timer) }
        }
        func connect(_ advertisement: Advertisement) {
            chosen()
            host.connect(to: advertisement.address, addressType: advertisement.addressType,
                         timeout: .milliseconds(Int64(timeout * 1000))) { result in
                switch result {
                case .failure(let error):
                    session.finish(failure: "connecting to \(advertisement.address): \(error)")
                case .success(let link):
                    link.onDisconnected = { reason in
                        session.finish(failure: "the peripheral disconnected (reason \(Hex.byte(reason)))")
                    }
                    let run = GattRun(session: session, link: link, action: action, json: json, profile: profile, capture: capture,
                                      noResponse: noResponse, count: count, advertisement: advertisement, security: security,
                                      pairsAfterDump: pairFirst && profile)
                    // dump --profile reads first as a stranger (to learn what each value needs), then pairs.
                    if pairFirst && !run.pairsAfterDump { run.secureThenStart() } else { run.start() }
                }
            }
        }
        /// What the choice says; true when it is final (connecting, or failed).
        @discardableResult
        func act(_ decision: AdvertiserChoice.Decision) -> Bool {
            switch decision {
            case .keepScanning:
                return false
            case .waitUntil(let end):
                guard windowTimer == nil else { return false }
                let now = session.loop.nowNanoseconds
                windowTimer = session.loop.schedule(after: .nanoseconds(Int64(clamping: end &- min(end, now)))) {
                    if !connecting { act(choice.windowEnded()) }
                }
                return false
            case .connect(let advertisement):
                connect(advertisement)
                return true
            case .ambiguous(let matches):
                chosen()
                session.finish(failure: AdvertiserChoice.ambiguity(matches, matching: filter.describe))
                return true
            }
        }
        deadline = session.loop.schedule(after: .milliseconds(Int64(timeout * 1000))) {
            // A --timeout shorter than the window: the choice as it stands.
            guard !connecting, !act(choice.windowEnded()) else { return }
            session.finish(failure: "no advertiser matching \(filter.describe) within \(timeout) s")
        }
        host.onError = { message in session.finish(failure: message) }
        host.onReady = {
            choice = AdvertiserChoice(startedAt: session.loop.nowNanoseconds, window: filter.address != nil ? .zero : AdvertiserChoice.defaultWindow)
            host.startScanning(active: true)
        }
        host.onAdvertisement = { advertisement, _ in
            // A name may come in the scan response: wait for the advertiser that matches whole.
            guard !connecting, advertisement.isConnectable, filter.matches(advertisement) else { return }
            act(choice.heard(advertisement, now: session.loop.nowNanoseconds))
        }
        try session.run()
    }
}

extension AdvertiserFilter {
    var describe: String {
        if let address { return "address \(address)" }
        if let name { return "name '\(name)'" }
        return "service \(service?.description ?? "?")"
    }
}

/// One connected run of `blemu gatt`: MTU, discovery, then the action.
final class GattRun {
    let session: CentralSession
    let link: CentralLink
    let action: GattCommand.Action
    let json: Bool
    let profile: Bool
    let capture: Double?
    /// Values recorded by `--capture`, per value handle, at most `maxCaptured` each.
    private var captured: [UInt16: [[UInt8]]] = [:]
    static let maxCaptured = 64
    let noResponse: Bool
    let count: Int?
    let advertisement: Advertisement
    let security: CentralSecurity
    private var received = 0
    /// A request refused for want of security is retried once, after securing the link.
    private var retriedAfterSecuring = false
    /// `dump --profile --pair`: the first reads go over the link as it is, then the link is
    /// secured and what was refused for want of security read again.
    let pairsAfterDump: Bool

    init(session: CentralSession, link: CentralLink, action: GattCommand.Action, json: Bool, profile: Bool, capture: Double?,
         noResponse: Bool, count: Int?, advertisement: Advertisement, security: CentralSecurity, pairsAfterDump: Bool = false) {
        self.security = security
        self.pairsAfterDump = pairsAfterDump
        self.profile = profile
        self.capture = capture
        self.session = session
        self.link = link
        self.action = action
        self.json = json
        self.noResponse = noResponse
        self.count = count
        self.advertisement = advertisement
    }

    var client: GATTClient { link.client }

    /// `--pair`: encrypt with the bond, or pair, then go on.
    func secureThenStart() {
        secure(because: nil) { [self] _ in start() }
    }

    /// Secures the link (bond or pairing), says how on stderr, then `then`; a failure ends the run.
    private func secure(because refusal: ATTError?, then: @escaping (LinkSecurity) -> Void) {
        let bonded = security.bonds.bond(for: SMPAddress(link.peer, isRandom: link.peerAddressType & 0x01 == 0x01)) != nil
        if let refusal {
            emitNote("refused for want of security (\(refusal)): \(bonded ? "encrypting with our bond" : "pairing"), then trying once more")
        } else {
            emitNote(bonded ? "encrypting with our bond" : "pairing")
        }
        security.secure(link.handle) { [self] result in
            switch result {
            case .failure(let error):
                let hint = PairingHint.forFailure(error, passkeyGiven: security.configuration.passkey != nil).map { ": " + $0 } ?? ""
                fail("securing the link with \(link.peer): \(error)\(hint)")
            case .success(let linkSecurity):
                emitNote("\(security.wasPaired(link.handle) ? "paired" : "encrypted with our bond"): \(linkSecurity.summary)")
                then(linkSecurity)
            }
        }
    }

    /// Runs `request`; when the peripheral refuses it for want of security (0x05, 0x0F or 0x0C;
    /// Vol 3, Part C, 10.3.2), secures the link and runs it once more, as a phone does.
    private func retryingOnSecurity<T>(_ request: @escaping (@escaping (Result<T, GATTClientError>) -> Void) -> Void,
                                       completion: @escaping (Result<T, GATTClientError>) -> Void) {
        request { [self] result in
            if case .failure(.att(let error, _)) = result, !retriedAfterSecuring,
               [ATTError.insufficientAuthentication, .insufficientEncryption, .encryptionKeySizeTooShort].contains(error) {
                retriedAfterSecuring = true
                secure(because: error) { _ in request(completion) }
                return
            }
            completion(result)
        }
    }

    func start() {
        client.exchangeMTU { [self] _ in
            // An MTU refusal leaves the default, which still works.
            client.discoverAll { [self] result in
                switch result {
                case .failure(let error): fail("discovery: \(error)")
                case .success(let services):
                    // Follow database changes from here on, as phones do; a refusal changes nothing else.
                    client.followServiceChanged { [self] _ in run(services) }
                }
            }
        }
    }

    private func fail(_ message: String) {
        link.onDisconnected = nil
        session.finish(failure: message)
    }

    private func done() {
        link.onDisconnected = nil
        session.finish()
    }

    private func find(_ uuid: BluetoothUUID, in services: [RemoteService]) -> RemoteCharacteristic? {
        guard let found = services.characteristic(uuid) else {
            fail("\(advertisement.address) has no characteristic \(uuid)")
            return nil
        }
        return found
    }

    private func run(_ services: [RemoteService]) {
        switch action {
        case .dump:
            dump(services)
        case .read(let uuid):
            guard let characteristic = find(uuid, in: services) else { return }
            retryingOnSecurity({ [self] done in client.read(characteristic.valueHandle, completion: done) }) { [self] result in
                switch result {
                case .failure(let error): fail("read \(uuid): \(error)")
                case .success(let value):
                    emitLine(json ? GATTValueText.json(uuid: uuid, handle: characteristic.valueHandle, value: value).encoded
                                  : GATTValueText.describe(uuid: uuid, value: value))
                    done()
                }
            }
        case .write(let uuid, let value):
            guard let characteristic = find(uuid, in: services) else { return }
            if noResponse {
                switch client.writeWithoutResponse(characteristic.valueHandle, value) {
                case .failure(let error): fail("write \(uuid): \(error)")
                case .success: emitLine(json ? #"{"ok":true}"# : "written (without response)"); done()
                }
                return
            }
            let write = { [self] in
                retryingOnSecurity({ [self] done in client.write(characteristic.valueHandle, value, completion: done) }) { [self] result in
                    switch result {
                    case .failure(let error): fail("write \(uuid): \(error)")
                    case .success:
                        emitLine(json ? #"{"ok":true}"# : "written")
                        guard characteristic.properties.contains(.indicate) else { return done() }
                        // A control point answers with an indication: wait a little for it.
                        session.loop.schedule(after: .seconds(5)) { [self] in done() }
                    }
                }
            }
            // A control point (write and indicate, Vol 3, Part G, 4.11) wants its indications
            // on before a write, as an app subscribes first: the response is printed.
            guard characteristic.properties.contains(.indicate), characteristic.clientConfigurationHandle != nil else { return write() }
            client.onIndication = { [self] handle, indicated in
                guard handle == characteristic.valueHandle else { return }
                emitLine(json ? GATTValueText.json(uuid: uuid, handle: handle, value: Array(indicated)).encoded
                              : "indicated: " + GATTValueText.describe(uuid: uuid, value: Array(indicated)))
                done()
            }
            retryingOnSecurity({ [self] done in client.configure(characteristic, notify: false, indicate: true, completion: done) }) { [self] result in
                if case .failure(let error) = result { return fail("subscribe \(uuid) before writing: \(error)") }
                write()
            }
        case .subscribe(let uuid):
            guard let characteristic = find(uuid, in: services) else { return }
            let notify = characteristic.properties.contains(.notify)
            guard notify || characteristic.properties.contains(.indicate) else {
                return fail("characteristic \(uuid) neither notifies nor indicates")
            }
            let handler: (UInt16, ArraySlice<UInt8>) -> Void = { [self] handle, value in
                guard handle == characteristic.valueHandle else { return }
                emitLine(json ? GATTValueText.json(uuid: uuid, handle: handle, value: Array(value)).encoded
                              : GATTValueText.describe(uuid: uuid, value: Array(value)))
                received += 1
                if let count, received >= count { done() }
            }
            client.onNotification = handler
            client.onIndication = handler
            // Vol 3, Part G, 7.1: the client has rediscovered the range by now; say so, and end
            // if what we listen to is gone.
            client.onServiceChanged = { [self] range in
                session.logger.notice("the peripheral changed its database (handles \(Hex.word(range.lowerBound))-\(Hex.word(range.upperBound))): rediscovered")
                if client.services.characteristic(uuid) == nil {
                    fail("characteristic \(uuid) is gone: the peripheral took it out (Service Changed)")
                }
            }
            retryingOnSecurity({ [self] done in client.configure(characteristic, notify: notify, indicate: !notify, completion: done) }) { [self] result in
                if case .failure(let error) = result { fail("subscribe \(uuid): \(error)") }
            }
        }
    }

    /// Subscribes to everything that notifies or indicates and records what comes for `seconds`.
    private func record(_ services: [RemoteService], for seconds: Double, then finish: @escaping () -> Void) {
        let notifying = services.flatMap(\.characteristics).filter {
            !$0.properties.isDisjoint(with: [.notify, .indicate]) && $0.clientConfigurationHandle != nil
        }
        let handles = Set(notifying.map(\.valueHandle))
        let keep: (UInt16, ArraySlice<UInt8>) -> Void = { [self] handle, value in
            guard handles.contains(handle), captured[handle, default: []].count < Self.maxCaptured else { return }
            captured[handle, default: []].append(Array(value))
        }
        client.onNotification = keep
        client.onIndication = keep
        for characteristic in notifying {
            let notify = characteristic.properties.contains(.notify)
            client.configure(characteristic, notify: notify, indicate: !notify) { result in
                if case .failure(let error) = result {
                    self.session.logger.warning("capture: \(characteristic.uuid) could not be subscribed: \(error)")
                }
            }
        }
        session.loop.schedule(after: .milliseconds(Int64(seconds * 1000))) { finish() }
    }

    /// Every service, characteristic and descriptor, with the values that can be read, and
    /// what each refusal showed (`GATTProfile.readPermissions`). Nothing is written: a dump must
    /// not change the device.
    private func dump(_ services: [RemoteService]) {
        var handles: [UInt16] = []
        for service in services {
            for characteristic in service.characteristics {
                if characteristic.properties.contains(.read) { handles.append(characteristic.valueHandle) }
                handles += characteristic.descriptors.map(\.handle)
            }
        }
        var values: [UInt16: Result<[UInt8], GATTClientError>] = [:]
        var refusals: [UInt16: [UInt8]] = [:]
        func read(_ pending: [UInt16], then finish: @escaping () -> Void) {
            guard let handle = pending.first else { return finish() }
            client.read(handle) { result in
                if case .failure(.timeout) = result { return self.fail("read of handle \(Hex.word(handle)) timed out") }
                if case .failure(.att(let error, _)) = result { refusals[handle, default: []].append(error.rawValue) }
                values[handle] = result
                read(Array(pending.dropFirst()), then: finish)
            }
        }
        read(handles) { [self] in
            guard pairsAfterDump else { return print(services, values, permissions: permissions(refusals, [:])) }
            let refused = handles.filter {
                guard case .failure(.att(let error, _))? = values[$0] else { return false }
                return [ATTError.insufficientAuthentication, .insufficientEncryption, .encryptionKeySizeTooShort].contains(error)
            }
            secure(because: nil) { [self] linkSecurity in
                read(refused) { [self] in
                    var readSecured: [UInt16: Bool] = [:]
                    for handle in refused { if case .success? = values[handle] { readSecured[handle] = linkSecurity.isAuthenticated } }
                    print(services, values, permissions: permissions(refusals, readSecured))
                }
            }
        }
    }

    /// The read permissions of every handle that was refused.
    private func permissions(_ refusals: [UInt16: [UInt8]], _ readSecured: [UInt16: Bool]) -> [UInt16: [String]] {
        var permissions: [UInt16: [String]] = [:]
        for (handle, codes) in refusals {
            permissions[handle] = GATTProfile.readPermissions(refusals: codes, readOnAuthenticatedLink: readSecured[handle])
        }
        return permissions
    }

    private func print(_ services: [RemoteService], _ values: [UInt16: Result<[UInt8], GATTClientError>],
                       permissions: [UInt16: [String]]) {
        if profile {
            guard let capture else {
                emitLine(GATTValueText.profile(advertisement: advertisement, services: services, values: values, captured: [:],
                                                        permissions: permissions).encoded())
                return done()
            }
            return record(services, for: capture) { [self] in
                emitLine(GATTValueText.profile(advertisement: advertisement, services: services, values: values, captured: captured,
                                                    permissions: permissions).encoded())
                done()
            }
        } else if json {
            emitLine(GATTValueText.dumpJSON(advertisement: advertisement, services: services, values: values).encoded)
        } else {
            emitLine("\(advertisement.address) \"\((GATTValueText.deviceName(services, values) ?? advertisement.name).visible)\" (ATT MTU \(client.mtu))")
            for service in services {
                emitLine("\(service.service.isPrimary ? "service" : "secondary service") \(service.uuid)\(GATTValueText.serviceName(service.uuid)) handles \(Hex.word(service.handles.lowerBound))-\(Hex.word(service.handles.upperBound))")
                for include in service.includes {
                    emitLine("  includes \(include.service.uuid) handles \(Hex.word(include.service.handles.lowerBound))-\(Hex.word(include.service.handles.upperBound))")
                }
                for characteristic in service.characteristics {
                    var line = "  characteristic \(characteristic.uuid)\(GATTValueText.characteristicName(characteristic.uuid)) handle \(Hex.word(characteristic.valueHandle)) [\(GATTValueText.properties(characteristic.properties))]"
                    if let value = values[characteristic.valueHandle] { line += ": " + GATTValueText.describe(uuid: characteristic.uuid, result: value) }
                    emitLine(line)
                    for descriptor in characteristic.descriptors {
                        var line = "    descriptor \(descriptor.uuid) handle \(Hex.word(descriptor.handle))"
                        if let value = values[descriptor.handle] { line += ": " + GATTValueText.describe(uuid: descriptor.uuid, result: value) }
                        emitLine(line)
                    }
                }
            }
        }
        done()
    }
}

/// Values as a person reads them: known characteristics decoded, text shown as text, the rest hex.
enum GATTValueText {
    static func serviceName(_ uuid: BluetoothUUID) -> String {
        DevicesCommand.serviceNames[uuid].map { " (\($0))" } ?? ""
    }

    /// GAP Device Name as read (the advertised name may be shortened).
    static func deviceName(_ services: [RemoteService], _ values: [UInt16: Result<[UInt8], GATTClientError>]) -> String? {
        guard let handle = services.characteristic(GATTType.deviceName, in: GATTType.gapService)?.valueHandle,
              case .success(let bytes)? = values[handle] else { return nil }
        return String(decoding: bytes, as: UTF8.self)
    }

    static func characteristicName(_ uuid: BluetoothUUID) -> String {
        DevicesCommand.characteristicNames[uuid].map { " (\($0))" } ?? ""
    }

    static func properties(_ properties: CharacteristicProperties) -> String {
        let names: [(CharacteristicProperties, String)] = [
            (.broadcast, "broadcast"), (.read, "read"), (.writeWithoutResponse, "write-without-response"), (.write, "write"),
            (.notify, "notify"), (.indicate, "indicate"), (.authenticatedSignedWrites, "signed-write"),
            (.extendedProperties, "extended-properties"),
        ]
        return names.filter { properties.contains($0.0) }.map(\.1).joined(separator: " ")
    }

    static func describe(uuid: BluetoothUUID, result: Result<[UInt8], GATTClientError>) -> String {
        switch result {
        case .success(let value): return describe(uuid: uuid, value: value)
        case .failure(let error): return "(\(error))"
        }
    }

    /// The value decoded when the UUID is known, else text when it is printable, else hex.
    static func describe(uuid: BluetoothUUID, value: [UInt8]) -> String {
        guard let decoded = decoded(uuid: uuid, value: value) else { return Hex.bytes(value) }
        // Text needs no hex beside it; a decoded number keeps its bytes.
        return decoded.hasPrefix("\"") ? decoded : "\(decoded)  [\(Hex.bytes(value))]"
    }

    static func decoded(uuid: BluetoothUUID, value: [UInt8]) -> String? {
        switch uuid.uint16 {
        case 0x2A37:
            guard let m = try? HeartRateMeasurement(decoding: value[...]) else { return nil }
            var text = "\(m.heartRate) bpm"
            if m.sensorContact != .notSupported { text += ", contact \(m.sensorContact == .detected ? "detected" : "not detected")" }
            if let energy = m.energyExpended { text += ", energy \(energy) kJ" }
            if !m.rrIntervals.isEmpty { text += ", RR " + m.rrIntervals.map { "\(Int($0) * 1000 / 1024) ms" }.joined(separator: " ") }
            return text
        case 0x2A19:
            return value.count == 1 ? "\(value[0]) %" : nil
        case 0x2A6E:
            guard value.count == 2 else { return nil }
            let raw = Int16(bitPattern: UInt16(value[0]) | UInt16(value[1]) << 8)
            return raw == Int16.min ? "unknown" : "\(Double(raw) / 100) °C"
        case 0x2A6F:
            guard value.count == 2 else { return nil }
            return "\(Double(UInt16(value[0]) | UInt16(value[1]) << 8) / 100) %"
        case 0x2A01, 0x2902:
            guard value.count == 2 else { return nil }
            return Hex.word(UInt16(value[0]) | UInt16(value[1]) << 8)
        case 0x2A38:
            let locations = ["other", "chest", "wrist", "finger", "hand", "ear lobe", "foot"]
            return value.count == 1 && Int(value[0]) < locations.count ? locations[Int(value[0])] : nil
        default:
            return text(value)
        }
    }

    /// UTF-8 without control characters (C0, DEL, C1, bidirectional overrides: `VisibleText`'s
    /// list, but newlines), quoted; nil otherwise (then shown as hex).
    static func text(_ value: [UInt8]) -> String? {
        guard !value.isEmpty, let string = String(validating: value, as: UTF8.self),
              string.unicodeScalars.allSatisfy({ !VisibleText.isEscaped($0) || $0 == "\n" }) else { return nil }
        return "\"\(string.replacingNewlines)\""
    }

    static func json(uuid: BluetoothUUID, handle: UInt16, value: [UInt8]) -> JSONValue {
        .object([("uuid", .string(uuid.description)), ("handle", .string(Hex.word(handle))),
                 ("value", .string(Hex.bytes(value))), ("decoded", decoded(uuid: uuid, value: value).map { .string($0) } ?? .null)])
    }

    /// The database and its values as a GATT profile: what `blemu run FILE.json` serves.
    static func profile(advertisement: Advertisement, services: [RemoteService],
                        values: [UInt16: Result<[UInt8], GATTClientError>], captured: [UInt16: [[UInt8]]],
                        permissions: [UInt16: [String]]) -> GATTProfile {
        func hex(_ handle: UInt16) -> String? {
            if case .success(let bytes)? = values[handle] { return Hex.bytes(bytes) }
            return nil
        }
        var appearance = advertisement.appearance.map(Int.init)
        if let handle = services.characteristic(GATTType.appearance, in: GATTType.gapService)?.valueHandle,
           case .success(let bytes)? = values[handle], bytes.count == 2 {
            appearance = Int(UInt16(bytes[0]) | UInt16(bytes[1]) << 8)
        }
        return GATTProfile(
            name: deviceName(services, values) ?? advertisement.name, address: advertisement.address.description,
            appearance: appearance, advertisedServices: advertisement.services.map(\.description),
            services: services.map { service in
                GATTProfile.Service(
                    uuid: service.uuid.description, primary: service.service.isPrimary ? nil : false,
                    includes: service.includes.isEmpty ? nil : service.includes.map(\.service.uuid.description),
                    characteristics: service.characteristics.map { characteristic in
                        GATTProfile.Characteristic(
                            uuid: characteristic.uuid.description,
                            properties: GATTProfile.propertyNames(characteristic.properties),
                            value: hex(characteristic.valueHandle),
                            notifications: captured[characteristic.valueHandle].map { $0.map { Hex.bytes($0) } },
                            descriptors: characteristic.descriptors.isEmpty ? nil : characteristic.descriptors.map {
                                GATTProfile.Descriptor(uuid: $0.uuid.description, value: hex($0.handle), permissions: permissions[$0.handle])
                            },
                            permissions: permissions[characteristic.valueHandle])
                    })
            })
    }

    static func dumpJSON(advertisement: Advertisement, services: [RemoteService],
                         values: [UInt16: Result<[UInt8], GATTClientError>]) -> JSONValue {
        func value(_ uuid: BluetoothUUID, _ handle: UInt16) -> [(String, JSONValue)] {
            switch values[handle] {
            case nil: return []
            case .success(let bytes)?:
                return [("value", .string(Hex.bytes(bytes))), ("decoded", decoded(uuid: uuid, value: bytes).map { .string($0) } ?? .null)]
            case .failure(let error)?:
                return [("error", .string(error.description))]
            }
        }
        return .object([
            ("address", .string(advertisement.address.description)),
            ("name", .string(deviceName(services, values) ?? advertisement.name)),
            ("services", .array(services.map { service in
                .object([
                    ("uuid", .string(service.uuid.description)),
                    ("primary", .bool(service.service.isPrimary)),
                    ("start", .string(Hex.word(service.handles.lowerBound))), ("end", .string(Hex.word(service.handles.upperBound))),
                    ("includes", .array(service.includes.map { .string($0.service.uuid.description) })),
                    ("characteristics", .array(service.characteristics.map { characteristic in
                        .object([
                            ("uuid", .string(characteristic.uuid.description)),
                            ("handle", .string(Hex.word(characteristic.valueHandle))),
                            ("properties", .array(properties(characteristic.properties).split(separator: " ").map { .string(String($0)) })),
                        ] + value(characteristic.uuid, characteristic.valueHandle) + [
                            ("descriptors", .array(characteristic.descriptors.map { descriptor in
                                .object([("uuid", .string(descriptor.uuid.description)), ("handle", .string(Hex.word(descriptor.handle)))]
                                        + value(descriptor.uuid, descriptor.handle))
                            })),
                        ])
                    })),
                ])
            })),
        ])
    }
}

extension String {
    var replacingNewlines: String { split(separator: "\n", omittingEmptySubsequences: false).joined(separator: "\\n") }
}

extension SMPIOCapability {
    /// The `--io-capability` names.
    init?(cliName: String) {
        switch cliName {
        case "display-only": self = .displayOnly
        case "display-yes-no": self = .displayYesNo
        case "keyboard-only": self = .keyboardOnly
        case "no-input-no-output": self = .noInputNoOutput
        case "keyboard-display": self = .keyboardDisplay
        default: return nil
        }
    }
}

/// What to do about a pairing that failed, when the reason says more than its name.
enum PairingHint {
    /// Passkey Entry with a passkey typed that is not the peripheral's ends in Confirm Value
    /// Failed (Vol 3, Part H, 2.3.5.6.3: each bit's confirm value mismatches), from either side.
    static func forFailure(_ error: CentralSecurityError, passkeyGiven: Bool) -> String? {
        guard case .pairingFailed(reason: .confirmValueFailed?, _) = error, passkeyGiven else { return nil }
        return "the --passkey given is probably not the peripheral's passkey: a blemu device logs the one it made up "
            + "at start (`centrals pair with the passkey NNNNNN`), keeps it in passkey-DEVICE-NAME.txt in its --state-dir "
            + "and shows it in `blemu ctl PATH list` (\"passkey\"); a real device has it on its label or screen"
    }
}
