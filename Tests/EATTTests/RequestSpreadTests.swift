import BlemuEATT
import Testing

/// `RequestSpread`: requests over a link's bearers, at most one outstanding on each (Vol 3,
/// Part F, 3.3.2), each bearer given the next request only once its own is done.
@Suite struct RequestSpreadTests {
    /// A bearer whose requests the test answers by hand.
    final class Bearer {
        let name: String
        var outstanding: [(request: Int, done: () -> Void)] = []
        var carried: [Int] = []
        var mostAtOnce = 0
        init(_ name: String) { self.name = name }
    }

    private static func start(_ requests: [Int], over bearers: @escaping () -> [Bearer], finished: @escaping (Int) -> Void) {
        RequestSpread<Bearer, Int>.start(requests, over: bearers, run: { request, bearer, done in
            bearer.outstanding.append((request, done))
            bearer.carried.append(request)
            bearer.mostAtOnce = max(bearer.mostAtOnce, bearer.outstanding.count)
        }, then: finished)
    }

    /// Answers the first outstanding request of `bearer`.
    private static func answer(_ bearer: Bearer) {
        guard !bearer.outstanding.isEmpty else { return }
        bearer.outstanding.removeFirst().done()
    }

    @Test func requestsGoOnEveryBearerAtOnceOneEachAndTheNextToTheFirstFree() {
        let bearers = [Bearer("unenhanced"), Bearer("e1"), Bearer("e2")]
        var used: [Int] = []
        Self.start(Array(1...7), over: { bearers }) { used.append($0) }
        // One on each at once, none waiting behind another on the same bearer.
        #expect(bearers.map(\.carried) == [[1], [2], [3]])
        // e2 answers first: it takes the next; the others still have theirs.
        Self.answer(bearers[2])
        #expect(bearers.map(\.carried) == [[1], [2], [3, 4]])
        Self.answer(bearers[2])
        Self.answer(bearers[0])
        #expect(bearers.map(\.carried) == [[1, 6], [2], [3, 4, 5]])
        while bearers.contains(where: { !$0.outstanding.isEmpty }) { bearers.forEach(Self.answer) }
        #expect(bearers.allSatisfy { $0.mostAtOnce == 1 })
        #expect(bearers.flatMap(\.carried).sorted() == Array(1...7))
        #expect(used == [3])
    }

    @Test func oneBearerCarriesThemOneAfterAnother() {
        let bearer = Bearer("unenhanced")
        var used: [Int] = []
        Self.start([1, 2, 3], over: { [bearer] }) { used.append($0) }
        #expect(bearer.carried == [1])
        Self.answer(bearer)
        Self.answer(bearer)
        #expect(used.isEmpty)
        Self.answer(bearer)
        #expect(bearer.carried == [1, 2, 3] && bearer.mostAtOnce == 1)
        #expect(used == [1])
    }

    /// A bearer that closes takes nothing more; the rest go on the others.
    @Test func aClosedBearerTakesNoMore() {
        let unenhanced = Bearer("unenhanced"), enhanced = Bearer("e1")
        var open = [unenhanced, enhanced]
        var used: [Int] = []
        Self.start([1, 2, 3, 4], over: { open }) { used.append($0) }
        open.removeLast()
        Self.answer(enhanced)  // its request ended (failed as the channel closed)
        #expect(enhanced.carried == [2])
        Self.answer(unenhanced)
        Self.answer(unenhanced)
        Self.answer(unenhanced)
        #expect(unenhanced.carried == [1, 3, 4])
        #expect(used == [2])
    }

    /// A request that ends at once (a closed client fails before the call returns) and a
    /// `done` called twice end nothing twice.
    @Test func requestsDoneAtOnceOrTwiceFinishOnce() {
        let bearer = Bearer("closed")
        var used: [Int] = []
        RequestSpread<Bearer, Int>.start([1, 2, 3], over: { [bearer] }, run: { request, bearer, done in
            bearer.carried.append(request)
            done()
            done()
        }, then: { used.append($0) })
        #expect(bearer.carried == [1, 2, 3])
        #expect(used == [1])
    }

    @Test func noRequestsFinishAtOnce() {
        var used: [Int] = []
        Self.start([], over: { [Bearer("b")] }) { used.append($0) }
        #expect(used == [0])
    }
}
