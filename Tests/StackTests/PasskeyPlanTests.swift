import BlemuConfig
import BlemuStack
import BlemuTransport
import Testing

/// `blemu run --passkey`: DEVICE=DIGITS for one device, bare DIGITS for every device (with a
/// start-up notice naming the devices it moves from Just Works to Passkey Entry).
@Suite struct PasskeyPlanTests {
    static func plans(_ devices: [String], _ passkeys: [String], file: RunConfiguration? = nil) throws -> [DevicePlan] {
        try DevicePlanning.plans(devices: devices, specs: [try ControllerSpec(parsing: "tcp:127.0.0.1:6402")],
                                 environmentSpec: { nil }, file: file, fileName: nil, name: nil, address: nil, pin: nil,
                                 passkeys: try PasskeyOptions.parse(passkeys))
    }

    @Test func aDevicesOwnPasskeyReachesThatDeviceAlone() throws {
        let plans = try Self.plans(["lock", "thermostat", "heart-rate"], ["lock=123456"])
        #expect(plans.map(\.passkey) == ["123456", nil, nil])
        #expect(DevicePlanning.passkeyNotice(plans, passkeys: try PasskeyOptions.parse(["lock=123456"])) == nil)
    }

    @Test func aBarePasskeyStillReachesEveryDeviceAndTheNoticeNamesTheJustWorksOnes() throws {
        let passkeys = try PasskeyOptions.parse(["123456"])
        let plans = try Self.plans(["lock", "thermostat", "heart-rate"], ["123456"])
        #expect(plans.map(\.passkey) == ["123456", "123456", "123456"])
        let notice = try #require(DevicePlanning.passkeyNotice(plans, passkeys: passkeys))
        #expect(notice.contains("thermostat, heart-rate now pair with Passkey Entry"), "\(notice)")
        #expect(!notice.contains("lock"), "the lock pairs with a static passkey anyway: \(notice)")
        #expect(!notice.contains("123456"), "the passkey is not repeated in the log")
        // One device: the passkey is plainly its own, nothing to tell.
        #expect(DevicePlanning.passkeyNotice(try Self.plans(["thermostat"], ["123456"]), passkeys: passkeys) == nil)
    }

    @Test func aDevicesOwnPasskeyWinsOverTheBareOne() throws {
        let given = ["111111", "thermostat=222222"]
        let plans = try Self.plans(["lock", "thermostat", "heart-rate"], given)
        #expect(plans.map(\.passkey) == ["111111", "222222", "111111"])
        let notice = try #require(DevicePlanning.passkeyNotice(plans, passkeys: try PasskeyOptions.parse(given)))
        #expect(notice.contains(": heart-rate now pairs with"), "\(notice)")
    }

    @Test func aFilesPasskeyStaysForTheDevicesTheCommandLineDoesNotName() throws {
        let file = try ConfigurationFile.parse("""
            devices:
              - device: lock
                passkey: "004321"
              - device: thermostat
            """, file: "bench.yaml")
        let plans = try Self.plans([], ["thermostat=222222"], file: file)
        #expect(plans.map(\.passkey) == ["004321", "222222"])
    }

    @Test(arguments: [
        (["12345"], "--passkey must be 6 digits, not '12345'"),
        (["lock=12x456"], "--passkey lock=…: a passkey is 6 digits"),
        (["=123456"], "needs the device before the `=`"),
        (["123456", "654321"], "--passkey DIGITS is given twice"),
        (["lock=123456", "lock=654321"], "--passkey lock=… is given twice"),
    ])
    func aMalformedPasskeyIsRefused(values: [String], message: String) {
        #expect {
            _ = try PasskeyOptions.parse(values)
        } throws: { error in
            (error as? PlanError)?.message.contains(message) ?? false
        }
    }

    @Test func aPasskeyForADeviceThatDoesNotRunIsRefused() {
        #expect {
            _ = try Self.plans(["thermostat"], ["lock=123456"])
        } throws: { error in
            (error as? PlanError)?.message == "--passkey lock=…: no such device runs (thermostat)"
        }
    }

    /// The passkey a central types (`gatt --passkey`, `chat --passkey`): 1 to 6 digits, 0 to 999999.
    @Test func aTypedPasskeyIsOneToSixDigitsUpTo999999() {
        #expect(CentralPairingOptions.parsePasskey("123456") == 123_456)
        #expect(CentralPairingOptions.parsePasskey("42") == 42 && CentralPairingOptions.parsePasskey("000000") == 0)
        for refused in ["", "1234567", "12a456", "-12345", "١٢٣", " 12345"] {
            #expect(CentralPairingOptions.parsePasskey(refused) == nil, "\(refused)")
        }
    }
}
