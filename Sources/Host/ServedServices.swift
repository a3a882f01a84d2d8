import BlemuCore
import BlemuDevice
import BlemuGATT
import Logging

/// What a device serves, read back from the database the stack builds for it, so that a
/// listing (`blemu devices`) is what a central discovers and cannot drift from it.
extension Peripheral {
    /// The Diagnostics service every device has (Docs/REFERENCE.md, "UUIDs").
    public static let diagnosticsServiceUUID = DiagnosticsService.serviceUUID
    /// Its one characteristic: read-only, dynamic, a UTF-8 JSON object.
    public static let diagnosticsCharacteristicUUID = DiagnosticsService.characteristicUUID

    /// The services a peripheral running `device` serves, in handle order: GAP 0x1800, GATT
    /// 0x1801, the device's own, Diagnostics. They come from the database of a `Peripheral`
    /// built by the same initializer `blemu run` uses, on a controller that is never started:
    /// nothing is sent, no timer is set, and the device is not started. Give a fresh device: its
    /// characteristics get the handles of this database.
    public static func servedServices(of device: Device, name: String? = nil) throws(GATTDatabaseError) -> [Service] {
        let configuration = PeripheralConfiguration(name: name ?? device.profile.defaultName, controller: "none")
        let quiet = Logger(label: "blemu.services") { _ in SwiftLogNoOpLogHandler() }
        let peripheral = try Peripheral(device: device, configuration: configuration, scheduler: ManualScheduler(),
                                        logger: quiet) { _, _ in false }
        return peripheral.database.services
    }

    /// Whether the stack adds `service` to every device (GAP, GATT, Diagnostics) rather than the
    /// device declaring it.
    public static func isAddedByStack(_ service: BluetoothUUID) -> Bool {
        service == GATTType.gapService || service == GATTType.gattService || service == diagnosticsServiceUUID
    }
}
