import BlemuATT
import BlemuCore
import Testing
@testable import BlemuGATT

@Suite struct ATTServerNotificationTests {
    /// Vol 3, Part G, 4.10: a server notifies only a client that enabled it in its CCCD.
    @Test func notifyOnlyWhenSubscribed() throws {
        let f = try Fixture()
        #expect(f.server.notify(f.notifyOnly, value: [1, 2]) == .notSubscribed)
        #expect(f.delegate.sent.isEmpty)
        f.configure(20, 0x0001)
        #expect(f.server.notify(f.notifyOnly, value: [1, 2]) == .queued)
        #expect(f.sent(.notification) == [bytes("1B 1300 0102")])
        // Indications enabled is not notifications enabled.
        f.configure(13, 0x0002)
        #expect(f.server.notify(f.notifyIndicate, value: [1]) == .notSubscribed)
    }

    /// Vol 3, Part F, 3.4.7.1: the value is cut to ATT_MTU - 3.
    @Test func valueTruncatedToMTUMinusThree() throws {
        let f = try Fixture()
        f.configure(20, 0x0001)
        let value = (0..<30).map { UInt8($0) }
        #expect(f.server.notify(f.notifyOnly, value: value) == .queued)
        #expect(f.sent(.notification).last == bytes("1B 1300") + value.prefix(20))
        f.exchangeMTU(30)
        #expect(f.server.notify(f.notifyOnly, value: value) == .queued)
        #expect(f.sent(.notification).last == bytes("1B 1300") + value.prefix(27))
    }

    @Test func refusedByTheLinkIsQueueFull() throws {
        let f = try Fixture()
        f.configure(20, 0x0001)
        f.delegate.accepts = false
        #expect(f.server.notify(f.notifyOnly, value: [1]) == .queueFull)
        f.delegate.accepts = true
        #expect(f.server.notify(f.notifyOnly, value: [1]) == .queued)
    }
}

@Suite struct ATTServerIndicationTests {
    /// Vol 3, Part F, 3.4.7.2: one indication outstanding; the next waits for the confirmation.
    @Test func oneInFlight() throws {
        let f = try Fixture()
        #expect(f.server.indicate(f.notifyIndicate, value: [1]) == .notSubscribed)
        f.configure(13, 0x0002)
        #expect(f.server.indicate(f.notifyIndicate, value: [1]) == .queued)
        #expect(f.server.indicate(f.notifyIndicate, value: [2]) == .queued)
        #expect(f.server.indicate(f.notifyIndicate, value: [3]) == .queued)
        #expect(f.sent(.indication) == [bytes("1D 0C00 01")])
        #expect(f.server.indicationsWaiting == 3)
        #expect(f.request("1E") == [])
        #expect(f.sent(.indication) == [bytes("1D 0C00 01"), bytes("1D 0C00 02")])
        #expect(f.request("1E") == [])
        #expect(f.request("1E") == [])
        #expect(f.sent(.indication) == [bytes("1D 0C00 01"), bytes("1D 0C00 02"), bytes("1D 0C00 03")])
        #expect(f.server.indicationsWaiting == 0)
        // 3.4.7.3: a confirmation with nothing outstanding is ignored.
        #expect(f.request("1E") == [])
        #expect(f.sent(.indication).count == 3)
        #expect(!f.server.isTimedOut)
    }

    @Test func valueTruncatedToMTUMinusThree() throws {
        let f = try Fixture()
        f.configure(13, 0x0002)
        let value = (0..<30).map { UInt8($0) }
        #expect(f.server.indicate(f.notifyIndicate, value: value) == .queued)
        #expect(f.sent(.indication) == [bytes("1D 0C00") + value.prefix(20)])
    }

    @Test func waitingQueueIsBounded() throws {
        let f = try Fixture()
        f.configure(13, 0x0002)
        #expect(f.server.indicate(f.notifyIndicate, value: [0]) == .queued)
        for i in 1...ATTServer.maxPendingIndications {
            #expect(f.server.indicate(f.notifyIndicate, value: [UInt8(i)]) == .queued)
        }
        #expect(f.server.indicate(f.notifyIndicate, value: [0xFF]) == .queueFull)
        #expect(f.server.indicationsWaiting == ATTServer.maxPendingIndications + 1)
    }

