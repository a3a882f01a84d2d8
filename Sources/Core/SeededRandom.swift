/// SplitMix64 (Steele, Lea, Flood 2014): a small, fast, seedable generator, so a simulated
/// world — or a property test's random input — can be replayed exactly (Swift's
/// SystemRandomNumberGenerator cannot be seeded).
public struct SeededRandom: RandomNumberGenerator, Sendable {
    private var state: UInt64

    public init(seed: UInt64) { state = seed }

    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// A uniform Double in [-1, 1].
    public mutating func signedUnit() -> Double { Double.random(in: -1...1, using: &self) }

    /// A number in 0..<bound (0 for an empty range); uniform enough for test inputs.
    public mutating func below(_ bound: Int) -> Int { bound <= 0 ? 0 : Int(next() % UInt64(bound)) }
    public mutating func byte() -> UInt8 { UInt8(truncatingIfNeeded: next()) }
    public mutating func bytes(_ count: Int) -> [UInt8] { (0..<max(0, count)).map { _ in byte() } }
    /// True `percent` times in a hundred.
    public mutating func chance(_ percent: Int) -> Bool { below(100) < percent }
}
