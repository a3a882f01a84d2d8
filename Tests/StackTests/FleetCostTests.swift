import BlemuStack
import Logging
import Testing

/// What `blemu run` asks after every HCI event stays cheap with a thousand devices (issue 38,
/// "Cost that stays flat"; PERFORMANCE.md, "What a fleet costs").
@Suite struct FleetCostTests {
    static let quiet = Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })

    /// Once start-up's pages went back, whether every device advertises is not asked again: it
    /// was asked after every HCI event, over every device, for the whole run.
    @Test func startUpsPagesAreReleasedOnceAndTheQuestionIsNotAskedAfter() {
        var pages = StartupPages()
        var asked = 0
        func everyDeviceAdvertises(_ answer: Bool) -> Bool {
            asked += 1
            return answer
        }
        pages.release(once: everyDeviceAdvertises(false), logger: Self.quiet)
        #expect(!pages.released)
        pages.release(once: everyDeviceAdvertises(true), logger: Self.quiet)
        #expect(pages.released)
        for _ in 0..<1000 { pages.release(once: everyDeviceAdvertises(true), logger: Self.quiet) }
        #expect(asked == 2)
    }

    /// A thousand devices coming to advertise one by one, out of order, with an event after
    /// each: every device is looked at a few times in all, not the whole list at each event.
    @Test func everyItemHoldsLooksAtEachItemAFewTimesNotTheListAtEachEvent() {
        let count = 1000
        var advertising = [Bool](repeating: false, count: count)
        var holds = EveryItemHolds()
        var looks = 0
        // Connections come up side by side: item i of each of four quarters in turn.
        let order = (0..<count / 4).flatMap { i in (0..<4).map { quarter in quarter * count / 4 + i } }
        var answers: [Bool] = []
        for index in order {
            advertising[index] = true
            answers.append(holds.check(count: count) { looks += 1; return advertising[$0] })
        }
        #expect(answers.dropLast().allSatisfy { !$0 })
        #expect(answers.last == true)
        #expect(looks <= 3 * count)
    }

    /// A device before the mark that stopped advertising is found by the last whole look, and
    /// the look starts over from the first.
    @Test func anItemThatStoppedHoldingBeforeTheMarkIsFound() {
        var advertising = [true, true, false]
        var holds = EveryItemHolds()
        #expect(!holds.check(count: 3) { advertising[$0] })
        advertising[0] = false
        advertising[2] = true
        #expect(!holds.check(count: 3) { advertising[$0] })
        advertising[0] = true
        #expect(holds.check(count: 3) { advertising[$0] })
        #expect(holds.check(count: 0) { _ in false })
    }
}
