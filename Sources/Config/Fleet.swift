import BlemuCore
import BlemuHCI
import BlemuTransport

/// One `fleets:` entry of a configuration file: `count` devices of one kind, each an ordinary
/// `DeviceConfiguration` once expanded, its name and address from patterns and its settings drawn
/// from ranges, all from `seed`: the same file gives the same fleet on every run and machine.
///
/// ```yaml
/// fleets:
///   - device: bthome-thermometer
///     count: 1000
///     seed: 7
///     name: "Tag {index:04}"                  # Tag 0001 ... Tag 1000
///     settings:
///       temperature: { around: 21.5, spread: 2 }
///       battery: { min: 60, max: 100 }
///     advertising: { jitter_ms: 10 }
///     start_spread_s: 5
/// ```
///
/// Members are numbered from 1 (`{index}`); member N's values depend on the seed, the device
/// kind, N and the value's key only, so adding a setting or a member changes no other value.
public struct FleetConfiguration: Sendable, Equatable {
    /// The device kind (a registry name) or a GATT profile's path, as a device's `device:`.
    public var device: String
    public var count: Int
    public var seed: UInt64
    public var name: FleetPattern
    /// The address pattern; nil: a static random address drawn from the seed (`FleetDraw.address`).
    public var address: FleetPattern?
    /// `fleets[N]`.
    public var path: String
    /// What the control socket calls it (`fleet:REF`): its `fleet:` name, else its number in
    /// `fleets:` from 1.
    public var reference: String = ""
    /// `FILE:LINE` of the entry.
    public var location: String
    /// The members' settings with every range at its low end, then at its high end, in file
    /// order (each with the location of its range): tried on a device of the kind before anything
    /// starts, so a range reaching past what the device takes is refused whatever the seed draws.
    public var lowestSettings: [DeviceConfiguration.Setting] = []
    public var highestSettings: [DeviceConfiguration.Setting] = []
    /// Members start within this of the run's start (`start_spread_s`).
    public var startSpread: Duration = .zero
    /// Each member's advertising intervals are lengthened by 0 to this many 0.625 ms units (`jitter_ms`).
    public var advertisingJitter: UInt16 = 0

    /// `fleets[N] member I`: where a member's values come from, in errors.
    public func memberPath(_ index: Int) -> String { "\(path) member \(index)" }
}

/// A name or address pattern: text with `{index}` placeholders, the member's number from 1.
/// `{index}` is decimal, `{index:04}` decimal zero-padded to 4 digits, `{index:X}` / `{index:x}`
/// hexadecimal, `{index:04X}` both; `{{` and `}}` are a brace.
public struct FleetPattern: Sendable, Equatable, CustomStringConvertible {
    enum Piece: Sendable, Equatable {
        case text(String)
        case index(width: Int, hex: Bool, uppercase: Bool)
    }

    let pieces: [Piece]
    /// The pattern as written.
    public let description: String
    /// Whether it holds an `{index}`: without one, every member gets the same text.
    public var mentionsIndex: Bool { pieces.contains { if case .index = $0 { true } else { false } } }

    public static let help = "{index}, {index:04} (zero-padded), {index:X} or {index:04X} (hexadecimal); {{ and }} for a brace"
    /// Widths past this are no name's or address's.
    static let maximumWidth = 12

    /// Parses `text`; the error says what is wrong (without the location, which the reader adds).
    public init(_ text: String) throws(ConfigurationError) {
        description = text
        var pieces: [Piece] = []
        var literal = ""
        var rest = Substring(text)
        while let character = rest.first {
            rest = rest.dropFirst()
            if character == "}" {
                guard rest.first == "}" else { throw ConfigurationError("a `}` that closes nothing (write `}}` for one; placeholders: \(Self.help))") }
                rest = rest.dropFirst()
                literal.append("}")
                continue
            }
            guard character == "{" else {
                literal.append(character)
                continue
            }
            if rest.first == "{" {
                rest = rest.dropFirst()
                literal.append("{")
                continue
            }
            guard let close = rest.firstIndex(of: "}") else { throw ConfigurationError("a `{` that is never closed (placeholders: \(Self.help))") }
            let field = rest[..<close]
            rest = rest[rest.index(after: close)...]
            guard let piece = Self.placeholder(field) else {
                throw ConfigurationError("`{\(VisibleText.make(String(field)))}` is not a placeholder (placeholders: \(Self.help))")
            }
            if !literal.isEmpty { pieces.append(.text(literal)) }
            literal = ""
            pieces.append(piece)
        }
        if !literal.isEmpty { pieces.append(.text(literal)) }
        self.pieces = pieces
    }

