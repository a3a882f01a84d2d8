import BlemuCore
import Testing

@testable import blemu

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