    /// Vol 3, Part F, 3.3.3: a transaction not completed in 30 s has failed; the bearer is dead
    /// and nothing more is sent on it.
    @Test func unconfirmedIndicationTimesOut() throws {
        let f = try Fixture()
        f.configure(13, 0x0003)
        _ = f.server.indicate(f.notifyIndicate, value: [1])
        _ = f.server.indicate(f.notifyIndicate, value: [2])
        f.scheduler.advance(by: .seconds(29))
        #expect(!f.server.isTimedOut)
        #expect(f.delegate.timeouts == 0)
        f.scheduler.advance(by: .seconds(1))
        #expect(f.server.isTimedOut)
        #expect(f.delegate.timeouts == 1)
        // Dead bearer: no responses, no further indications or notifications.
        let sentBefore = f.delegate.sent.count
        #expect(f.request("0A 0300") == [])
        #expect(f.request("1E") == [])
        #expect(f.server.indicate(f.notifyIndicate, value: [3]) != .queued)
        #expect(f.server.notify(f.notifyIndicate, value: [4]) != .queued)
        #expect(f.delegate.sent.count == sentBefore)
        f.scheduler.advance(by: .seconds(60))
        #expect(f.delegate.timeouts == 1)
    }

    @Test func confirmationStopsTheTimer() throws {
        let f = try Fixture()
        f.configure(13, 0x0002)
        _ = f.server.indicate(f.notifyIndicate, value: [1])
        f.scheduler.advance(by: .seconds(20))
        #expect(f.request("1E") == [])
        f.scheduler.advance(by: .seconds(20))
        #expect(!f.server.isTimedOut)
        // The next indication gets its own 30 s.
        _ = f.server.indicate(f.notifyIndicate, value: [2])
        f.scheduler.advance(by: .seconds(29))
        #expect(!f.server.isTimedOut)
        f.scheduler.advance(by: .seconds(2))
        #expect(f.server.isTimedOut)
        #expect(f.delegate.timeouts == 1)
    }
}

/// Each indication a device sends ends once, and it hears how (Zephyr's
/// bt_gatt_indicate_params.func); a device told "queue full" hears when there is room.
@Suite struct IndicationOutcomeTests {
    final class Outcomes {
        var seen: [(value: UInt8, outcome: IndicationOutcome)] = []
        func completion(_ value: UInt8) -> IndicationCompletion {
            { [self] _, outcome in seen.append((value, outcome)) }
        }
    }

    @Test func confirmedInOrder() throws {
        let f = try Fixture()
        let o = Outcomes()
        f.configure(13, 0x0002)
        #expect(f.server.indicate(f.notifyIndicate, value: [1], completion: o.completion(1)) == .queued)
        #expect(f.server.indicate(f.notifyIndicate, value: [2], completion: o.completion(2)) == .queued)
        #expect(o.seen.isEmpty)
        f.request("1E")
        #expect(o.seen.map(\.value) == [1])
        #expect(o.seen.first?.outcome == .confirmed)
        f.request("1E")
        #expect(o.seen.map(\.outcome) == [.confirmed, .confirmed])
        // A stray confirmation completes nothing twice.
        f.request("1E")
        #expect(o.seen.count == 2)
    }

    @Test func timeoutEndsTheOneInFlightAndTheWaitingOnes() throws {
        let f = try Fixture()
        let o = Outcomes()
        f.configure(13, 0x0002)
        _ = f.server.indicate(f.notifyIndicate, value: [1], completion: o.completion(1))
        _ = f.server.indicate(f.notifyIndicate, value: [2], completion: o.completion(2))
        f.scheduler.advance(by: .seconds(30))
        #expect(o.seen.map(\.value) == [1, 2])
        #expect(o.seen.map(\.outcome) == [.timedOut, .timedOut])
    }

    @Test func closingTheLinkEndsEveryOutstandingIndication() throws {
        let f = try Fixture()
        let o = Outcomes()
        f.configure(13, 0x0002)
        f.configure(20, 0x0001)
        _ = f.server.indicate(f.notifyIndicate, value: [1], completion: o.completion(1))
        _ = f.server.indicate(f.notifyIndicate, value: [2], completion: o.completion(2))
        let held = f.server.close()
        #expect(o.seen.map(\.outcome) == [.disconnected, .disconnected])
        // The subscriptions the link held come back, to be reported as ended.
        #expect(held.map(\.characteristic.valueHandle) == [12, 19])
        #expect(held.map(\.configuration) == [0x0002, 0x0001])
        // No timer is left behind, and nothing more goes out.
        #expect(f.scheduler.pendingCount == 0)
        #expect(f.server.indicate(f.notifyIndicate, value: [3], completion: o.completion(3)) == .notSubscribed)
        f.scheduler.advance(by: .seconds(60))
        #expect(o.seen.count == 2)
        #expect(f.server.close().isEmpty)
    }