    /// `index`, or `index:` with an optional `0`-led width and an optional `X`, `x` or `d`.
    private static func placeholder(_ field: Substring) -> Piece? {
        guard field.hasPrefix("index") else { return nil }
        var spec = field.dropFirst("index".count)
        if spec.isEmpty { return .index(width: 0, hex: false, uppercase: false) }
        guard spec.first == ":" else { return nil }
        spec = spec.dropFirst()
        var hex = false, uppercase = false
        if let last = spec.last, "Xxd".contains(last) {
            hex = last != "d"
            uppercase = last == "X"
            spec = spec.dropLast()
        }
        var width = 0
        if !spec.isEmpty {
            guard spec.first == "0", spec.count >= 2, spec.allSatisfy({ $0.isASCII && $0.isNumber }),
                  let value = Int(spec.dropFirst()), (1...maximumWidth).contains(value) else { return nil }
            width = value
        }
        return .index(width: width, hex: hex, uppercase: uppercase)
    }

    /// The pattern for member `index`.
    public func render(_ index: Int) -> String {
        var out = ""
        for piece in pieces {
            switch piece {
            case .text(let text): out += text
            case .index(let width, let hex, let uppercase):
                let digits = String(index, radix: hex ? 16 : 10, uppercase: uppercase)
                if digits.count < width { out += String(repeating: "0", count: width - digits.count) }
                out += digits
            }
        }
        return out
    }

    /// An address pattern's text for a member as an address: its hex digits (colons and dashes
    /// anywhere, so `C0:00:00:{index:06X}` works) must be 12 and a valid static random address.
    public static func address(_ text: String) -> BluetoothAddress? {
        let digits = text.filter { $0 != ":" && $0 != "-" }
        guard digits.count == 12, let value = UInt64(digits, radix: 16) else { return nil }
        let address = BluetoothAddress(value: value)
        return address.isValidStaticRandom ? address : nil
    }
}

/// A decimal number as written, kept exact: `scaled` is the value times 10^`decimals`.
public struct FleetDecimal: Sendable, Equatable {
    public var scaled: Int64
    public var decimals: Int

    /// Whole digits and decimals allowed: scaled values stay far inside 64 bits.
    static let maximumWholeDigits = 12
    public static let maximumDecimals = 6

    /// Plain decimal text: an optional sign, digits, optionally `.` and digits.
    public init?(_ text: String) {
        var rest = Substring(text)
        var negative = false
        if rest.first == "-" || rest.first == "+" {
            negative = rest.first == "-"
            rest = rest.dropFirst()
        }
        let parts = rest.split(separator: ".", omittingEmptySubsequences: false)
        guard (1...2).contains(parts.count), let whole = parts.first, !whole.isEmpty, whole.count <= Self.maximumWholeDigits,
              whole.allSatisfy({ $0.isASCII && $0.isNumber }) else { return nil }
        let fraction = parts.count == 2 ? parts[1] : ""
        guard parts.count == 1 || !fraction.isEmpty, fraction.count <= Self.maximumDecimals,
              fraction.allSatisfy({ $0.isASCII && $0.isNumber }) else { return nil }
        guard let wholeValue = Int64(whole), let fractionValue = fraction.isEmpty ? 0 : Int64(fraction) else { return nil }
        let magnitude = wholeValue * Self.power(fraction.count) + fractionValue
        scaled = negative ? -magnitude : magnitude
        decimals = fraction.count
    }

    public init(scaled: Int64, decimals: Int) {
        self.scaled = scaled
        self.decimals = decimals
    }

    static func power(_ exponent: Int) -> Int64 {
        var value: Int64 = 1
        for _ in 0..<exponent { value *= 10 }
        return value
    }

    /// The same value with `decimals` decimals (at least its own).
    func scaled(to decimals: Int) -> Int64 { scaled * Self.power(decimals - self.decimals) }

    /// As text with exactly its decimals: `-0.5`, `21.50`, `80`.
    public var text: String {
        let magnitude = scaled.magnitude, unit = UInt64(Self.power(decimals))
        var out = scaled < 0 ? "-" : ""
        out += String(magnitude / unit)
        if decimals > 0 {
            let fraction = String(magnitude % unit)
            out += "." + String(repeating: "0", count: decimals - fraction.count) + fraction
        }
        return out
    }
}

