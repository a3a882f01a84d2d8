import BlemuCore

/// A plausible heart: a bounded random walk pulled back toward a resting rate, beats spaced by
/// RR intervals that follow the rate with a little beat-to-beat variability, and energy
/// expended accumulating with effort. Time only moves when `advance` is called.
public struct HeartModel: Sendable {
    public let restingRate: Double
    public let range: ClosedRange<Double>
    public private(set) var rate: Double
    /// kJ since the last reset, fractional.
    public private(set) var energy: Double = 0
    private var random: SeededRandom
    /// Seconds until the next beat, carried between calls.
    private var untilNextBeat: Double

    public init(restingRate: Double = 64, range: ClosedRange<Double> = 45...180, seed: UInt64 = 0x4852) {
        self.restingRate = restingRate
        self.range = range
        rate = restingRate
        random = SeededRandom(seed: seed)
        untilNextBeat = 60 / restingRate
    }

    /// Moves time forward by `seconds` and returns the RR intervals (1/1024 s) of the beats
    /// that completed in it.
    public mutating func advance(seconds: Double) -> [UInt16] {
        // Mean-reverting random walk (an Ornstein–Uhlenbeck step), kept inside `range`.
        let pull = 0.08 * (restingRate - rate) * seconds
        rate = min(range.upperBound, max(range.lowerBound, rate + pull + 1.5 * random.signedUnit() * seconds.squareRoot()))
        // A resting adult spends roughly 4.5 kJ per minute; more with a faster heart.
        energy += seconds * (4.5 / 60) * (rate / restingRate)
        var intervals: [UInt16] = []
        var left = seconds
        while untilNextBeat <= left {
            left -= untilNextBeat
            let interval = (60 / rate) * (1 + 0.03 * random.signedUnit())
            intervals.append(UInt16(min(65535, (interval * 1024).rounded())))
            untilNextBeat = interval
        }
        untilNextBeat -= left
        return intervals
    }

    public mutating func resetEnergy() { energy = 0 }

    public var beatsPerMinute: UInt16 { UInt16(rate.rounded()) }
    public var energyKilojoules: UInt16 { UInt16(min(65535, energy.rounded(.down))) }
}
