import BlemuATT
import BlemuCore
import BlemuGATT

/// Counters every device reports in its Diagnostics characteristic (Docs/REFERENCE.md, "The Diagnostics value").
public struct PeripheralStatistics {
    public var startedNanoseconds: UInt64 = 0
    public var connectionsTotal = 0
    public var attErrors = 0
    /// The last Error Response: request opcode, handle, error.
    public var lastError: (opcode: UInt8, handle: UInt16, error: ATTError)?
    public var diagnosticsReads = 0
    /// Links the controller opened beyond the device's limit, closed at once.
    public var linksRefused = 0
}

/// The Diagnostics service (Docs/REFERENCE.md, "UUIDs"), on every device: one dynamic, read-only
/// characteristic holding a JSON object. A fresh value is made for each read that starts at
/// offset 0; the Read Blob requests that continue it are served by the ATT server from the value
/// it kept, so `reads` counts long reads, not blobs.
final class DiagnosticsService {
    static let serviceUUID = BluetoothUUID("7d3c0001-9a5e-4d1a-8f6e-5c1b2d3e4f50")!
    static let characteristicUUID = BluetoothUUID("7d3c0002-9a5e-4d1a-8f6e-5c1b2d3e4f50")!

    let service: Service
    let characteristic: Characteristic

    /// The read handler is installed by the peripheral, which owns the counters.
    init() {
        let characteristic = Characteristic(Self.characteristicUUID, properties: [.read],
                                            descriptors: [.userDescription("blemu diagnostics (JSON)")],
                                            onRead: { _, _ in .unlikelyError })
        self.characteristic = characteristic
        service = Service(Self.serviceUUID) { characteristic }
    }

    static func render(_ fields: [(String, String)]) -> String {
        "{" + fields.map { "\"\($0.0)\":\($0.1)" }.joined(separator: ",") + "}"
    }
}

/// JSON encoding of the few value kinds the diagnostics use.
enum JSON {
    static func string(_ s: String) -> String { JSONString.literal(s) }
    static func optionalString(_ s: String?) -> String { s.map(string) ?? "null" }
    static func array(_ items: [String]) -> String { "[" + items.joined(separator: ",") + "]" }
    static func object(_ fields: [(String, String)]) -> String {
        "{" + fields.map { "\"\($0.0)\":\($0.1)" }.joined(separator: ",") + "}"
    }
}

/// The values of the Diagnostics characteristic.
extension Peripheral {
    /// The Diagnostics value: a JSON object that always fits the 512-octet attribute maximum
    /// (Vol 3, Part F, 3.2.9), so it is never cut into invalid JSON. The per-link objects come
    /// last; as many as fit are listed, and `links_left_out` counts the rest.
    func diagnosticsValue() -> [UInt8] {
        var fields = diagnosticsFields()
        guard let linksIndex = fields.firstIndex(where: { $0.0 == "links" }) else {
            return Array(DiagnosticsService.render(fields).utf8)
        }
        let links = linkObjects()
        fields.remove(at: linksIndex)
        // The value without links, with room for `,"links":[]` and `,"links_left_out":NN`.
        let base = DiagnosticsService.render(fields).utf8.count
        let budget = ValueLength.attributeMaximum - base - ",\"links\":[]".utf8.count - ",\"links_left_out\":32".utf8.count
        var listed: [String] = []
        var used = 0
        for link in links {
            let cost = link.utf8.count + (listed.isEmpty ? 0 : 1)
            guard used + cost <= budget else { break }
            listed.append(link)
            used += cost
        }
        fields.append(("links", JSON.array(listed)))
        if listed.count < links.count {
            fields.append(("links_left_out", "\(links.count - listed.count)"))
        }
        return Array(DiagnosticsService.render(fields).utf8)
    }

    private func linkObjects() -> [String] {
        connections.values.sorted { $0.handle < $1.handle }.map { c in
            JSON.object([("handle", "\(c.handle)"), ("peer", JSON.string(c.peer.address.description)),
                         ("mtu", "\(c.bearer.mtu)"), ("interval_ms", "\(Double(c.parameters.interval) * 1.25)")])
        }
    }

    func diagnosticsFields() -> [(String, String)] {
        let now = scheduler.nowNanoseconds
        let uptime = statistics.startedNanoseconds == 0 ? 0 : (now &- statistics.startedNanoseconds) / 1_000_000
        return [
            ("device", JSON.string(type(of: device).deviceName)),
            // Bounded, so the links always have room in 512 octets.
            ("name", JSON.string(String(configuration.name.prefix(64)))),
            ("firmware", JSON.string("blemu \(configuration.firmware)")),
            ("address", JSON.string(address.description)),
            ("controller", JSON.string(String(configuration.controller.prefix(64)))),
            ("uptime_ms", "\(uptime)"),
            ("connections", "\(connections.count)"),
            ("connections_total", "\(statistics.connectionsTotal)"),
            // Counted by each link's session, not by the device per request.
            ("att_requests", "\(links.requestsAnswered)"),
            ("att_errors", "\(statistics.attErrors)"),
            ("last_error", JSON.optionalString(statistics.lastError.map { opcode, handle, error in
                "\(error) for opcode \(Hex.byte(opcode)) on handle \(Hex.word(handle))"
            })),
            ("reads", "\(statistics.diagnosticsReads)"),
            ("links_refused", "\(statistics.linksRefused)"),
            ("log_lines_left_out", "\(links.logLinesLeftOut + requestLog.leftOutTotal + host.logLinesLeftOut)"),
            ("links", "[]"),
        ]
    }
}