/// A setting of a fleet: one value for every member, or a range each member draws from.
public enum FleetValue: Sendable, Equatable {
    case fixed(String)
    /// From `low` to `high` (both included) on the grid of `low.decimals` decimals, uniformly.
    case range(low: FleetDecimal, high: FleetDecimal)
}

/// The fleet's randomness: SplitMix64 (`SeededRandom`, Core) streams keyed by the seed, the device
/// kind, the member and what is drawn, so every value is the same on every machine and run, and
/// a value's stream does not move when another key is added. Integer draws are `next() % n`:
/// the bias is below n / 2^64, nothing a fleet of settings can show.
public enum FleetDraw {
    /// FNV-1a, 64 bit, of `text`: stable across runs and platforms (Swift's Hasher is seeded per process).
    public static func key(_ text: String) -> UInt64 {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in text.utf8 {
            hash ^= UInt64(byte)
            hash &*= 0x0000_0100_0000_01B3
        }
        return hash
    }

    /// The stream of `purpose` (a key such as `settings.battery`) for member `index` of the
    /// fleet of `device` seeded with `seed`.
    public static func stream(seed: UInt64, device: String, purpose: String, index: Int) -> SeededRandom {
        var fleet = SeededRandom(seed: seed ^ key(device + "\u{0}" + purpose))
        // An odd multiplier other than SplitMix64's own step: members' streams start far apart.
        return SeededRandom(seed: fleet.next() &+ UInt64(index) &* 0xD1B5_4A32_D192_ED03)
    }

    /// A number from 0 to `bound` (included).
    public static func upTo(_ bound: UInt64, _ random: inout SeededRandom) -> UInt64 {
        bound == .max ? random.next() : random.next() % (bound + 1)
    }

    /// A static random address (Vol 6, Part B, 1.3.2.1: the two top bits 1, the 46 random bits
    /// neither all 0 nor all 1), drawn again in the (1 in 2^45) case it is not.
    public static func address(_ random: inout SeededRandom) -> BluetoothAddress {
        while true {
            let address = BluetoothAddress(value: (random.next() & 0x3FFF_FFFF_FFFF) | 0xC000_0000_0000)
            if address.isValidStaticRandom { return address }
        }
    }

    /// A value of `range` (`low`...`high`, on the finer of their grids).
    public static func value(low: FleetDecimal, high: FleetDecimal, _ random: inout SeededRandom) -> FleetDecimal {
        let width = UInt64(bitPattern: high.scaled &- low.scaled)
        return FleetDecimal(scaled: low.scaled &+ Int64(bitPattern: upTo(width, &random)), decimals: low.decimals)
    }

    /// `count` decimal digits.
    public static func digits(_ count: Int, _ random: inout SeededRandom) -> String {
        String((0..<count).map { _ in Character(String(upTo(9, &random))) })
    }
}

extension Reader {
    /// Settings one fleet gives its members.
    static let maximumFleetSettings = 16

    /// The keys of a `fleets:` entry.
    static let fleetKeys = ["device", "count", "seed", "name", "address", "controller", "settings", "pin", "passkey", "io_capability",
                            "bindkey_file", "advertising", "connection", "start_spread_s", "fleet"]

