import BlemuBroadcast
import BlemuConfig
import BlemuCore
import BlemuDevices
import BlemuHCI
import BlemuLint
import BlemuRunLoop
import BlemuStack
import BlemuTestSupport
import BlemuTransport
import Testing

/// The advertisements `blemu lint` and the start of `blemu run` judge: every built-in device's,
/// as the run would send them, collected without a controller.
@Suite struct AdvertisingCheckTests {
    static func plan(_ device: String, settings: [(String, String)] = []) -> DevicePlan {
        var plan = DevicePlan(device: device, spec: .tcp(host: "127.0.0.1", port: 1))
        plan.settings = settings.map { DeviceConfiguration.Setting(key: $0.0, value: $0.1, location: "test") }
        return plan
    }

    /// Today's devices pass every rule (Docs/TESTING-APPS.md, "What phones drop").
    @Test func everyBuiltInDeviceHasItsAdvertisementsCollectedAndPassesEveryRule() throws {
        let checks = try AdvertisingCheck.check(DeviceRegistry.all.map { Self.plan($0.name) }, nameGiven: false)
        #expect(checks.map(\.device) == DeviceRegistry.all.map(\.name))
        for check in checks {
            #expect(!check.advertisements.isEmpty, "\(check.device): no advertisement")
            #expect(check.findings.isEmpty, "\(check.device): \(check.findings.map(\.line))")
            for advertisement in check.advertisements { #expect(!advertisement.advertisingData.isEmpty, "\(check.device)") }
        }
    }

    @Test func aConnectableDeviceSendsThePayloadBuiltFromItsProfile() throws {
        let check = try #require(try AdvertisingCheck.check([Self.plan("heart-rate")], nameGiven: false).first)
        let device = HeartRateDevice()
        let built = AdvertisingPayload.build(AdvertisingContent(name: device.profile.defaultName, serviceUUIDs: device.profile.advertisedServices,
                                                                appearance: device.profile.appearance, txPowerLevel: device.profile.txPowerLevel))
        #expect(check.advertisements.count == 1)
        let advertisement = try #require(check.advertisements.first)
        #expect(advertisement.connectable && !advertisement.extended)
        #expect(advertisement.advertisingData == built.advertisingData && advertisement.scanResponseData == built.scanResponseData)
        #expect(advertisement.interval == .phases(AdvertisingTiming()))
        #expect(advertisement.primaryService == device.profile.advertisedServices.first)
    }

    @Test func aBroadcasterIsFollowedThroughTheAdvertisementsItRotates() throws {
        let checks = try AdvertisingCheck.check([Self.plan("eddystone"), Self.plan("ibeacon"), Self.plan("bthome-door")], nameGiven: false)
        let eddystone = checks[0], beacon = checks[1], door = checks[2]
        // UID, URL and TLM frames (the TLM's counters make each TLM frame new).
        let types = Set(eddystone.advertisements.compactMap { (try? EddystoneFrame.find(in: $0.advertisingData[...])).flatMap { $0 } }
            .map { frame -> String in
                switch frame {
                case .uid: "uid"
                case .url: "url"
                case .telemetry: "tlm"
                }
            })
        #expect(types == ["uid", "url", "tlm"])
        #expect(eddystone.advertisements.allSatisfy { !$0.connectable && $0.interval == .fixed(160) })
        #expect(beacon.advertisements.map(\.advertisingData) == [IBeaconDevice().beacon.advertisingData])
        #expect(door.advertisements.count == 1 && (try? BTHome.decode(advertisingData: door.advertisements[0].advertisingData[...])) != nil)
    }

    /// The plan's settings are applied first: an iBeacon set to advertise every second is no
    /// iBeacon as Apple's specification has it.
    @Test func thePlansSettingsShapeWhatIsChecked() throws {
        let check = try #require(try AdvertisingCheck.check([Self.plan("ibeacon", settings: [("interval", "1000")])], nameGiven: false).first)
        #expect(check.advertisements.first?.interval == .fixed(1600))
        #expect(check.findings.map(\.rule.id) == ["ibeacon-frame"])
    }

    @Test func copiesAreNamedAsTheRunNamesThem() throws {
        let checks = try AdvertisingCheck.check([Self.plan("thermostat"), Self.plan("thermostat")], nameGiven: false)
        let first = checks[0].name
        #expect(checks[1].name == first + " 2")
        #expect(try AdvertisingContent(decodingAdvertisingData: checks[1].advertisements[0].advertisingData[...],
                                       scanResponseData: checks[1].advertisements[0].scanResponseData[...]).name == first + " 2")
    }

    /// At the run's start each device whose advertising fails a rule is told once, as a warning
    /// with the rules' ids; one that passes is not.
    @Test func theRunWarnsOnceForADeviceThatFailsARule() throws {
        let log = CapturedLog()
        _ = try RunStack.assemble([Self.plan("ibeacon", settings: [("interval", "1000")]), Self.plan("heart-rate")],
                                  options: RunOptions(), loop: RunLoop(), logger: log.logger)
        let warnings = log.entries.filter { $0.level == .warning && $0.message.contains("blemu lint") }
        #expect(warnings.count == 1)
        #expect(warnings.first?.message.contains("ibeacon-frame: iBeacon every 1000 ms, not 100 ms") == true)
    }

    /// A slow interval outside Apple's list is said once at the start, by the advertiser's own
    /// `advertising timing:` line, not again by the lint warning.
    @Test func anIntervalOutsideApplesListIsWarnedOnceAtTheStart() throws {
        var plan = Self.plan("heart-rate")
        plan.advertising = AdvertisingTiming(slowInterval: 400)   // 250 ms
        let log = CapturedLog()
        _ = try RunStack.assemble([plan], options: RunOptions(), loop: RunLoop(), logger: log.logger)
        let said = log.entries.filter { $0.level == .warning && ($0.message.contains("slow advertising interval") || $0.message.contains("slow interval")) }
        #expect(said.count == 1)
        #expect(try AdvertisingCheck.check([plan], nameGiven: false).first?.findings.map(\.rule.id) == ["advertising-interval"])
    }
}
