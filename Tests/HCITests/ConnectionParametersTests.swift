import Testing
import BlemuCore
@testable import BlemuHCI

@Suite struct ConnectionParametersTests {
    /// The recommended set with one field changed.
    static func recommended(intervalMin: UInt16? = nil, intervalMax: UInt16? = nil, latency: UInt16? = nil,
                            timeout: UInt16? = nil) -> ConnectionParameters {
        let base = ConnectionParameters.recommended
        return ConnectionParameters(intervalMin: intervalMin ?? base.intervalMin, intervalMax: intervalMax ?? base.intervalMax,
                                    peripheralLatency: latency ?? base.peripheralLatency,
                                    supervisionTimeout: timeout ?? base.supervisionTimeout)
    }

    @Test func recommendedPassesBothRuleSets() {
        let recommended = ConnectionParameters.recommended
        #expect(recommended.coreViolations == [])
        #expect(recommended.appleGuidelineViolations == [])
        #expect(recommended.intervalMinMs == 30)
        #expect(recommended.intervalMaxMs == 50)
        #expect(recommended.supervisionTimeoutMs == 4000)
        #expect(recommended.description == "interval 30–50 ms, latency 2, timeout 4000 ms")
    }

    @Test func millisecondsConvertExactlyOrNotAtAll() throws {
        let parameters = try #require(ConnectionParameters(intervalMinMs: 15, intervalMaxMs: 7.5 * 4,
                                                           peripheralLatency: 0, supervisionTimeoutMs: 2000))
        #expect(parameters == ConnectionParameters(intervalMin: 12, intervalMax: 24, peripheralLatency: 0,
                                                   supervisionTimeout: 200))
        #expect(ConnectionParameters(intervalMinMs: 18.75, intervalMaxMs: 30, supervisionTimeoutMs: 2000)?.intervalMin == 15)
        #expect(ConnectionParameters(intervalMinMs: 16, intervalMaxMs: 30, supervisionTimeoutMs: 2000) == nil)
        #expect(ConnectionParameters(intervalMinMs: 15, intervalMaxMs: 30, supervisionTimeoutMs: 2005) == nil)
        #expect(ConnectionParameters(intervalMinMs: -15, intervalMaxMs: 30, supervisionTimeoutMs: 2000) == nil)
        #expect(ConnectionParameters(intervalMinMs: .nan, intervalMaxMs: 30, supervisionTimeoutMs: 2000) == nil)
        #expect(ConnectionParameters(intervalMinMs: .infinity, intervalMaxMs: 30, supervisionTimeoutMs: 2000) == nil)
        #expect(ConnectionParameters(intervalMinMs: 15, intervalMaxMs: 1e9, supervisionTimeoutMs: 2000) == nil)
    }

    // MARK: Apple's guidelines: each rule broken alone

    @Test func intervalMinBelow15ms() {
        // 0 ms is a multiple of 15 ms, so only the "at least 15 ms" rule breaks.
        let parameters = Self.recommended(intervalMin: 0)
        #expect(parameters.violatedAppleRules == [.intervalMinAtLeast15ms])
        #expect(parameters.appleGuidelineViolations == ["Interval Min 0 ms is below 15 ms (Apple Accessory Design Guidelines)"])
    }

    @Test func intervalMinNotAMultipleOf15ms() {
        let parameters = Self.recommended(intervalMin: 16)   // 20 ms
        #expect(parameters.violatedAppleRules == [.intervalMinMultipleOf15ms])
        #expect(parameters.appleGuidelineViolations.first?.contains("20 ms is not a multiple of 15 ms") == true)
    }

    @Test func intervalMaxTooCloseToMin() {
        #expect(Self.recommended(intervalMax: 35).violatedAppleRules == [.intervalMaxAtLeastMinPlus15ms])   // 43.75 ms
        #expect(Self.recommended(intervalMax: 36).violatedAppleRules == [])                                  // 45 ms: the edge
    }

    @Test func latencyAbove30() {
        let parameters = Self.recommended(latency: 31, timeout: 600)
        #expect(parameters.violatedAppleRules == [.latencyAtMost30])
        #expect(Self.recommended(latency: 30, timeout: 600).violatedAppleRules == [])
    }

    @Test func supervisionTimeoutOutside2To6s() {
        #expect(Self.recommended(timeout: 199).violatedAppleRules == [.supervisionTimeout2To6s])
        #expect(Self.recommended(timeout: 601).violatedAppleRules == [.supervisionTimeout2To6s])
        #expect(Self.recommended(timeout: 200).violatedAppleRules == [])
        #expect(Self.recommended(timeout: 600).violatedAppleRules == [])
    }

    @Test func latencyWindowAbove2s() {
        // 100 ms × (20 + 1) = 2.1 s. A window above 2 s is always too long for a timeout of at most
        // 6 s as well (3 × 2 s = 6 s), so the two rules break together.
        let parameters = Self.recommended(intervalMax: 80, latency: 20, timeout: 600)
        #expect(parameters.violatedAppleRules == [.latencyWindowAtMost2s, .supervisionTimeoutAboveThreeLatencyWindows])
        #expect(parameters.appleGuidelineViolations.first?.contains("= 2100 ms is above 2000 ms") == true)
        // Exactly 2 s is allowed by this rule.
        #expect(!Self.recommended(intervalMax: 80, latency: 19).violatedAppleRules.contains(.latencyWindowAtMost2s))
    }

    @Test func supervisionTimeoutNotAboveThreeLatencyWindows() {
        // 50 ms × (13 + 1) × 3 = 2100 ms, not below a 2 s timeout.
        #expect(Self.recommended(latency: 13, timeout: 200).violatedAppleRules == [.supervisionTimeoutAboveThreeLatencyWindows])
        // 50 ms × 20 × 3 = 3000 ms: equal is not enough, 10 ms more is.
        #expect(Self.recommended(latency: 19, timeout: 300).violatedAppleRules == [.supervisionTimeoutAboveThreeLatencyWindows])
        #expect(Self.recommended(latency: 19, timeout: 301).violatedAppleRules == [])
    }

    // MARK: Core rules

    @Test func coreRanges() {
        #expect(Self.recommended(intervalMin: 5).violatedCoreRules == [.intervalMinRange])
        #expect(Self.recommended(intervalMin: 6).violatedCoreRules == [])
        #expect(Self.recommended(intervalMax: 0x0C81, timeout: 0x0C80).violatedCoreRules == [.intervalMaxRange])
        #expect(Self.recommended(intervalMin: 41).violatedCoreRules == [.intervalMinNotAboveMax])
        #expect(Self.recommended(latency: 0x01F4, timeout: 0x0C80).violatedCoreRules.contains(.latencyRange))
        #expect(Self.recommended(latency: 0x01F3, timeout: 0x0C80).violatedCoreRules.contains(.latencyRange) == false)
        #expect(Self.recommended(timeout: 0x0C81).violatedCoreRules == [.supervisionTimeoutRange])
        #expect(Self.recommended(timeout: 9).violatedCoreRules.contains(.supervisionTimeoutRange))
    }

    @Test func supervisionTimeoutMustOutlastTwoLatencyWindows() {
        // (1 + 0) × 50 ms × 2 = 100 ms: a 100 ms timeout is not larger, 110 ms is.
        let equal = Self.recommended(latency: 0, timeout: 10)
        #expect(equal.violatedCoreRules == [.supervisionTimeoutLongEnough])
        #expect(equal.coreViolations == ["Supervision Timeout 100 ms must be above (1 + Peripheral Latency) × "
                                         + "Interval Max × 2 = 100 ms (Vol 4, Part E, 7.8.18)"])
        #expect(Self.recommended(latency: 0, timeout: 11).violatedCoreRules == [])
    }

    @Test func everyRuleHasItsOwnMessage() {
        let parameters = ConnectionParameters(intervalMin: 1, intervalMax: 0xFFFF, peripheralLatency: 0xFFFF,
                                              supervisionTimeout: 0xFFFF)
        let core = ConnectionParameters.CoreRule.allCases.map(parameters.message(for:))
        let apple = ConnectionParameters.AppleRule.allCases.map(parameters.message(for:))
        #expect(Set(core).count == core.count)
        #expect(Set(apple).count == apple.count)
    }

    // MARK: Wire form

    @Test func encodesAndDecodesTheEightByteForm() throws {
        let parameters = ConnectionParameters.recommended
        #expect(parameters.encoded == [0x18, 0x00, 0x28, 0x00, 0x02, 0x00, 0x90, 0x01])
        #expect(try ConnectionParameters(decoding: parameters.encoded[...]) == parameters)
        #expect(throws: DecodeError.self) { try ConnectionParameters(decoding: parameters.encoded.dropLast()) }
        #expect(throws: DecodeError.self) { try ConnectionParameters(decoding: (parameters.encoded + [0])[...]) }
    }
}