    /// One `fleets:` entry, checked, and its members. `devicesBefore`: the devices the file
    /// gave before it (for the ceiling of the whole file).
    func fleet(_ node: YAMLNode, at path: String, place: Int = 1,
               devicesBefore: Int) throws(ConfigurationError) -> (FleetConfiguration, [DeviceConfiguration]) {
        let entries = try mapping(node, at: path)
        try allowOnly(Self.fleetKeys, in: entries, at: path)
        // The fleet's own name, for the control socket (`list fleet:NAME`): a word, so it never
        // reads as a number (`fleet:2`, a fleet by its place) or as a pattern.
        var reference = String(place)
        if let entry = entries["fleet"] {
            let text = try scalar(entry.value, at: "\(path).fleet")
            guard Self.isFleetName(text) else {
                throw fail(entry.value, "\(path).fleet", "`\(VisibleText.make(text))` is not a fleet name: 1 to 64 letters, digits, `-`, `_` or `.`, the first a letter")
            }
            reference = text
        }
        guard let kindEntry = entries["device"] else {
            throw fail(node, path, "`device:` is missing (the kind of device, e.g. bthome-thermometer)")
        }
        var template = DeviceConfiguration(device: try scalar(kindEntry.value, at: "\(path).device"), location: at(node))
        if template.isProfile {
            template.device = profilePath(template.device)
            for key in DeviceConfiguration.builtInOnlyKeys {
                guard let entry = entries[key] else { continue }
                throw fail(entry.keyNode, "\(path).\(key)", "a GATT profile (\(template.device)) has no \(key == "pin" ? "PIN" : "settings"): its values are the file's")
            }
        }
        let device = template.device
        guard let countEntry = entries["count"] else { throw fail(node, path, "`count:` is missing (how many devices, 1 to \(ProcessLimits.hardCeiling))") }
        let countText = try scalar(countEntry.value, at: "\(path).count")
        guard let count = Int(countText), (1...ProcessLimits.hardCeiling).contains(count) else {
            throw fail(countEntry.value, "\(path).count", "takes a whole number from 1 to \(ProcessLimits.hardCeiling), not `\(VisibleText.make(countText))`")
        }
        guard devicesBefore + count <= ProcessLimits.hardCeiling else {
            throw fail(countEntry.value, "\(path).count", "\(devicesBefore + count) devices in the file; \(ProcessLimits.ceilingAdvice)")
        }
        var seed: UInt64 = 0
        if let entry = entries["seed"] {
            let text = try scalar(entry.value, at: "\(path).seed")
            guard let value = UInt64(text) else {
                throw fail(entry.value, "\(path).seed", "takes a whole number from 0 to \(UInt64.max), not `\(VisibleText.make(text))`")
            }
            seed = value
        }
        let kindName = device.split(separator: "/").last.map { $0.hasSuffix(".json") ? String($0.dropLast(5)) : String($0) } ?? device
        var namePattern = try FleetPattern("\(kindName) {index}")
        if let entry = entries["name"] { namePattern = try pattern(entry.value, at: "\(path).name") }
        var addressPattern: FleetPattern?
        if let entry = entries["address"] {
            let text = try scalar(entry.value, at: "\(path).address")
            if text != "random" { addressPattern = try pattern(entry.value, at: "\(path).address") }
        }
        var fleet = FleetConfiguration(device: device, count: count, seed: seed, name: namePattern, address: addressPattern,
                                       path: path, location: at(node))
        fleet.reference = reference
        try sharedKeys(entries, into: &template, at: path)
        var pin: FleetValue?
        var pinDigits: Int?
        if let entry = entries["pin"] {
            if case .mapping = entry.value.kind {
                let drawn = try mapping(entry.value, at: "\(path).pin")
                try allowOnly(["digits"], in: drawn, at: "\(path).pin")
                guard let digits = drawn["digits"] else { throw fail(entry.value, "\(path).pin", "`digits:` is missing (a PIN of 4 to 8 random digits: `{ digits: 4 }`)") }
                pinDigits = Int(try self.digits(digits.value, at: "\(path).pin.digits", 1...1, what: "the number of digits"))
                guard let count = pinDigits, (4...8).contains(count) else {
                    throw fail(digits.value, "\(path).pin.digits", "a PIN has 4 to 8 digits")
                }
            } else {
                pin = .fixed(try self.digits(entry.value, at: "\(path).pin", 4...8, what: "a PIN"))
            }
        }
        // Settings in file order, each fixed or a range.
        var settings: [(key: String, value: FleetValue, location: String)] = []
        if let entry = entries["settings"] {
            _ = try mapping(entry.value, at: "\(path).settings")  // duplicate and non-word keys refused
            if case .mapping(let ordered) = entry.value.kind {
                // Each is copied into every member: bounded, far above any device's (the thermostat has 6).
                guard ordered.count <= Self.maximumFleetSettings else {
                    throw fail(entry.value, "\(path).settings", "\(ordered.count) settings; a fleet gives at most \(Self.maximumFleetSettings)")
                }
                for (key, value) in ordered {
                    guard let name = key.scalar else { continue }
                    let settingPath = "\(path).settings.\(name)"
                    let drawn = try fleetValue(value, at: settingPath)
                    settings.append((name, drawn, "\(at(value)): \(settingPath)"))
                    switch drawn {
                    case .fixed(let text):
                        fleet.lowestSettings.append(.init(key: name, value: text, location: "\(at(value)): \(settingPath)"))
                        fleet.highestSettings.append(.init(key: name, value: text, location: "\(at(value)): \(settingPath)"))
                    case .range(let low, let high):
                        fleet.lowestSettings.append(.init(key: name, value: low.text, location: "\(at(value)): \(settingPath) (the range's low end)"))
                        fleet.highestSettings.append(.init(key: name, value: high.text, location: "\(at(value)): \(settingPath) (the range's high end)"))
                    }
                }
            }
        }
        if let entry = entries["advertising"] {
            let (timing, jitter) = try fleetAdvertising(entry.value, at: "\(path).advertising")
            template.advertising = timing
            fleet.advertisingJitter = jitter
        }
        if let entry = entries["start_spread_s"] {
            let seconds = try number(entry.value, at: "\(path).start_spread_s", 0...3600, unit: "s")
            fleet.startSpread = .milliseconds(Int64((seconds * 1000).rounded()))
        }
        // The members.
        var members: [DeviceConfiguration] = []
        members.reserveCapacity(count)
        let spreadMs = UInt64(fleet.startSpread / .milliseconds(1))
        for index in 1...count {
            var member = template
            member.path = fleet.memberPath(index)
            member.fleet = path
            member.fleetReference = reference
            let name = namePattern.render(index)
            guard (1...248).contains(name.utf8.count) else {
                throw fail(entries["name"]?.value ?? node, "\(path).name", "member \(index)'s name `\(VisibleText.make(name))` is not 1 to 248 bytes of UTF-8")
            }
            member.name = name
            if let addressPattern {
                let text = addressPattern.render(index)
                guard let address = FleetPattern.address(text) else {
                    throw fail(entries["address"]?.value ?? node, "\(path).address",
                               "member \(index)'s address `\(VisibleText.make(text))` is not a static random address (12 hex digits, the first C0-FF, the rest neither all 0 nor all 1)")
                }
                member.address = address
            } else {
                var random = FleetDraw.stream(seed: seed, device: device, purpose: "address", index: index)
                member.address = FleetDraw.address(&random)
            }
            for setting in settings {
                let text: String
                switch setting.value {
                case .fixed(let value): text = value
                case .range(let low, let high):
                    var random = FleetDraw.stream(seed: seed, device: device, purpose: "settings." + setting.key, index: index)
                    text = FleetDraw.value(low: low, high: high, &random).text
                }
                member.settings.append(.init(key: setting.key, value: text, location: "\(setting.location) (member \(index))"))
            }
            if case .fixed(let value) = pin { member.pin = value }
            if let pinDigits {
                var random = FleetDraw.stream(seed: seed, device: device, purpose: "pin", index: index)
                member.pin = FleetDraw.digits(pinDigits, &random)
            }
            if fleet.advertisingJitter > 0 {
                var random = FleetDraw.stream(seed: seed, device: device, purpose: "advertising.jitter", index: index)
                member.advertisingShift = UInt16(FleetDraw.upTo(UInt64(fleet.advertisingJitter), &random))
            }
            if spreadMs > 0 {
                var random = FleetDraw.stream(seed: seed, device: device, purpose: "start_spread", index: index)
                member.startDelay = .milliseconds(Int64(FleetDraw.upTo(spreadMs - 1, &random)))
            }
            members.append(member)
        }
        return (fleet, members)
    }

