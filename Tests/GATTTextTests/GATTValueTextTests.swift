import BlemuAssignedNumbers
import BlemuCentral
import BlemuCore
import BlemuDevices
@testable import BlemuGATTClient
import BlemuGATTText
import Testing

/// How `blemu gatt` shows a value: known characteristics decoded by the devices' own decoders
/// (`EnvironmentalSensing`), the rest as text or hex.
@Suite struct GATTValueTextTests {
    @Test func temperatureAndHumidityAreDecodedAsTheDevicesEncodeThem() {
        let uuid = { (value: UInt16) in BluetoothUUID(value) }
        #expect(GATTValueText.decoded(uuid: uuid(0x2A6E), value: [0x0A, 0x09]) == "23.14 °C")
        #expect(GATTValueText.decoded(uuid: uuid(0x2A6E), value: [0x18, 0xFC]) == "-10.0 °C")
        // 0x8000: "value is not known" (GSS), not -327.68 °C.
        #expect(GATTValueText.decoded(uuid: uuid(0x2A6E), value: [0x00, 0x80]) == "unknown")
        #expect(GATTValueText.decoded(uuid: uuid(0x2A6E), value: [0x00]) == nil)
        #expect(GATTValueText.decoded(uuid: uuid(0x2A6F), value: [0x10, 0x27]) == "100.0 %")
        #expect(GATTValueText.decoded(uuid: uuid(0x2A6F), value: [0x10, 0x27, 0x00]) == nil)
        #expect(GATTValueText.describe(uuid: uuid(0x2A6E), value: [0x0A, 0x09]) == "23.14 °C  [0a09]")
    }
}

/// Names beside the UUIDs, blemu's devices' values, values by their Presentation Format, and
/// the dump and JSON that show them (issue 23, "Output people can read").
@Suite struct ReadableGATTOutputTests {
    let target = ThermostatDevice.targetUUID
    /// The thermostat's target's Presentation Format as it serves it: sint16, exponent -2, °C.
    let targetFormat = PresentationFormat([0x0E, 0xFE, 0x2F, 0x27, 0x01, 0x00, 0x00])!

