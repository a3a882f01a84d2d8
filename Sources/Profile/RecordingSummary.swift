import BlemuATT
import BlemuCore
import BlemuGATT
import BlemuGATTClient
import BlemuHost

extension GATTProfile {
    /// What `blemu gatt ... record` says on stderr once it has written this recording: what it
    /// holds (services, characteristics, the values notified and indicated), and where a twin
    /// made from it will not do what the original did — a subscription that caught nothing or
    /// failed, a value refused for want of security and never read (the twin keeps the
    /// permission and serves no value), a key size the twin does not ask for, blemu's
    /// Diagnostics service kept with values that no longer change. `refusals`: the ATT error
    /// codes each handle answered (`GATTWorkflow.Dump.refusals`); `notSubscribed`: the value
    /// handles whose subscription failed, and why.
    public func recordingSummary(refusals: [UInt16: [UInt8]], notSubscribed: [UInt16: GATTClientError]) -> [String] {
        let characteristics = services.flatMap(\.characteristics)
        let events = recording?.events ?? []
        let seconds = recording.map { Self.seconds($0.duration) } ?? "0"
        func count(_ number: Int, _ one: String, _ many: String) -> String { "\(number) \(number == 1 ? one : many)" }
        var lines = ["record: \(count(services.count, "service", "services")), \(count(characteristics.count, "characteristic", "characteristics")), "
                     + "\(count(events.count, "notification or indication", "notifications and indications")) caught in \(seconds) s"]
        var caught: [Int: Int] = [:]
        for event in events { caught[event.handle, default: 0] += 1 }
        // The security refusals (Vol 3, Part C, 10.3.2): Insufficient Authentication,
        // Insufficient Encryption, Encryption Key Size Too Short.
        let securityCodes: Set<UInt8> = [0x05, 0x0F, 0x0C]
        for service in services {
            for characteristic in service.characteristics {
                guard let valueHandle = characteristic.valueHandle else { continue }
                let name = "\(characteristic.uuid.visible) (service \(service.uuid.visible)) at \(Hex.word(UInt16(clamping: valueHandle)))"
                let notifies = characteristic.properties.contains("notify") || characteristic.properties.contains("indicate")
                let hasCCCD = (characteristic.descriptors ?? []).contains { Self.uuid($0.uuid) == GATTType.clientConfiguration }
                if notifies && hasCCCD {
                    if let error = notSubscribed[UInt16(clamping: valueHandle)] {
                        var why = "warning: \(name) could not be subscribed (\(error)): nothing of it is recorded"
                        if case .att(let refusal, _) = error, securityCodes.contains(refusal.rawValue) {
                            why += "; the twin lets a central subscribe without that security"
                        }
                        lines.append("record: " + why)
                    } else if caught[valueHandle] == nil, Self.uuid(characteristic.uuid) != GATTType.serviceChanged {
                        // (Service Changed indicates only when the database changes: silence is its normal.)
                        lines.append("record: warning: \(name) was subscribed to but sent nothing in \(seconds) s: its twin sends nothing either")
                    }
                }
                let codes = Set(refusals[UInt16(clamping: valueHandle)] ?? [])
                if characteristic.value == nil, !codes.isDisjoint(with: securityCodes) {
                    let kept = (characteristic.permissions ?? []).joined(separator: ", ")
                    lines.append("record: warning: \(name) was refused for want of security and not read: the twin keeps the permission"
                                 + " (\(kept)) and serves no value (record with --pair, or with a bond in --state-dir, to read it)")
                }
                if codes.contains(0x0C) {
                    lines.append("record: warning: \(name) wanted a longer encryption key (0x0C): the twin asks for encryption, not for"
                                 + " that length (give it \"minimumKeySize\", 7 to 16, by hand)")
                }
            }
        }
        if services.contains(where: { Self.uuid($0.uuid) == Peripheral.diagnosticsServiceUUID }) {
            lines.append("record: the Diagnostics service (\(Peripheral.diagnosticsServiceUUID)) is kept as recorded: its values are frozen as"
                         + " read now and do not follow the twin's own links and counters")
        }
        return lines
    }

    /// "10", "2.5": seconds as a person writes them.
    private static func seconds(_ value: Double) -> String {
        value == value.rounded() && abs(value) < 1e9 ? String(Int(value)) : String(value)
    }
}