    @Test func queueFullThenRoom() throws {
        let f = try Fixture()
        f.configure(13, 0x0002)
        _ = f.server.indicate(f.notifyIndicate, value: [0])
        for i in 1...ATTServer.maxPendingIndications { _ = f.server.indicate(f.notifyIndicate, value: [UInt8(i)]) }
        #expect(f.server.indicate(f.notifyIndicate, value: [0xFF]) == .queueFull)
        #expect(f.delegate.roomSignals == 0)
        f.request("1E")
        #expect(f.delegate.roomSignals == 1)
        // Said once per refusal, not on every confirmation.
        f.request("1E")
        #expect(f.delegate.roomSignals == 1)
    }

    /// A link that refuses the indication itself: the device is told "queue full", and room
    /// is signalled by the link below (HCI), not by a confirmation that cannot come.
    @Test func refusedByTheLinkIsNotInFlight() throws {
        let f = try Fixture()
        let o = Outcomes()
        f.configure(13, 0x0002)
        f.delegate.accepts = false
        #expect(f.server.indicate(f.notifyIndicate, value: [1], completion: o.completion(1)) == .queueFull)
        #expect(f.server.indicationsWaiting == 0)
        #expect(f.scheduler.pendingCount == 0)
        f.delegate.accepts = true
        #expect(f.server.indicate(f.notifyIndicate, value: [2], completion: o.completion(2)) == .queued)
        f.request("1E")
        #expect(o.seen.map(\.value) == [2])
    }
}

@Suite struct ATTServerDispatchTests {
    /// Vol 3, Part F, 3.4.1.1: a request the server does not support is answered with Request
    /// Not Supported and handle 0x0000.
    @Test(arguments: [UInt8(0x3F), 0x00, 0x14, 0x15, 0x1F, 0x22, 0x24, 0x30])
    func unknownRequest(_ opcode: UInt8) throws {
        let f = try Fixture()
        #expect(f.request([opcode, 0x01, 0x00]) == errorResponse(opcode, 0x0000, .requestNotSupported))
        #expect(f.request([opcode]) == errorResponse(opcode, 0x0000, .requestNotSupported))
    }

    /// 3.3.1 / 3.4.1.1: an unknown command is ignored.
    @Test(arguments: [UInt8(0x7F), 0x40, 0x53, 0x60, 0xC0, 0xFF])
    func unknownCommand(_ opcode: UInt8) throws {
        let f = try Fixture()
        #expect(f.request([opcode, 0x01, 0x00]) == [])
        #expect(f.delegate.sent.isEmpty)
    }

    /// Responses, notifications and indications are not for a server; it does not answer them.
    @Test(arguments: [UInt8(0x01), 0x03, 0x05, 0x07, 0x09, 0x0B, 0x0D, 0x0F, 0x11, 0x13, 0x17, 0x19, 0x1B, 0x1D, 0x21, 0x23])
    func clientBoundPDUsAreIgnored(_ opcode: UInt8) throws {
        let f = try Fixture()
        #expect(f.request([opcode, 0x01, 0x00, 0x00, 0x00]) == [])
        #expect(f.delegate.sent.isEmpty)
    }

    @Test func emptyPDUIsIgnored() throws {
        let f = try Fixture()
        #expect(f.request([]) == [])
        #expect(f.delegate.sent.isEmpty)
    }

    @Test func answeredReportsEachRequest() throws {
        let f = try Fixture()
        _ = f.request("0A 0300")
        _ = f.request("0A 1300")
        #expect(f.delegate.answered.count == 2)
        #expect(f.delegate.answered[0].opcode == 0x0A)
        #expect(f.delegate.answered[0].error == nil)
        #expect(f.delegate.answered[1].opcode == 0x0A)
        #expect(f.delegate.answered[1].handle == 0x13)
        #expect(f.delegate.answered[1].error == .readNotPermitted)
    }

    /// A PDU that arrives as a slice of a larger buffer (as L2CAP hands it over) is read from its
    /// own start, not from index 0 of the buffer.
    @Test func requestInsideALargerBuffer() throws {
        let f = try Fixture()
        let buffer = bytes("FFFF 0A 0600 FF")
        f.server.receive(buffer[2..<5])
        #expect(f.delegate.sent.map(\.pdu) == [bytes("0B 64")])
        let multiple = bytes("EE 0E 0600 0A00 EE")
        f.server.receive(multiple[1..<6])
        #expect(f.delegate.sent.last?.pdu == bytes("0F 64 01"))
        let prepare = bytes("EE 16 0F00 0000 AB EE")
        f.server.receive(prepare[1..<7])
        #expect(f.delegate.sent.last?.pdu == bytes("17 0F00 0000 AB"))
    }

