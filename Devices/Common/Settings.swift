import BlemuHost

/// Settings of the common kinds, parsed in one way for every device: a refusal names the key
/// and what it accepts, and changes nothing.
extension DeviceSetting {
    /// A decimal number in `range` ("21.5", "-3").
    public static func number(_ key: String, _ summary: String, in range: ClosedRange<Double>,
                              apply: @escaping (Double) -> Void) -> DeviceSetting {
        DeviceSetting(key, summary) { text in
            guard let value = Double(text.trimmingWhitespace), value.isFinite, range.contains(value) else {
                return "\(key) takes a number from \(Self.format(range.lowerBound)) to \(Self.format(range.upperBound)), not '\(text)'"
            }
            apply(value)
            return nil
        }
    }

    /// A whole number in `range`.
    public static func integer(_ key: String, _ summary: String, in range: ClosedRange<Int>,
                               apply: @escaping (Int) -> Void) -> DeviceSetting {
        DeviceSetting(key, summary) { text in
            guard let value = Int(text.trimmingWhitespace), range.contains(value) else {
                return "\(key) takes a whole number from \(range.lowerBound) to \(range.upperBound), not '\(text)'"
            }
            apply(value)
            return nil
        }
    }

    /// 0 or 1 (also `false`/`true`, `off`/`on`).
    public static func flag(_ key: String, _ summary: String, apply: @escaping (Bool) -> Void) -> DeviceSetting {
        DeviceSetting(key, summary) { text in
            switch text.trimmingWhitespace.lowercased() {
            case "1", "true", "on": apply(true)
            case "0", "false", "off": apply(false)
            default: return "\(key) takes 0 or 1, not '\(text)'"
            }
            return nil
        }
    }

    /// One of `names` (by name, or by its number, the index in `names`).
    public static func choice(_ key: String, _ summary: String, names: [String],
                              apply: @escaping (Int) -> Void) -> DeviceSetting {
        DeviceSetting(key, summary) { text in
            let wanted = text.trimmingWhitespace.lowercased()
            if let index = names.firstIndex(of: wanted) ?? Int(wanted).flatMap({ names.indices.contains($0) ? $0 : nil }) {
                apply(index)
                return nil
            }
            let listed = names.enumerated().map { "\($0.element) (\($0.offset))" }.joined(separator: ", ")
            return "\(key) takes one of \(listed), not '\(text)'"
        }
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
