import BlemuBroadcast
import BlemuCore
import BlemuCrypto
import BlemuDevice
import BlemuDevices
import BlemuHCI
import BlemuHost
import BlemuRunLoop
import BlemuSMP
import BlemuSecurity
import BlemuTransport
import Logging

/// What `blemu run` says for every device at once, beside each device's own plan.
public struct RunOptions {
    /// Privacy for every device (a plan may ask for it on its own).
    public var privacy = false
    /// Seconds one private address lasts, for every device (else the plan's, else 15 minutes).
    public var privateAddressTimeout: Int?
    /// The IO capability for every device (else the plan's, else what the passkey implies).
    public var ioCapability: SMPIOCapability?
    public var numericComparison: NumericComparisonAnswer = .accept
    /// Where bonds, identities and generated passkeys are kept; nil: nowhere (nothing kept).
    public var stateDirectory: String?
    /// Devices that name one tcp: or unix: spec share one connection (one controller).
    public var shareController = false
    /// A name was given for every device: copies of one device are numbered even when named.
    public var nameGiven = false
    /// The advertising sets the controllers behind a `tcp:` or `unix:` spec run at once
    /// (`ControllerProbe`): the fleet members on that spec share connections this many at a time.
    /// A spec not here gives each member its own connection, as any device.
    public var advertisingSets: [ControllerSpec: Int] = [:]

    public init() {}
}

/// A device's answer to Numeric Comparison.
public enum NumericComparisonAnswer: String, CaseIterable, Sendable {
    case accept, reject, ask
}

/// Assembles `blemu run`'s stacks from the plans: a `ControllerStack` per controller, a
/// `Peripheral` per device on it, each with its name, address and pairing options.
public enum RunStack {
    public static func assemble(_ plans: [DevicePlan], options: RunOptions, loop: RunLoop,
                                logger: Logger) throws(StackFailure) -> [ControllerStack] {
        try assembleInPlanOrder(plans, options: options, loop: loop, logger: logger).stacks
    }

    /// `assemble`, with each plan's `Peripheral` in the plans' order (the stacks list theirs by
    /// controller: devices sharing one are together).
    public static func assembleInPlanOrder(_ plans: [DevicePlan], options: RunOptions, loop: RunLoop,
                                           logger: Logger) throws(StackFailure) -> (stacks: [ControllerStack], peripherals: [Peripheral]) {
        var inPlanOrder: [Peripheral] = []
        // Which connection each device goes on (ControllerPlacement says why).
        let placement = ControllerPlacement.place(plans, options: options)
        var stacks: [ControllerStack] = []
        var stackOf: [Int: ControllerStack] = [:]
        var copies: [String: Int] = [:]
        // The model timers of every fleet's broadcasters (a thermometer's next measurement, a
        // beacon's next frame) on one 100 ms grid: one run-loop wakeup per tick that has any,
        // not one per member (issue 38, "Cost that stays flat").
        let fleetModelTimers = TimerWheel(base: loop)
        for (planIndex, plan) in plans.enumerated() {
            let deviceName = plan.device, spec = plan.spec
            guard let device = DevicePlanning.makeDevice(plan) else { continue }
            // Initial values (and the PIN) before the device starts; the front end has tried them all.
            do { try DevicePlanning.applySettings(plan, to: device) } catch {
                throw StackFailure((error as? PlanError)?.message ?? "\(error)")
            }
            // Two copies of one device need two names, and so two addresses (derived from the name).
            copies[deviceName, default: 0] += 1
            let copy = copies[deviceName] ?? 1
            let localName = Self.localName(plan: plan, device: device, copy: copy, nameGiven: options.nameGiven)
            var configuration = PeripheralConfiguration(name: localName, address: plan.address, controller: spec.description,
                                                        advertisingTiming: DevicePlanning.advertisingTiming(plan, device: device),
                                                        connectionParameters: plan.connection)
            configuration.startDelay = plan.startDelay
            // The command line's privacy is for every device; a config file's per device.
            configuration.privacy = options.privacy || plan.privacy
            if let seconds = options.privateAddressTimeout ?? plan.privateAddressTimeout {
                configuration.privateAddressTimeout = .seconds(seconds)
            }
            configuration.security = securityConfiguration(plan: plan, device: type(of: device), configuration: configuration,
                                                           options: options, logger: logger)
            if let path = plan.bindkeyFile {
                try configureEncryption(device, bindkeyFile: path, configuration: configuration, options: options, logger: logger)
            }
            // Connections are numbered in the order the plans first use them.
            let stack: ControllerStack
            if let opened = stackOf[placement.connectionOfPlan[planIndex]] {
                stack = opened
            } else {
                stack = ControllerStack(spec: spec, loop: loop, logger: logger)
                stackOf[placement.connectionOfPlan[planIndex]] = stack
                stacks.append(stack)
            }
            do {
                try stack.add(device: device, configuration: configuration,
                              deviceScheduler: plan.fleet != nil && device is BroadcastingDevice ? fleetModelTimers : nil)
            } catch {
                throw StackFailure("device \(deviceName): \(error)")
            }
            if let added = stack.peripherals.last {
                inPlanOrder.append(added)
                AdvertisingCheck.warnAtStart(plan, peripheral: added)
            }
        }
        return (stacks, inPlanOrder)
    }

