import BlemuCore
#if canImport(Glibc)
import Glibc
#endif

/// A plausible heart: a bounded random walk pulled back toward a resting rate, beats spaced by
/// RR intervals that follow the rate with a little beat-to-beat variability, and energy
/// expended accumulating with effort. Time only moves when `advance` is called.
public struct HeartModel: Sendable {
    /// The rate the walk is pulled back toward: the resting rate, or the rate last `set`.
    public private(set) var restingRate: Double
    public let range: ClosedRange<Double>
    public private(set) var rate: Double
    /// kJ since the last reset, fractional.
    public private(set) var energy: Double = 0
    private var random: SeededRandom
    /// Seconds until the next beat, carried between calls.
    private var untilNextBeat: Double
    /// Held by `hold(beatsPerMinute:)`: the rate stays exactly where it was put and the beats
    /// come exactly 60 / rate apart, until the rate is set again.
    public private(set) var isHeld = false

    public init(restingRate: Double = 64, range: ClosedRange<Double> = 30...220, seed: UInt64 = 0x4852) {
        self.restingRate = restingRate
        self.range = range
        rate = restingRate
        random = SeededRandom(seed: seed)
        untilNextBeat = 60 / restingRate
    }

    /// Moves time forward by `seconds` and returns the RR intervals (1/1024 s) of the beats
    /// that completed in it.
    public mutating func advance(seconds: Double) -> [UInt16] {
        let seconds = max(0, seconds)
        // Mean-reverting random walk (an Ornstein–Uhlenbeck step), kept inside `range`. The pull
        // is exponential in time, so a long gap lands near the resting rate instead of past it.
        if !isHeld {
            let pull = (1 - exp(-0.08 * seconds)) * (restingRate - rate)
            let noise = 1.5 * random.signedUnit() * min(seconds, 10).squareRoot()
            rate = min(range.upperBound, max(range.lowerBound, rate + pull + noise))
        }
        // A resting adult spends roughly 4.5 kJ per minute; more with a faster heart.
        energy += seconds * (4.5 / 60) * (rate / restingRate)
        var left = seconds
        // Only the beats of the last few seconds can be reported (a notification holds a
        // handful): a long quiet gap is skipped in one step, keeping the beat phase.
        let kept = 5.0
        if left > kept + untilNextBeat {
            let skipped = left - kept
            let period = 60 / rate
            untilNextBeat = period - (skipped - untilNextBeat).truncatingRemainder(dividingBy: period)
            left = kept
        }
        var intervals: [UInt16] = []
        while untilNextBeat <= left {
            left -= untilNextBeat
            let interval = (60 / rate) * (isHeld ? 1 : 1 + 0.03 * random.signedUnit())
            intervals.append(UInt16(min(65535, (interval * 1024).rounded())))
            untilNextBeat = interval
        }
        untilNextBeat -= left
        return intervals
    }

    public mutating func resetEnergy() { energy = 0 }

    /// Puts the heart at `beatsPerMinute` (within `range`) and keeps it wandering around that
    /// rate from now on, as a runner's heart stays up while the run lasts. The beat phase is
    /// kept, so the next interval is not cut short.
    public mutating func set(beatsPerMinute: Double) {
        rate = min(range.upperBound, max(range.lowerBound, beatsPerMinute))
        restingRate = rate
        isHeld = false
    }

    /// Puts the heart at `beatsPerMinute` and holds it there, without wander or beat-to-beat
    /// variation, until the rate is set again (`set heart-rate bpm 150 --exact`): every
    /// measurement then says this rate.
    public mutating func hold(beatsPerMinute: Double) {
        set(beatsPerMinute: beatsPerMinute)
        isHeld = true
    }

    public var beatsPerMinute: UInt16 { UInt16(rate.rounded()) }
    public var energyKilojoules: UInt16 { UInt16(min(65535, energy.rounded(.down))) }
}
