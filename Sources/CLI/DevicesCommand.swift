import ArgumentParser
import BlemuCore
import BlemuDevice
import BlemuDevices
import BlemuGATT
import BlemuGATTText
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
                if let name = GATTValueText.ownServiceNames[service.uuid] { notes.append(name) }
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
                    let name = (GATTValueText.ownCharacteristicNames[c.uuid] ?? described).map { " (\($0))" } ?? ""
                    print("    characteristic \(c.uuid)\(name): \(kinds.joined(separator: ", "))")
                }
            }
        }
    }
}
