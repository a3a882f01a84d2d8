/// How a control client names a running device (Docs/CONTROL.md, "Naming a device"):
///
/// - `heart-rate#N`: the Nth `heart-rate` on the command line (1-based), always unique;
/// - `heart-rate`: the device name, when one copy of that device runs;
/// - its local name (`blemu Heart Rate 2`, or what `--name` made), exactly.
///
/// A name that fits several devices is refused with the choices; so is a name that fits none.
/// `list` and `watch` take several devices too (`select`): a pattern (`DevicePattern`) or a
/// fleet (`fleet:NAME`); the commands that change a device take one, and are told so.
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
        /// The fleet it is a member of, as `fleet:` takes it (the fleet's `fleet:` name in the
        /// file, else its number in `fleets:` from 1); nil for any other device.
        public var fleet: String? = nil

        /// The shortest name that is always this device: `heart-rate`, or `heart-rate#2` when
        /// several copies run.
        public var ref: String { copies == 1 ? device : "\(device)#\(copy)" }

        func matches(_ name: String) -> Bool {
            name == device || name == localName || name == "\(device)#\(copy)"
        }
    }

    public let entries: [Entry]

    /// `devices` in command-line order: (device name, local name); `fleets`, by the same
    /// index, the fleet of each (nil, or missing at the end: none).
    public init(_ devices: [(device: String, localName: String)], fleets: [String?] = []) {
        var totals: [String: Int] = [:]
        for device in devices { totals[device.device, default: 0] += 1 }
        var seen: [String: Int] = [:]
        entries = devices.enumerated().map { index, device in
            seen[device.device, default: 0] += 1
            var entry = Entry(device: device.device, localName: device.localName, copy: seen[device.device] ?? 1,
                              copies: totals[device.device] ?? 1)
            entry.fleet = index < fleets.count ? fleets[index] : nil
            return entry
        }
    }

    /// What names a fleet: `fleet:thermometers`, `fleet:2`.
    public static let fleetPrefix = "fleet:"

    /// At most this many devices are named in an error (a name that fits none, or several);
    /// the rest are counted, so a thousand-device fleet does not make a 40 KB reply.
    static let namedInErrors = 8

    /// The index of the one device `name` names, or why there is none.
    public func resolve(_ name: String) -> Result<Int, ControlRequestError> {
        let matching = entries.indices.filter { entries[$0].matches(name) }
        if matching.count == 1 { return .success(matching[0]) }
        if matching.isEmpty {
            let known = entries.isEmpty ? "no devices run" : "devices: " + describe(Array(entries.indices))
            return .failure(ControlRequestError(id: nil, "no device \(quoted(name)); \(known)"))
        }
        return .failure(ControlRequestError(id: nil, "\(quoted(name)) names \(matching.count) devices: \(describe(matching)); "
                                            + "give DEVICE#N or the local name"))
    }

    /// The index of the one device `name` names, for a command that acts on one (`set`,
    /// `fault`, …): as `resolve`, but a pattern or a fleet that is no device's name is refused
    /// as such, since acting on many devices at once by a slip of a `*` is not offered.
    public func resolveOne(_ name: String, command: String) -> Result<Int, ControlRequestError> {
        let resolved = resolve(name)
        guard case .failure = resolved else { return resolved }
        let several = DevicePattern.isPattern(name) ? "is a pattern" : fleetMembers(name) != nil ? "is a fleet" : nil
        guard let several, !entries.contains(where: { $0.matches(name) }) else { return resolved }
        return .failure(ControlRequestError(id: nil, "\(quoted(name)) \(several): \(command) acts on one device; "
                                            + "patterns and fleets are for list and watch (a device whose name holds *, ? or [ is named by DEVICE#N)"))
    }

    /// The devices `text` names for `list` and `watch`, in command-line order: a fleet
    /// (`fleet:NAME`, all its members), a pattern (`DevicePattern`: the devices whose device
    /// name, `DEVICE#N` or local name it fits), or one device as `resolve` takes it. A pattern
    /// or fleet that names no device is refused, with the reason.
    public func select(_ text: String) -> Result<[Int], ControlRequestError> {
        if let members = fleetMembers(text), !entries.contains(where: { $0.matches(text) }) {
            return .success(members)
        }
        if text.hasPrefix(Self.fleetPrefix), !DevicePattern.isPattern(text), !entries.contains(where: { $0.matches(text) }) {
            let fleets = fleetReferences
            let known = fleets.isEmpty ? "no fleets run (a config file's `fleets:`)"
                : "fleets: " + fleets.prefix(Self.namedInErrors).map { "fleet:\($0.ref) (\($0.members) devices)" }.joined(separator: ", ")
                    + (fleets.count > Self.namedInErrors ? " and \(fleets.count - Self.namedInErrors) more" : "")
            return .failure(ControlRequestError(id: nil, "no fleet \(quoted(String(text.dropFirst(Self.fleetPrefix.count)))); \(known)"))
        }
        guard DevicePattern.isPattern(text) else { return resolve(text).map { [$0] } }
        switch DevicePattern.parse(text) {
        case .failure(let error): return .failure(error)
        case .success(let pattern):
            let matching = entries.indices.filter { index in
                let entry = entries[index]
                return pattern.matches(entry.localName) || pattern.matches(entry.device) || pattern.matches("\(entry.device)#\(entry.copy)")
            }
            guard !matching.isEmpty else {
                let known = entries.isEmpty ? "no devices run" : "devices: " + describe(Array(entries.indices))
                return .failure(ControlRequestError(id: nil, "pattern \(quoted(text)) fits no device's name; \(known)"))
            }
            return .success(matching)
        }
    }

    /// The members of the fleet `fleet:REF` names, in command-line order; nil when it names none.
    func fleetMembers(_ text: String) -> [Int]? {
        guard text.hasPrefix(Self.fleetPrefix) else { return nil }
        let ref = text.dropFirst(Self.fleetPrefix.count)
        let members = entries.indices.filter { entries[$0].fleet.map { $0 == ref } ?? false }
        return members.isEmpty ? nil : members
    }

    /// Each fleet's reference and its members, in the order they first come.
    var fleetReferences: [(ref: String, members: Int)] {
        var order: [String] = []
        var members: [String: Int] = [:]
        for case let fleet? in entries.map(\.fleet) {
            if members[fleet] == nil { order.append(fleet) }
            members[fleet, default: 0] += 1
        }
        return order.map { ($0, members[$0] ?? 0) }
    }

    /// `heart-rate#2 ("blemu Heart Rate 2")`, … for the first few of `indices`, the rest counted.
    private func describe(_ indices: [Int]) -> String {
        indices.prefix(Self.namedInErrors).map { describe(entries[$0]) }.joined(separator: ", ")
            + (indices.count > Self.namedInErrors ? " and \(indices.count - Self.namedInErrors) more" : "")
    }

    /// `heart-rate#2 ("blemu Heart Rate 2")`.
    private func describe(_ entry: Entry) -> String {
        "\(entry.copies == 1 ? entry.device : "\(entry.device)#\(entry.copy)") (\"\(entry.localName)\")"
    }
}