    /// An encrypted BTHome device: its bindkey, and its counter in the state directory
    /// (`bthome-counter-DEVICE-NAME`, beside the device's bonds), so no nonce repeats across restarts.
    static func configureEncryption(_ device: Device, bindkeyFile path: String, configuration: PeripheralConfiguration,
                                    options: RunOptions, logger: Logger) throws(StackFailure) {
        let kind = type(of: device).deviceName
        let broadcast: BTHomeBroadcast
        switch device {
        case let thermometer as BTHomeThermometerDevice: broadcast = thermometer.broadcast
        case let door as BTHomeDoorDevice: broadcast = door.broadcast
        default: throw StackFailure("--bindkey-file: \(kind) does not encrypt")
        }
        let key: AESCCMKey
        switch BTHomeBindkey.read(path: path) {
        case .success(let read):
            key = read.key
            if let warning = read.warning { logger.warning("\(kind) '\(configuration.name)': \(warning)") }
        case .failure(let error): throw StackFailure("--bindkey-file: \(error.description)")
        }
        guard let directory = options.stateDirectory else {
            throw StackFailure("\(kind) '\(configuration.name)': encryption needs a state directory (--state-dir) to keep its counter, so that no nonce repeats across restarts")
        }
        let address = PeripheralConfiguration.identityAddress(deviceName: kind, localName: configuration.name,
                                                              configured: configuration.address)
        let owner = BondOwner(device: kind, name: configuration.name, address: address)
        let counters = BTHomeCounterStore(path: directory + "/bthome-counter-" + owner.fileName.dropFirst("bonds-".count))
        if let damage = counters.damage { logger.warning("\(kind) '\(configuration.name)': \(damage)") }
        broadcast.encrypt(key: key, counters: counters)
    }

    /// Whether a broadcasting fleet's members on `spec` share connections by the controller's
    /// advertising sets (`RunOptions.advertisingSets`): a spec where each connection is a
    /// controller of its own, unless `--share-controller` puts every device of it on one.
    public static func poolsFleetMembers(_ spec: ControllerSpec, options: RunOptions) -> Bool {
        switch spec {
        case .tcp, .unix: return !options.shareController
        default: return false
        }
    }

    /// Whether the devices that name `spec` run on one controller: an adapter or a UART can be
    /// opened once only; a stream spec gives a new controller per connection (rootcanal) unless
    /// asked to share.
    static func sharesOneController(_ spec: ControllerSpec, options: RunOptions) -> Bool {
        switch spec {
        case .tcp, .unix: return options.shareController
        default: return true
        }
    }

    /// A device's pairing options: its passkey and its bond file in the state directory, keyed
    /// to the identity address the peripheral uses (`PeripheralConfiguration.identityAddress`).
    /// A device that pairs with a static passkey and was given none gets the one kept in the
    /// state directory, made on its first start, and logged (the user reads the "label" there).
    static func securityConfiguration(plan: DevicePlan, device: Device.Type, configuration: PeripheralConfiguration,
                                      options: RunOptions, logger: Logger) -> SecurityConfiguration {
        let kind = device.deviceName, name = configuration.name
        let address = PeripheralConfiguration.identityAddress(deviceName: kind, localName: name, configured: configuration.address)
        let owner = BondOwner(device: kind, name: name, address: address)
        let directory = options.stateDirectory
        var passkey = plan.passkey.flatMap { UInt32($0) }
        let passkeyIsGenerated = passkey == nil && device.pairsWithStaticPasskey
        if passkeyIsGenerated {
            let path = directory.map { PasskeyLabel.path(directory: $0, owner: owner) }
            let label = PasskeyLabel.loadOrCreate(path: path)
            passkey = label.passkey
            let metadata: Logger.Metadata = [LogKey.device: .string(kind), LogKey.name: .string(name)]
            if let problem = label.problem { logger.warning("\(kind) '\(name)': passkey file: \(problem)", metadata: metadata) }
            let kept = path.map { label.problem == nil ? ", kept in \($0)" : "" } ?? " (no state directory: a new one each start)"
            logger.event(.stateChanged, .notice,
                         "\(kind) '\(name)': no --passkey given: centrals pair with the passkey \(PasskeyLabel.sixDigits(label.passkey)) (the pairing passkey, typed when a central pairs\(DevicePlanning.takesPIN(plan) ? ", not the PIN" : ""); \(label.created ? "generated" : "generated on its first start")\(kept))",
                         metadata)
        }
        var security = SecurityConfiguration(passkey: passkey,
                                             ioCapability: options.ioCapability ?? plan.ioCapability.flatMap(SMPIOCapability.init(cliName:)),
                                             acceptNumericComparison: options.numericComparison == .accept,
                                             askNumericComparison: options.numericComparison == .ask,
                                             bondStorePath: directory.map { $0 + "/" + owner.fileName },
                                             identityPath: directory.map { $0 + "/" + owner.identityFileName })
        security.passkeyIsGenerated = passkeyIsGenerated
        return security
    }
}

extension SMPIOCapability {
    /// The names of `--io-capability` and of a config file's `io-capability:`.
    public init?(cliName: String) {
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
