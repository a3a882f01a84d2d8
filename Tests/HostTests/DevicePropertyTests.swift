import BlemuCore
import BlemuDevices
import Testing
@testable import HostTestSupport

/// HRS measurement decoding (used by blemu's own central) against hostile bytes, and the
/// encoder against the decoder.
@Suite struct HeartRateMeasurementTests {
    @Test func encodesTheHRSFlagsAndFields() throws {
        let m = HeartRateMeasurement(heartRate: 72, sensorContact: .detected, energyExpended: 300, rrIntervals: [853, 870])
        // Flags: uint8 value, contact supported+detected (0b11 << 1), energy (0x08), RR (0x10).
        #expect(m.encode() == [0x1E, 72, 0x2C, 0x01, 0x55, 0x03, 0x66, 0x03])
        #expect(try HeartRateMeasurement(decoding: m.encode()[...]) == m)
        let wide = HeartRateMeasurement(heartRate: 300, sensorContact: .notSupported)
        #expect(wide.encode() == [0x01, 0x2C, 0x01])
        // RR intervals that do not fit are dropped oldest first (HRS 3.1.1.5).
        let many = HeartRateMeasurement(heartRate: 60, sensorContact: .detected, rrIntervals: Array(1...20))
        let encoded = many.encode(maxLength: 20)
        #expect(encoded.count <= 20)
        #expect(try HeartRateMeasurement(decoding: encoded[...]).rrIntervals == Array(12...20))
    }

    @Test func decoderNeverTrapsAndRoundTrips() throws {
        var random = SeededRandom(seed: 99)
        for _ in 0..<10_000 {
            let bytes = random.bytes(random.below(24))
            if let m = try? HeartRateMeasurement(decoding: bytes[...]) {
                #expect(try HeartRateMeasurement(decoding: m.encode(maxLength: 512)[...]) == m)
            }
        }
    }

    /// A device left alone for days catches up in one step: near its resting rate, with only
    /// the last few seconds of beats, not a week of them.
    @Test func aLongQuietGapIsSkippedNotReplayed() {
        var heart = HeartModel(restingRate: 64, seed: 3)
        _ = heart.advance(seconds: 60)
        let beats = heart.advance(seconds: 7 * 24 * 3600)
        #expect(beats.count <= 8)
        #expect(abs(heart.rate - 64) < 15)
        #expect(heart.energyKilojoules > 40_000)
        for rr in beats { #expect(abs(Double(rr) / 1024 - 60 / heart.rate) < 0.2) }
    }

    @Test func theSimulatedHeartStaysPlausible() {
        var heart = HeartModel(seed: 5)
        var beats = 0
        for _ in 0..<3_600 {
            let intervals = heart.advance(seconds: 1)
            beats += intervals.count
            #expect(heart.range.contains(heart.rate))
            for rr in intervals {
                #expect(abs(Double(rr) / 1024 - 60 / heart.rate) < 0.2)
            }
        }
        // An hour near a resting rate of 64 bpm.
        #expect((45 * 60...100 * 60).contains(beats))
        #expect(heart.energyKilojoules > 100)
    }
}