    /// A device may react to a read by notifying (Battery, Heart Rate): the notification must not
    /// corrupt the response being built for that read.
    @Test func notifyingFromInsideOnReadKeepsResponsesIntact() throws {
        let f = try Fixture()
        f.configure(20, 0x0001)
        let server = f.server
        let notifyOnly = f.notifyOnly
        f.log.duringRead = { _ = server.notify(notifyOnly, value: [0xAA, 0xBB]) }
        #expect(f.request("0A 0A00") == [bytes("0B 01")])
        #expect(f.request("08 0100 FFFF 382A") == [bytes("09 03 0A00 01")])
        #expect(f.request("0E 0600 0A00 1100") == [bytes("0F 64 01 3412")])
        #expect(f.request("20 0600 0A00") == [bytes("21 0100 64 0100 01")])
        #expect(f.sent(.notification).count == 4)
        #expect(f.sent(.notification).allSatisfy { $0 == bytes("1B 1300 AABB") })
    }
}

@Suite struct ATTServerPropertyTests {
    /// Random PDUs, opcodes 0x00–0xFF with random bodies, and well-formed requests with random
    /// fields aimed at the database: the server never traps; each request gets exactly one
    /// response — an Error Response for that opcode or the matching response opcode — each
    /// command none; no PDU it sends exceeds ATT_MTU.
    @Test(arguments: [UInt64(1), 2, 3, 4])
    func randomPDUs(_ seed: UInt64) throws {
        var rng = SplitMix64(seed: 0x5EED_0000 &+ seed)
        let knownOpcodes: [UInt8] = ATTOpcode.allCases.map(\.rawValue)
        var f = try Fixture()
        var requestsSeen = 0
        var successes = 0
        var errors = 0
        for round in 0..<5000 {
            if round % 500 == 0 { f = try Fixture() }
            let pdu = rng.chance(30) ? Self.noise(&rng) : Self.wellFormed(&rng, opcode: knownOpcodes[rng.below(knownOpcodes.count)])
            let opcode = pdu.first ?? 0
            let before = f.delegate.sent.count
            f.server.receive(pdu[...])
            let sent = f.delegate.sent[before...]
            let responses = sent.filter { $0.kind == .response }
            for s in sent {
                #expect(s.pdu.count <= s.mtu, "PDU of \(s.pdu.count) > ATT_MTU \(s.mtu) for \(Hex.bytes(pdu))")
            }
            if !pdu.isEmpty && ATTOpcode.isRequestForm(opcode) {
                requestsSeen += 1
                #expect(responses.count == 1, "request \(Hex.bytes(pdu)) got \(responses.count) responses")
                if let response = responses.first?.pdu {
                    let isError = response.count == 5 && response[0] == 0x01 && response[1] == opcode
                    let isMatching = response.first == opcode &+ 1 && knownOpcodes.contains(opcode)
                    #expect(isError || isMatching, "request \(Hex.bytes(pdu)) answered \(Hex.bytes(response))")
                    if isMatching { successes += 1 }
                    if isError { errors += 1 }
                }
            } else {
                #expect(responses.isEmpty, "non-request \(Hex.bytes(pdu)) answered \(responses.map { Hex.bytes($0.pdu) })")
                // Only a confirmation may release an indication; nothing else sends anything.
                if opcode != ATTOpcode.handleValueConfirmation.rawValue {
                    #expect(sent.isEmpty)
                }
            }
        }
        #expect(requestsSeen > 1500)
        // The generator must reach both the success and the error paths.
        #expect(successes > 250, "successes \(successes)")
        #expect(errors > 500, "errors \(errors)")
    }

    /// Any opcode, any body; never longer than the default ATT_MTU (a link carries no more).
    static func noise(_ rng: inout SplitMix64) -> [UInt8] {
        rng.bytes(rng.below(24))
    }

    static func handle(_ rng: inout SplitMix64) -> UInt16 {
        switch rng.below(10) {
        case 0: return 0
        case 1: return UInt16(truncatingIfNeeded: rng.next())
        case 2: return 0xFFFF
        default: return UInt16(1 + rng.below(32))
        }
    }