@Suite struct AdvertisingTimingTests {
    @Test func defaultsAreApples() {
        let timing = AdvertisingTiming()
        #expect(timing.fastInterval == 32 && timing.fastIntervalMs == 20)
        #expect(timing.slowInterval == 244 && timing.slowIntervalMs == 152.5)
        #expect(timing.fastDuration == .seconds(30))
        #expect(timing.violations == [])
    }

    @Test func fastForThirtySecondsThenSlow() {
        let timing = AdvertisingTiming()
        #expect(timing.interval(after: .zero) == 32)
        #expect(timing.interval(after: .milliseconds(29_999)) == 32)
        #expect(timing.interval(after: .seconds(30)) == 244)
    }

    @Test func everyAppleSlowIntervalIsExactInHCIUnits() {
        let expected: [(ms: Double, units: UInt16)] = [
            (152.5, 244), (211.25, 338), (318.75, 510), (417.5, 668), (546.25, 874),
            (760, 1216), (852.5, 1364), (1022.5, 1636), (1285, 2056),
        ]
        #expect(expected.map(\.units) == AdvertisingTiming.appleSlowIntervals)
        for (ms, units) in expected {
            #expect(AdvertisingTiming(slowIntervalMs: ms)?.slowInterval == units)
            #expect(AdvertisingTiming(slowInterval: units).violations == [])
        }
    }

    @Test func overridesOutsideTheRulesAreRejected() {
        #expect(AdvertisingTiming(slowIntervalMs: 200) == nil)
        #expect(AdvertisingTiming(slowIntervalMs: 152.6) == nil)
        #expect(AdvertisingTiming(slowInterval: 320).violations.first?.contains("200 ms is not one of Apple's") == true)
        #expect(AdvertisingTiming(fastInterval: 31).violations.first?.contains("outside 20 ms...10240 ms") == true)
        #expect(AdvertisingTiming(fastInterval: 300).violations.count == 1)            // slower than 152.5 ms
        #expect(AdvertisingTiming(fastDuration: .seconds(10)).violations.first?.contains("at least 30 seconds") == true)
        #expect(AdvertisingTiming(fastInterval: 48).violations == [])                   // 30 ms: allowed
    }
}
