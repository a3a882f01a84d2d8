import BlemuCore
import BlemuDevice
import BlemuDevices
import BlemuHCI
import BlemuHost
import BlemuLint
import BlemuSecurity
import Logging

/// One device's advertisements as `blemu run` will send them, and what the lint rules found.
public struct DeviceAdvertisingCheck {
    /// The device as the plan names it (`heart-rate`, a profile's path).
    public var device: String
    /// The local name it runs with.
    public var name: String
    /// Each advertisement it sends: one for a connectable device, each distinct one a
    /// broadcaster goes through in `AdvertisingCheck.broadcastSpan` (Eddystone's frames).
    public var advertisements: [LintedAdvertisement]
    /// The rules they fail, each distinct line once.
    public var findings: [LintFinding]
}

/// Every advertisement blemu will send for a set of plans, judged by `AdvertisingLint`'s rules
/// (`blemu lint`, and the warning at `blemu run`'s start). Nothing opens a controller: each
/// device is made anew with the plan's settings on a `Peripheral` of its own whose HCI output
/// goes nowhere (its controller never comes up), so the payload is the one the advertiser
/// builds; a broadcaster is started on a clock of its own, which is moved on to see the
/// advertisements it goes through. No file is read or written beyond what the plan names
/// (no bonds, identities or counters: an encrypted BTHome device is checked unencrypted).
public enum AdvertisingCheck {
    /// How long a broadcaster is followed: Eddystone goes through its UID, URL and TLM frames
    /// in 5 s, a BTHome thermometer measures every 10 s.
    public static let broadcastSpan: Duration = .seconds(10)
    /// Distinct advertisements kept a device (TLM frames differ in their counters every time).
    public static let maximumAdvertisements = 8

    /// The checks of `plans`, in their order, each device named as `blemu run` names it.
    public static func check(_ plans: [DevicePlan], nameGiven: Bool) throws -> [DeviceAdvertisingCheck] {
        var copies: [String: Int] = [:]
        var checks: [DeviceAdvertisingCheck] = []
        for plan in plans {
            guard let device = DevicePlanning.makeDevice(plan) else { continue }
            copies[plan.device, default: 0] += 1
            let name = RunStack.localName(plan: plan, device: device, copy: copies[plan.device] ?? 1, nameGiven: nameGiven)
            let configuration = PeripheralConfiguration(name: name, address: plan.address, controller: plan.spec.description,
                                                        advertisingTiming: DevicePlanning.advertisingTiming(plan, device: device),
                                                        connectionParameters: plan.connection)
            checks.append(try check(plan, device: device, configuration: configuration))
        }
        return checks
    }

    /// One plan's device (`device`, new, not started) with the configuration it runs with.
    public static func check(_ plan: DevicePlan, device: Device, configuration: PeripheralConfiguration) throws -> DeviceAdvertisingCheck {
        try DevicePlanning.applySettings(plan, to: device)
        var quiet = configuration
        // Nothing of pairing is needed to build a payload: no bond or identity file is opened.
        quiet.security = SecurityConfiguration()
        quiet.privacy = false
        let scheduler = ManualScheduler()
        let peripheral = try Peripheral(device: device, configuration: quiet, scheduler: scheduler,
                                        logger: Logger(label: "blemu.lint", factory: { _ in SwiftLogNoOpLogHandler() }),
                                        output: { _, _ in true })
        let advertisements: [LintedAdvertisement]
        if let broadcaster = device as? BroadcastingDevice {
            broadcaster.start(broadcasting: peripheral)
            var seen: [[UInt8]] = []
            func take() {
                let data = broadcaster.advertisingData
                if !data.isEmpty, !seen.contains(data), seen.count < maximumAdvertisements { seen.append(data) }
            }
            take()
            let steps = Int(broadcastSpan / .seconds(1))
            for _ in 0..<steps {
                scheduler.advance(by: .seconds(1))
                take()
            }
            broadcaster.stop()
            // Past 31 bytes the advertiser sends it in extended PDUs (`Advertiser`).
            advertisements = seen.map { data in
                LintedAdvertisement(advertisingData: data, connectable: false, extended: data.count > AdvertisingPayload.maximumLength,
                                    interval: .fixed(broadcaster.broadcastInterval))
            }
        } else {
            let payload = peripheral.advertisingPayload
            let profile = peripheral.profile
            advertisements = [LintedAdvertisement(
                advertisingData: payload.advertisingData, scanResponseData: payload.scanResponseData, connectable: true,
                extended: profile.recordedAdvertising != nil && profile.recordedAdvertisingIsExtended,
                interval: .phases(profile.advertisingTiming), primaryService: profile.advertisedServices.first)]
        }
        var lines = Set<String>()
        let findings = advertisements.flatMap(AdvertisingLint.check).filter { lines.insert($0.line).inserted }
        return DeviceAdvertisingCheck(device: plan.device, name: configuration.name, advertisements: advertisements, findings: findings)
    }

    /// At `blemu run`'s start: one warning for a device whose advertisements fail a rule, with
    /// the rules' ids and what failed (`blemu lint` says more), through the device's logger.
    static func warnAtStart(_ plan: DevicePlan, peripheral: Peripheral) {
        guard let device = DevicePlanning.makeDevice(plan),
              let check = try? check(plan, device: device, configuration: peripheral.configuration),
              case let findings = check.findings.filter({ $0.rule.id != AdvertisingLint.advertisingInterval.id }),
              !findings.isEmpty else { return }
        // The interval rule is left out here: the device's advertiser says its own timing at
        // start (`advertising timing: …`, from `AdvertisingTiming.violations`), once is enough.
        peripheral.logger.warning("advertising fails what phones check (`blemu lint`): \(findings.map(\.line).joined(separator: "; "))")
    }
}

extension RunStack {
    /// The local name a plan's device runs with: the plan's, else the device's own; the second
    /// and later copies of one device numbered (" 2"), also when a name was given for every
    /// device (`nameGiven`), so that each has a name and an address of its own.
    static func localName(plan: DevicePlan, device: Device, copy: Int, nameGiven: Bool) -> String {
        var localName = plan.name ?? device.profile.defaultName
        if copy > 1, plan.name == nil || nameGiven { localName += " \(copy)" }
        return localName
    }
}