    /// A request (or command) of the right shape for `opcode`, with random fields.
    static func wellFormed(_ rng: inout SplitMix64, opcode: UInt8) -> [UInt8] {
        var pdu: [UInt8] = [opcode]
        let types: [UInt16] = [0x2800, 0x2801, 0x2802, 0x2803, 0x2901, 0x2902, 0x2A00, 0x2A38, 0x2A3A, 0x2A6E, 0x1234]
        func range(_ pdu: inout [UInt8], _ rng: inout SplitMix64) {
            pdu.appendLE(handle(&rng))
            pdu.appendLE(rng.chance(50) ? 0xFFFF : handle(&rng))
        }
        switch opcode {
        case 0x02:
            pdu.appendLE([UInt16(10), 23, 50, 100, 517, 0xFFFF][rng.below(6)])
        case 0x04:
            range(&pdu, &rng)
        case 0x06:
            range(&pdu, &rng)
            pdu.appendLE(types[rng.below(types.count)])
            pdu += rng.chance(50) ? [[0x0D, 0x18], [0x0A, 0x18], [0x0F, 0x18]][rng.below(3)] : rng.bytes(rng.below(17))
        case 0x08, 0x10:
            range(&pdu, &rng)
            if rng.chance(90) {
                pdu.appendLE(types[rng.below(types.count)])
            } else {
                pdu += rng.bytes(rng.chance(50) ? 16 : rng.below(18))
            }
        case 0x0A:
            pdu.appendLE(handle(&rng))
        case 0x0C:
            pdu.appendLE(handle(&rng))
            pdu.appendLE(UInt16(rng.chance(80) ? rng.below(120) : rng.below(65536)))
        case 0x0E, 0x20:
            for _ in 0..<(2 + rng.below(5)) { pdu.appendLE(handle(&rng)) }
        case 0x12, 0x52:
            pdu.appendLE(handle(&rng))
            pdu += rng.chance(40) ? [UInt8(rng.below(4)), 0] : rng.bytes(rng.below(19))
        case 0x16:
            pdu.appendLE(handle(&rng))
            pdu.appendLE(UInt16(rng.chance(80) ? rng.below(600) : rng.below(65536)))
            pdu += rng.bytes(rng.below(19))
        case 0x18:
            pdu.append(rng.chance(90) ? UInt8(rng.below(2)) : rng.byte())
        case 0xD2:
            pdu.appendLE(handle(&rng))
            pdu += rng.bytes(rng.below(7) + 12)
        default:
            pdu += rng.bytes(rng.below(10))
        }
        // Now and then, damage the shape: cut it or add a byte.
        if rng.chance(10) { pdu = Array(pdu.prefix(rng.below(pdu.count + 1))) }
        if rng.chance(5) && pdu.count < 23 { pdu.append(rng.byte()) }
        return pdu
    }
}

/// The seeded generator of BlemuCore, under the name these tests use.
typealias SplitMix64 = SeededRandom

/// Multiple Handle Value Notification (Vol 3, Part F, 3.4.7.4): the subscribed values in one
/// PDU when two or more fit ATT_MTU; otherwise plain notifications.
@Suite struct ATTServerMultipleNotificationTests {
    @Test func subscribedValuesGoInOnePDU() throws {
        let f = try Fixture()
        f.configure(20, 0x0001)
        f.configure(13, 0x0001)
        #expect(f.server.notifyMultiple([(f.notifyOnly, [1, 2][...]), (f.notifyIndicate, [3][...])]) == .queued)
        #expect(f.sent(.notification) == [bytes("23 1300 0200 0102 0C00 0100 03")])
    }

    @Test func oneSubscribedValueIsAPlainNotification() throws {
        let f = try Fixture()
        f.configure(20, 0x0001)
        #expect(f.server.notifyMultiple([(f.notifyOnly, [1, 2][...]), (f.notifyIndicate, [3][...])]) == .queued)
        #expect(f.sent(.notification) == [bytes("1B 1300 0102")])
        f.configure(20, 0x0000)
        #expect(f.server.notifyMultiple([(f.notifyOnly, [1][...]), (f.notifyIndicate, [3][...])]) == .notSubscribed)
    }

    /// 1 + 2 * (4 + 10) = 29 bytes do not fit ATT_MTU 23: one notification each, none cut.
    @Test func aListPastATTMTUGoesAsNotificationsEach() throws {
        let f = try Fixture()
        f.configure(20, 0x0001)
        f.configure(13, 0x0001)
        let value = [UInt8](repeating: 7, count: 10)
        #expect(f.server.notifyMultiple([(f.notifyOnly, value[...]), (f.notifyIndicate, value[...])]) == .queued)
        #expect(f.sent(.notification) == [bytes("1B 1300") + value, bytes("1B 0C00") + value])
    }
}
