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
