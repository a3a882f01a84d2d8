import BlemuCore

/// The static passkey of a device that pairs with Passkey Entry (the lock: "the passkey is the
/// label on the box") when none is given: six random digits made on the first start and kept
/// beside the device's bonds (`passkey-DEVICE-NAME.txt`, mode 0600, written atomically), so the
/// label stays the same across restarts.
public enum PasskeyLabel {
    public struct Outcome: Equatable, Sendable {
        public var passkey: UInt32
        /// Made now (first start, or the file was unusable), not read back.
        public var created: Bool
        /// Why the file could not be read or written (the passkey then lives until blemu stops).
        public var problem: String?
    }

    /// The file beside the bond file of `owner` in `directory`.
    public static func path(directory: String, owner: BondOwner) -> String {
        let bonds = owner.fileName
        let stem = bonds.dropFirst("bonds-".count).dropLast(".json".count)
        return directory + "/passkey-" + stem + ".txt"
    }

    /// Reads the kept passkey at `path`, or makes one and keeps it there (no path: made only).
    public static func loadOrCreate(path: String?, random: () -> UInt32 = { UInt32.random(in: 0...999_999) }) -> Outcome {
        guard let path else { return Outcome(passkey: random() % 1_000_000, created: true, problem: nil) }
        var problem: String?
        switch BondStore.readFile(path) {
        case .read(let bytes):
            let text = String(decoding: bytes, as: UTF8.self).trimmingCharacters(in: " \n\t")
            if text.count == 6, text.allSatisfy({ $0.isASCII && $0.isNumber }), let passkey = UInt32(text) {
                return Outcome(passkey: passkey, created: false, problem: nil)
            }
            problem = "\(path) does not hold six digits: a new passkey replaces it"
        case .failed(let why):
            return Outcome(passkey: random() % 1_000_000, created: true, problem: "\(path): \(why)")
        case .missing:
            break
        }
        let passkey = random() % 1_000_000
        if let failure = BondStore.writeAtomically(Array((sixDigits(passkey) + "\n").utf8), to: path) {
            problem = failure
        }
        return Outcome(passkey: passkey, created: true, problem: problem)
    }

    public static func sixDigits(_ passkey: UInt32) -> String {
        let text = String(passkey % 1_000_000)
        return String(repeating: "0", count: 6 - text.count) + text
    }
}

private extension String {
    func trimmingCharacters(in set: String) -> String {
        var scalars = Substring(self)
        while let first = scalars.first, set.contains(first) { scalars = scalars.dropFirst() }
        while let last = scalars.last, set.contains(last) { scalars = scalars.dropLast() }
        return String(scalars)
    }
}
