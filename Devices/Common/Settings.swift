import BlemuDevice

/// Settings of the common kinds, parsed in one way for every device: a refusal names the key
/// and what it accepts, and changes nothing.
extension DeviceSetting {
    /// A decimal number in `range` ("21.5", "-3"). `moves`: the device changes it by itself
    /// after it is set; `hold` sets it and keeps it there (`set … --exact`), when it can.
    public static func number(_ key: String, _ summary: String, in range: ClosedRange<Double>, moves: Bool = false,
                              hold: ((Double) -> Void)? = nil, apply: @escaping (Double) -> Void) -> DeviceSetting {
        let parse = { (text: String) -> Result<Double, Refusal> in
            guard let value = Double(text.trimmingWhitespace), value.isFinite, range.contains(value) else {
                return .failure(Refusal("\(key) takes a number from \(Self.format(range.lowerBound)) to \(Self.format(range.upperBound)), not '\(text)'"))
            }
            return .success(value)
        }
        return made(key, summary, parse, moves: moves, hold: hold, apply: apply)
    }

    /// A whole number in `range`.
    public static func integer(_ key: String, _ summary: String, in range: ClosedRange<Int>, moves: Bool = false,
                               hold: ((Int) -> Void)? = nil, apply: @escaping (Int) -> Void) -> DeviceSetting {
        let parse = { (text: String) -> Result<Int, Refusal> in
            guard let value = Int(text.trimmingWhitespace), range.contains(value) else {
                return .failure(Refusal("\(key) takes a whole number from \(range.lowerBound) to \(range.upperBound), not '\(text)'"))
            }
            return .success(value)
        }
        return made(key, summary, parse, moves: moves, hold: hold, apply: apply)
    }

    /// 0 or 1 (also `false`/`true`, `off`/`on`).
    public static func flag(_ key: String, _ summary: String, apply: @escaping (Bool) -> Void) -> DeviceSetting {
        let parse = { (text: String) -> Result<Bool, Refusal> in
            switch text.trimmingWhitespace.lowercased() {
            case "1", "true", "on": return .success(true)
            case "0", "false", "off": return .success(false)
            default: return .failure(Refusal("\(key) takes 0 or 1, not '\(text)'"))
            }
        }
        return made(key, summary, parse, moves: false, hold: nil, apply: apply)
    }

    /// One of `names` (by name, or by its number, the index in `names`).
    public static func choice(_ key: String, _ summary: String, names: [String],
                              apply: @escaping (Int) -> Void) -> DeviceSetting {
        let parse = { (text: String) -> Result<Int, Refusal> in
            let wanted = text.trimmingWhitespace.lowercased()
            if let index = names.firstIndex(of: wanted) ?? Int(wanted).flatMap({ names.indices.contains($0) ? $0 : nil }) {
                return .success(index)
            }
            let listed = names.enumerated().map { "\($0.element) (\($0.offset))" }.joined(separator: ", ")
            return .failure(Refusal("\(key) takes one of \(listed), not '\(text)'"))
        }
        return made(key, summary, parse, moves: false, hold: nil, apply: apply)
    }

    /// Why a value is refused.
    public struct Refusal: Error {
        public let message: String
        public init(_ message: String) { self.message = message }
    }

    /// A setting from one parser: its check, its application, and its held form if any.
    public static func made<Value>(_ key: String, _ summary: String, _ parse: @escaping (String) -> Result<Value, Refusal>,
                                   moves: Bool, hold: ((Value) -> Void)?, apply: @escaping (Value) -> Void) -> DeviceSetting {
        func run(_ action: @escaping (Value) -> Void) -> (String) -> String? {
            { text in
                switch parse(text) {
                case .failure(let refusal): return refusal.message
                case .success(let value):
                    action(value)
                    return nil
                }
            }
        }
        return DeviceSetting(key, summary, check: { text in
            if case .failure(let refusal) = parse(text) { return refusal.message }
            return nil
        }, moves: moves, hold: hold.map(run), apply: run(apply))
    }

    private static func format(_ value: Double) -> String {
        value == value.rounded() ? String(Int(value)) : String(value)
    }
}

extension String {
    var trimmingWhitespace: String {
        var slice = Substring(self)
        while slice.first?.isWhitespace == true { slice.removeFirst() }
        while slice.last?.isWhitespace == true { slice.removeLast() }
        return String(slice)
    }
}
