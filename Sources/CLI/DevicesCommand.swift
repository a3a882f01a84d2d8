import ArgumentParser
import BlemuDevices
import BlemuGATT

struct DevicesCommand: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "devices",
                                                    abstract: "List the device modules and their services.")

    func run() throws {
        for entry in DeviceRegistry.all {
            let device = entry.make()
            print("\(entry.name) — \(entry.summary)")
            print("  advertises as \"\(device.profile.defaultName)\"")
            for service in device.services {
                print("  service \(service.uuid)")
                for c in service.characteristics {
                    var kinds: [String] = []
                    if c.properties.contains(.read) { kinds.append(c.cachedValue == nil ? "read (dynamic)" : "read (cached)") }
                    if c.properties.contains(.write) { kinds.append("write") }
                    if c.properties.contains(.writeWithoutResponse) { kinds.append("write-without-response") }
                    if c.properties.contains(.notify) { kinds.append("notify") }
                    if c.properties.contains(.indicate) { kinds.append("indicate") }
                    print("    characteristic \(c.uuid): \(kinds.joined(separator: ", "))")
                }
            }
            print("  service 7d3c0001-9a5e-4d1a-8f6e-5c1b2d3e4f50 (diagnostics, on every device)")
        }
    }
}
