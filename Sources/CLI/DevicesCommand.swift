import ArgumentParser
import BlemuCore
import BlemuDevice
import BlemuDevices
import BlemuGATT
import BlemuHost

struct DevicesCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "devices",
        abstract: "List the device modules and every service each one serves (GAP, GATT and Diagnostics included); broadcasters serve none.")

    func run() throws {
        for entry in DeviceRegistry.all {
            let device = entry.make()
            print("\(entry.name) — \(entry.summary)")
            if device is BroadcastingDevice {
                // Non-connectable: no central ever reaches a database, so none is listed.
                let settings = device.settings.map(\.key).joined(separator: ", ")
                print("  broadcasts only (non-connectable, no GATT services); settings: \(settings)")
                continue
            }
            print("  advertises as \"\(device.profile.defaultName)\"")
            // The services as the stack serves them, in handle order: what a central discovers.
            let services: [Service]
            do {
                services = try Peripheral.servedServices(of: device)
            } catch {
                throw RuntimeFailure("device \(entry.name): its GATT database is refused: \(error)")
            }
            for service in services {
                var notes: [String] = []
                if let name = Self.serviceNames[service.uuid] { notes.append(name) }
                if Peripheral.isAddedByStack(service.uuid) { notes.append("on every device") }
                print("  service \(service.uuid)" + (notes.isEmpty ? "" : " (\(notes.joined(separator: ", ")))"))
                for c in service.characteristics {
                    var kinds: [String] = []
                    if c.properties.contains(.read) { kinds.append(c.cachedValue == nil ? "read (dynamic)" : "read (cached)") }
                    if c.properties.contains(.write) { kinds.append("write") }
                    if c.properties.contains(.writeWithoutResponse) { kinds.append("write-without-response") }
                    if c.properties.contains(.notify) { kinds.append("notify") }
                    if c.properties.contains(.indicate) { kinds.append("indicate") }
                    // A standard name, else the device's own User Description (0x2901).
                    let described = c.descriptors.first { $0.uuid == GATTType.userDescription }
                        .flatMap { String(validating: $0.value, as: UTF8.self) }
                    let name = (Self.characteristicNames[c.uuid] ?? described).map { " (\($0))" } ?? ""
                    print("    characteristic \(c.uuid)\(name): \(kinds.joined(separator: ", "))")
                }
            }
        }
    }

    /// Names for the services blemu serves (Assigned Numbers 3.4.2, and blemu's own).
    static let serviceNames: [BluetoothUUID: String] = [
        BluetoothUUID(0x1800): "GAP", BluetoothUUID(0x1801): "GATT", BluetoothUUID(0x180A): "Device Information",
        BluetoothUUID(0x180D): "Heart Rate", BluetoothUUID(0x180F): "Battery", BluetoothUUID(0x181A): "Environmental Sensing",
        Peripheral.diagnosticsServiceUUID: "Diagnostics",
        BluetoothUUID("7d3c0100-9a5e-4d1a-8f6e-5c1b2d3e4f50")!: "Thermostat",
        BluetoothUUID("7d3c0200-9a5e-4d1a-8f6e-5c1b2d3e4f50")!: "Lock",
    ]

    /// Names for the characteristics blemu serves (Assigned Numbers 3.8.1, and blemu's own).
    static let characteristicNames: [BluetoothUUID: String] = [
        BluetoothUUID(0x2A00): "Device Name", BluetoothUUID(0x2A01): "Appearance",
        BluetoothUUID(0x2A04): "Peripheral Preferred Connection Parameters", BluetoothUUID(0x2A05): "Service Changed",
        BluetoothUUID(0x2B29): "Client Supported Features", BluetoothUUID(0x2B2A): "Database Hash",
        BluetoothUUID(0x2B3A): "Server Supported Features",
        BluetoothUUID(0x2A19): "Battery Level",
        BluetoothUUID(0x2A24): "Model Number String", BluetoothUUID(0x2A25): "Serial Number String",
        BluetoothUUID(0x2A26): "Firmware Revision String", BluetoothUUID(0x2A27): "Hardware Revision String",
        BluetoothUUID(0x2A28): "Software Revision String", BluetoothUUID(0x2A29): "Manufacturer Name String",
        BluetoothUUID(0x2A37): "Heart Rate Measurement", BluetoothUUID(0x2A38): "Body Sensor Location",
        BluetoothUUID(0x2A39): "Heart Rate Control Point",
        BluetoothUUID(0x2A6E): "Temperature", BluetoothUUID(0x2A6F): "Humidity",
        Peripheral.diagnosticsCharacteristicUUID: "Diagnostics, JSON",
    ]
}
