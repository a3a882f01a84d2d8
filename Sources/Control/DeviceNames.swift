/// How a control client names a running device (Docs/CONTROL.md, "Naming a device"):
///
/// - `heart-rate#N`: the Nth `heart-rate` on the command line (1-based), always unique;
/// - `heart-rate`: the device name, when one copy of that device runs;
/// - its local name (`blemu Heart Rate 2`, or what `--name` made), exactly.
///
/// A name that fits several devices is refused with the choices; so is a name that fits none.
public struct DeviceNames: Sendable {
    public struct Entry: Equatable, Sendable {
        /// The device name (`heart-rate`).
        public let device: String
        /// The local name, advertised.
        public let localName: String
        /// Which copy of `device`, 1-based, in command-line order.
        public let copy: Int
        /// How many copies of `device` run.
        public let copies: Int

        /// The shortest name that is always this device: `heart-rate`, or `heart-rate#2` when
        /// several copies run.
        public var ref: String { copies == 1 ? device : "\(device)#\(copy)" }

        func matches(_ name: String) -> Bool {
            name == device || name == localName || name == "\(device)#\(copy)"
        }
    }

    public let entries: [Entry]

    /// `devices` in command-line order: (device name, local name).
    public init(_ devices: [(device: String, localName: String)]) {
        var totals: [String: Int] = [:]
        for device in devices { totals[device.device, default: 0] += 1 }
        var seen: [String: Int] = [:]
        entries = devices.map { device in
            seen[device.device, default: 0] += 1
            return Entry(device: device.device, localName: device.localName, copy: seen[device.device] ?? 1,
                         copies: totals[device.device] ?? 1)
        }
    }

    /// The index of the one device `name` names, or why there is none.
    public func resolve(_ name: String) -> Result<Int, ControlRequestError> {
        let matching = entries.indices.filter { entries[$0].matches(name) }
        if matching.count == 1 { return .success(matching[0]) }
        if matching.isEmpty {
            let known = entries.isEmpty ? "no devices run" : "devices: " + entries.map(describe).joined(separator: ", ")
            return .failure(ControlRequestError(id: nil, "no device \(quoted(name)); \(known)"))
        }
        let choices = matching.map { describe(entries[$0]) }.joined(separator: ", ")
        return .failure(ControlRequestError(id: nil, "\(quoted(name)) names \(matching.count) devices: \(choices); "
                                            + "give DEVICE#N or the local name"))
    }

    /// `heart-rate#2 ("blemu Heart Rate 2")`.
    private func describe(_ entry: Entry) -> String {
        "\(entry.copies == 1 ? entry.device : "\(entry.device)#\(entry.copy)") (\"\(entry.localName)\")"
    }
}