    /// A fleet's `fleet:` name: 1 to 64 ASCII letters, digits, `-`, `_`, `.`, the first a letter.
    static func isFleetName(_ text: String) -> Bool {
        guard let first = text.utf8.first, (1...64).contains(text.utf8.count) else { return false }
        func isLetter(_ byte: UInt8) -> Bool { (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte | 0x20) }
        return isLetter(first) && text.utf8.allSatisfy { byte in
            isLetter(byte) || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || byte == UInt8(ascii: "-")
                || byte == UInt8(ascii: "_") || byte == UInt8(ascii: ".")
        }
    }

    func pattern(_ node: YAMLNode, at path: String) throws(ConfigurationError) -> FleetPattern {
        let text = try scalar(node, at: path)
        do {
            return try FleetPattern(text)
        } catch {
            throw fail(node, path, error.description)
        }
    }

    /// A setting's value: a scalar for every member, `{ min: A, max: B }` or `{ around: C, spread: D }`.
    func fleetValue(_ node: YAMLNode, at path: String) throws(ConfigurationError) -> FleetValue {
        guard case .mapping = node.kind else { return .fixed(try scalar(node, at: path)) }
        let entries = try mapping(node, at: path)
        let shapes = "`{ min: A, max: B }` or `{ around: C, spread: D }`"
        func decimal(_ key: String) throws(ConfigurationError) -> FleetDecimal {
            guard let entry = entries[key] else { throw fail(node, path, "`\(key)` is missing (a range is \(shapes))") }
            let text = try scalar(entry.value, at: "\(path).\(key)")
            guard let value = FleetDecimal(text) else {
                throw fail(entry.value, "\(path).\(key)",
                           "`\(VisibleText.make(text))` is not a plain decimal number (at most \(FleetDecimal.maximumWholeDigits) digits and \(FleetDecimal.maximumDecimals) decimals)")
            }
            return value
        }
        let low: FleetDecimal, high: FleetDecimal
        if entries["around"] != nil || entries["spread"] != nil {
            try allowOnly(["around", "spread"], in: entries, at: path)
            let around = try decimal("around"), spread = try decimal("spread")
            guard spread.scaled >= 0 else { throw fail(entries["spread"]!.value, "\(path).spread", "must not be negative") }
            let decimals = max(around.decimals, spread.decimals)
            low = FleetDecimal(scaled: around.scaled(to: decimals) - spread.scaled(to: decimals), decimals: decimals)
            high = FleetDecimal(scaled: around.scaled(to: decimals) + spread.scaled(to: decimals), decimals: decimals)
        } else {
            try allowOnly(["min", "max"], in: entries, at: path)
            let minimum = try decimal("min"), maximum = try decimal("max")
            let decimals = max(minimum.decimals, maximum.decimals)
            low = FleetDecimal(scaled: minimum.scaled(to: decimals), decimals: decimals)
            high = FleetDecimal(scaled: maximum.scaled(to: decimals), decimals: decimals)
            guard low.scaled <= high.scaled else {
                throw fail(node, path, "min \(minimum.text) is above max \(maximum.text)")
            }
        }
        return .range(low: low, high: high)
    }