    @Test func standardAndBlemusOwnUUIDsAreNamed() {
        #expect(GATTValueText.serviceName(BluetoothUUID(0x180D)) == " (Heart Rate)")
        #expect(GATTValueText.serviceName(BluetoothUUID(0x1800)) == " (Generic Access)")
        #expect(GATTValueText.serviceName(ThermostatDevice.serviceUUID) == " (Thermostat)")
        #expect(GATTValueText.serviceName(BluetoothUUID("11111111-2222-3333-4444-555555555555")!) == "")
        #expect(GATTValueText.characteristicName(BluetoothUUID(0x2A37)) == " (Heart Rate Measurement)")
        // A characteristic of nobody's table is named by its own User Description, made visible.
        #expect(GATTValueText.characteristicName(BluetoothUUID("11111111-2222-3333-4444-555555555555")!,
                                                 userDescription: Array("Speed\u{1B}[2J".utf8)) == " (Speed\\x1b[2J)")
        #expect(GATTValueText.descriptorName(BluetoothUUID(0x2902)) == " (Client Characteristic Configuration)")
        #expect(GATTValueText.descriptorName(BluetoothUUID(0x2904)) == " (Characteristic Presentation Format)")
        #expect(GATTValueText.descriptorName(BluetoothUUID(0x2906)) == " (Valid Range)")
        #expect(GATTValueText.appearance(0x0601) == "0x0601 (HVAC: Thermostat)")
    }

    @Test func theThermostatsTargetIsDecodedNotHex() {
        // It printed `ca08`: now degrees, by its Presentation Format or by the device's own decoder.
        #expect(GATTValueText.describe(uuid: target, value: [0xCA, 0x08], format: targetFormat) == "22.50 °C  [ca08]")
        #expect(GATTValueText.describe(uuid: target, value: [0xCA, 0x08]) == "22.50 °C  [ca08]")
        // A characteristic blemu does not know, decoded by its Presentation Format alone.
        let other = BluetoothUUID("11111111-2222-3333-4444-555555555555")!
        #expect(GATTValueText.describe(uuid: other, value: [0x2C, 0x01], format: PresentationFormat([0x06, 0x00, 0x03, 0x27, 0x01, 0, 0])!)
                == "300 s  [2c01]")
        #expect(GATTValueText.describe(uuid: other, value: [0x2C, 0x01, 0x00], format: PresentationFormat([0x06, 0x00, 0x03, 0x27, 0x01, 0, 0])!)
                == "2c0100")
    }

    @Test func theLocksAndThermostatsValuesAndIndicationsAreDecoded() {
        #expect(GATTValueText.decoded(uuid: ThermostatDevice.modeUUID, value: [1]) == "heat")
        #expect(GATTValueText.decoded(uuid: ThermostatDevice.heatingStateUUID, value: [2]) == "cooling")
        #expect(GATTValueText.decoded(uuid: LockDevice.lockStateUUID, value: [1]) == "locked")
        #expect(GATTValueText.decoded(uuid: LockDevice.lockStateUUID, value: [9]) == nil)
        #expect(GATTValueText.decoded(uuid: LockDevice.relockDelayUUID, value: [0x1E, 0x00]) == "30 s")
        #expect(GATTValueText.decoded(uuid: LockDevice.relockDelayUUID, value: [0, 0]) == "off")
        #expect(GATTValueText.describe(uuid: LockDevice.controlPointUUID, value: [0x80, 0x02, 0x01]) == "unlock: success  [800201]")
        #expect(GATTValueText.decoded(uuid: LockDevice.controlPointUUID, value: [0x80, 0x01, 0x02]) == "lock: wrong PIN")
        #expect(GATTValueText.decoded(uuid: LockDevice.controlPointUUID, value: [0x80, 0x07, 0x09]) == "opcode 0x07: result 0x09")
        #expect(GATTValueText.decoded(uuid: LockDevice.controlPointUUID, value: [0x80, 0x01]) == nil)
    }

    @Test func standardDescriptorsAndValuesAreDecoded() {
        #expect(GATTValueText.decoded(uuid: BluetoothUUID(0x2902), value: [0x01, 0x00]) == "0x0001 (notifications)")
        #expect(GATTValueText.decoded(uuid: BluetoothUUID(0x2902), value: [0x00, 0x00]) == "0x0000 (off)")
        #expect(GATTValueText.decoded(uuid: BluetoothUUID(0x2902), value: [0x03, 0x00]) == "0x0003 (notifications, indications)")
        #expect(GATTValueText.decoded(uuid: BluetoothUUID(0x2904), value: [0x0E, 0xFE, 0x2F, 0x27, 0x01, 0x00, 0x00])
                == "format 0x0e, exponent -2, unit °C")
        #expect(GATTValueText.decoded(uuid: BluetoothUUID(0x2A01), value: [0x01, 0x06]) == "0x0601 (HVAC: Thermostat)")
        // A DIS string with a control character: text with it made visible, not hex.
        #expect(GATTValueText.decoded(uuid: BluetoothUUID(0x2A29), value: Array("bl\u{1B}emu".utf8)) == "\"bl\\x1bemu\"")
        // Valid Range in the characteristic's format: both bounds.
        #expect(GATTValueText.validRange([0xF4, 0x01, 0xAC, 0x0D], of: target, format: targetFormat) == "5.00 °C to 35.00 °C")
        #expect(GATTValueText.validRange([0xF4, 0x01, 0xAC], of: target, format: targetFormat) == nil)
    }

    @Test func aTimestampIsLocalForPeopleAndUTCForScripts() {
        let time = Timestamp(seconds: 1_764_171_245, nanoseconds: 7_000_000)
        #expect(time.iso8601 == "2025-11-26T15:34:05.007Z")
        #expect(time.clock.count == 12 && time.clock.hasSuffix(":05.007"))
    }

    func thermostatDump() -> ([RemoteService], [UInt16: Result<[UInt8], GATTClientError>]) {
        let characteristic = RemoteCharacteristic(
            characteristic: DiscoveredCharacteristic(uuid: target, properties: [.read, .write, .notify],
                                                     declarationHandle: 0x0020, valueHandle: 0x0021, endHandle: 0x0025),
            descriptors: [DiscoveredDescriptor(uuid: BluetoothUUID(0x2902), handle: 0x0022),
                          DiscoveredDescriptor(uuid: BluetoothUUID(0x2901), handle: 0x0023),
                          DiscoveredDescriptor(uuid: BluetoothUUID(0x2904), handle: 0x0024),
                          DiscoveredDescriptor(uuid: BluetoothUUID(0x2906), handle: 0x0025)])
        let services = [RemoteService(service: DiscoveredService(uuid: ThermostatDevice.serviceUUID, handles: 0x001F...0x0025),
                                      includes: [], characteristics: [characteristic])]
        let values: [UInt16: Result<[UInt8], GATTClientError>] = [
            0x0021: .success([0xCA, 0x08]), 0x0022: .success([0x00, 0x00]), 0x0023: .success(Array("Target temperature".utf8)),
            0x0024: .success([0x0E, 0xFE, 0x2F, 0x27, 0x01, 0x00, 0x00]), 0x0025: .success([0xF4, 0x01, 0xAC, 0x0D]),
        ]
        return (services, values)
    }

    let advertisement = Advertisement(advertiser: LEAddress(BluetoothAddress("C4:00:00:00:00:01")!, isRandom: true),
                                      rssi: -40, isConnectable: true, lastSeen: 0)

    @Test func aDumpNamesEverythingAndDecodesByThePresentationFormat() {
        let (services, values) = thermostatDump()
        let lines = GATTValueText.dumpLines(advertisement: advertisement, mtu: 247, services: services, values: values)
        #expect(lines.dropFirst().map { $0 } == [
            "service 7d3c0100-9a5e-4d1a-8f6e-5c1b2d3e4f50 (Thermostat) handles 0x001f-0x0025",
            "  characteristic 7d3c0101-9a5e-4d1a-8f6e-5c1b2d3e4f50 (Target temperature) handle 0x0021 [read write notify]: 22.50 °C  [ca08]",
            "    descriptor 2902 (Client Characteristic Configuration) handle 0x0022: 0x0000 (off)  [0000]",
            "    descriptor 2901 (Characteristic User Description) handle 0x0023: \"Target temperature\"",
            "    descriptor 2904 (Characteristic Presentation Format) handle 0x0024: format 0x0e, exponent -2, unit °C  [0efe2f27010000]",
            "    descriptor 2906 (Valid Range) handle 0x0025: 5.00 °C to 35.00 °C  [f401ac0d]",
        ])
    }

    @Test func theDumpsJSONCarriesNamesAndDecodedValues() {
        let (services, values) = thermostatDump()
        let json = GATTValueText.dumpJSON(advertisement: advertisement, services: services, values: values).encoded
        #expect(json.contains(#""uuid":"7d3c0100-9a5e-4d1a-8f6e-5c1b2d3e4f50","name":"Thermostat""#))
        #expect(json.contains(#""name":"Target temperature","handle":"0x0021","properties":["read","write","notify"],"value":"ca08","decoded":"22.50 °C""#))
        #expect(json.contains(#""uuid":"2906","name":"Valid Range","handle":"0x0025","value":"f401ac0d","decoded":"5.00 °C to 35.00 °C""#))
    }

    @Test func oneValuesJSONHasItsNameDecodingAndTime() {
        let json = GATTValueText.json(uuid: BluetoothUUID(0x2A19), handle: 0x0030, value: [0x5F],
                                      time: Timestamp(seconds: 0, nanoseconds: 5_000_000)).encoded
        #expect(json == #"{"uuid":"2A19","name":"Battery Level","handle":"0x0030","value":"5f","decoded":"95 %","time":"1970-01-01T00:00:00.005Z"}"#)
        #expect(GATTValueText.writtenJSON(target, 0x0021, [0xCA, 0x08], withoutResponse: false).encoded
                == #"{"ok":true,"uuid":"7d3c0101-9a5e-4d1a-8f6e-5c1b2d3e4f50","handle":"0x0021","written":"ca08","without_response":false}"#)
    }
}
