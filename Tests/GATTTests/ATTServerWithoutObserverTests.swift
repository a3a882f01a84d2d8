import BlemuATT
import BlemuCore
import Testing
@testable import BlemuGATT

/// The server answers on its bearer whether or not anyone observes it: its delegate hears of
/// requests answered (statistics, watch events) but the answer never waits on it.
@Suite struct ATTServerWithoutObserverTests {
    /// A server on a bearer with a transport of its own (as on a link or a channel), with no
    /// delegate at all: a read, an error and an MTU exchange are answered as with one.
    @Test func aServerWithNoDelegateStillAnswersOnItsBearer() throws {
        let f = try Fixture()
        var sent: [[UInt8]] = []
        let transport = ATTClosureTransport { pdu, _ in sent.append(Array(pdu)); return true }
        let bearer = ATTBearer(scheduler: f.scheduler, transport: transport, enhanced: true)
        let server = ATTServer(database: f.database, peer: f.peer, scheduler: f.scheduler, bearer: bearer)
        #expect(server.delegate == nil)
        bearer.receive(bytes("0A 0600")[...])
        bearer.receive(bytes("0A 0000")[...])
        #expect(sent == [bytes("0B 64"), bytes("01 0A 0000 01")])
    }

    /// Enhanced bearers of one link share the connection's session: a CCCD written on one is the
    /// client's on every bearer (Vol 3, Part G, 3.3.3.3), and closing an enhanced bearer's
    /// server leaves it to the link.
    @Test func theBearersOfALinkShareOneSession() throws {
        let f = try Fixture()
        let bearer = ATTBearer(scheduler: f.scheduler, transport: ATTClosureTransport { _, _ in true }, enhanced: true)
        let enhanced = ATTServer(database: f.database, peer: f.peer, scheduler: f.scheduler, bearer: bearer, session: f.server.session)
        bearer.receive(bytes("12 1400 0100")[...])
        #expect(f.server.isSubscribed(f.notifyOnly, indications: false))
        #expect(enhanced.close().isEmpty)
        #expect(f.server.session.clientConfiguration(f.notifyOnly) == 0x0001)
        #expect(f.server.close().map(\.configuration) == [0x0001])
    }
}

/// Who watches a server's requests is installed only while wanted (`ATTServerWatch`): with
/// nobody, a request that goes well calls nothing outside the server and is only counted in the
/// connection's session; a watcher installed later hears every request, and nothing once removed.
@Suite struct ATTServerWatchTests {
    /// Counts every call a server makes to its owner, of either protocol.
    final class Counting: ATTServerDelegate, ATTServerObserver {
        var delegateCalls = 0
        var refused: [ATTError] = []
        var answered = 0
        var reads: [UInt16] = []
        var writes: [[UInt8]] = []
        func attServer(_ server: ATTServer, refused opcode: UInt8, handle: UInt16, error: ATTError) {
            delegateCalls += 1
            refused.append(error)
        }
        func attServer(_ server: ATTServer, mtuChanged mtu: Int) { delegateCalls += 1 }
        func attServer(_ server: ATTServer, configured characteristic: Characteristic, from old: UInt16, to new: UInt16) { delegateCalls += 1 }
        func attServerTransactionTimedOut(_ server: ATTServer) { delegateCalls += 1 }
        func attServerIndicationQueueHasRoom(_ server: ATTServer) { delegateCalls += 1 }
        func attServer(_ server: ATTServer, authorize characteristic: Characteristic, access: AttributeAccess) -> Bool {
            delegateCalls += 1
            return false
        }
        func attServer(_ server: ATTServer, answered opcode: UInt8, handle: UInt16, error: ATTError?) { answered += 1 }
        func attServer(_ server: ATTServer, read characteristic: Characteristic, offset: Int) { reads.append(characteristic.valueHandle) }
        func attServer(_ server: ATTServer, wrote characteristic: Characteristic, request: WriteRequest, prepared: Bool) {
            writes.append(Array(request.value))
        }
    }

    /// A server on a bearer of its own (as on a link), its requests counted by a `Counting`.
    static func rig() throws -> (Fixture, ATTServer, Counting, ATTServerWatch) {
        let f = try Fixture()
        let bearer = ATTBearer(scheduler: f.scheduler, transport: ATTClosureTransport { _, _ in true }, enhanced: true)
        let watch = ATTServerWatch()
        let server = ATTServer(database: f.database, peer: f.peer, scheduler: f.scheduler, bearer: bearer, watch: watch)
        let counting = Counting()
        server.delegate = counting
        return (f, server, counting, watch)
    }

    @Test func withNobodyWatchingARequestThatGoesWellCallsNothingAndIsCounted() throws {
        let (f, server, counting, watch) = try Self.rig()
        #expect(!watch.isWatched)
        // Reads of a cached value, a dynamic value, a write and a discovery request.
        server.receive(bytes("0A 0600")[...])
        server.receive(bytes("0A 0A00")[...])
        server.receive(bytes("12 0F00 0102")[...])
        server.receive(bytes("10 0100 FFFF 0028")[...])
        #expect(counting.delegateCalls == 0 && counting.answered == 0 && counting.reads.isEmpty && counting.writes.isEmpty)
        #expect(f.log.dynamicReads == 1 && f.log.writes.count == 1, "the device still served them")
        #expect(server.session.requestsAnswered == 4)
        // An error is what the owner always hears (statistics, logs, security), and is counted too.
        server.receive(bytes("0A 1300")[...])
        #expect(counting.delegateCalls == 1 && counting.refused == [ATTError.readNotPermitted])
        #expect(server.session.requestsAnswered == 5)
    }

    @Test func aWatcherInstalledLaterHearsEveryServerOfTheWatchAndNothingOnceRemoved() throws {
        let (f, server, counting, watch) = try Self.rig()
        server.receive(bytes("0A 0A00")[...])
        // An enhanced bearer's server made with the same watch, as a device's are.
        let bearer = ATTBearer(scheduler: f.scheduler, transport: ATTClosureTransport { _, _ in true }, enhanced: true)
        let enhanced = ATTServer(database: f.database, peer: f.peer, scheduler: f.scheduler, bearer: bearer,
                                 session: server.session, watch: watch)
        let observer = Counting()
        watch.install(observer)
        server.receive(bytes("0A 0A00")[...])
        enhanced.receive(bytes("12 0F00 0304")[...])
        #expect(observer.answered == 2 && observer.reads == [0x0A] && observer.writes == [[3, 4]])
        // Only what it asked for.
        watch.install(observer, answers: false, reads: false, writes: true)
        server.receive(bytes("0A 0A00")[...])
        enhanced.receive(bytes("52 0F00 05")[...])
        #expect(observer.answered == 2 && observer.reads == [0x0A] && observer.writes == [[3, 4], [5]])
        watch.remove()
        server.receive(bytes("0A 0A00")[...])
        enhanced.receive(bytes("12 0F00 06")[...])
        #expect(observer.answered == 2 && observer.reads == [0x0A] && observer.writes == [[3, 4], [5]])
        #expect(counting.delegateCalls == 0)
        #expect(server.session.requestsAnswered == 6, "the write command has no answer")
    }
}