    /// A fleet's `advertising:`: a device's keys and `jitter_ms`, 0 to 1000, in whole 0.625 ms units
    /// (rounded down). With the intervals given, the slow one lengthened by the whole jitter must
    /// stay within 10240 ms (Vol 4, Part E, 7.8.5).
    func fleetAdvertising(_ node: YAMLNode, at path: String) throws(ConfigurationError) -> (AdvertisingTiming?, UInt16) {
        let entries = try mapping(node, at: path)
        var timing: AdvertisingTiming?
        if entries.keys.contains(where: { $0 != "jitter_ms" }) {
            timing = try advertising(node, at: path, alsoAllowed: ["jitter_ms"])
        } else {
            try allowOnly(AdvertisingTiming.configurationKeys + ["jitter_ms"], in: entries, at: path)
        }
        guard let entry = entries["jitter_ms"] else { return (timing, 0) }
        let milliseconds = try number(entry.value, at: "\(path).jitter_ms", 0...1000, unit: "ms")
        let units = UInt16((milliseconds / AdvertisingTiming.unitMs).rounded(.down))
        if let timing, Int(timing.slowInterval) + Int(units) > Int(AdvertisingTiming.hciIntervalRange.upperBound) {
            throw fail(entry.value, "\(path).jitter_ms",
                       "the slow interval \(ConnectionParameters.ms(timing.slowIntervalMs)) ms lengthened by \(ConnectionParameters.ms(milliseconds)) ms passes 10240 ms")
        }
        return (timing, units)
    }
}

extension AdvertisingTiming {
    /// The keys of a device's `advertising:`.
    static let configurationKeys = ["fast_interval_ms", "fast_duration_s", "slow_interval_ms"]

    /// These intervals lengthened by `units` of 0.625 ms (a fleet member's jitter), kept within
    /// the Core's 10.24 s (Vol 4, Part E, 7.8.5).
    public func lengthened(by units: UInt16) -> AdvertisingTiming {
        var out = self
        let top = Int(Self.hciIntervalRange.upperBound)
        out.fastInterval = UInt16(min(top, Int(fastInterval) + Int(units)))
        out.slowInterval = UInt16(min(top, Int(slowInterval) + Int(units)))
        return out
    }
}
