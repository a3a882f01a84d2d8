import BlemuATT
import BlemuCore
import Testing
@testable import BlemuGATT

/// Client Supported Features (Vol 3, Part G, 7.2) are the client's, kept in its connection's
/// GATT server session whatever bearer wrote them: bits once set stay set, reserved bits are
/// dropped, and bit 0 makes it a robust-caching client (2.5.2.1).
@Suite struct ClientFeaturesTests {
    @Test func aSessionKeepsTheBitsItsClientSetAndRefusesClearingOne() {
        let session = GATTServerSession()
        #expect(session.clientFeatures == 0 && !session.clientSupportsRobustCaching)
        #expect(session.writeClientFeatures([0x02]) == nil)
        #expect(session.clientFeatures == 0x02 && !session.clientSupportsRobustCaching)
        // 7.2: a client may not clear a bit it has set.
        #expect(session.writeClientFeatures([0x01]) == .valueNotAllowed)
        #expect(session.clientFeatures == 0x02)
        // Reserved bits are not kept; bit 0 is Robust Caching.
        #expect(session.writeClientFeatures([0xFF]) == nil)
        #expect(session.clientFeatures == 0x07 && session.clientSupportsRobustCaching)
        #expect(session.writeClientFeatures([0x07, 0x00]) == .invalidAttributeValueLength)
        #expect(session.writeClientFeatures([]) == .invalidAttributeValueLength)
    }

    @Test func aBondedClientsFeaturesComeBackIntoItsSession() {
        let session = GATTServerSession()
        session.restoreClientFeatures(0x81)
        #expect(session.clientFeatures == 0x01 && session.clientSupportsRobustCaching)
        #expect(session.writeClientFeatures([0x00]) == .valueNotAllowed)
    }

    /// Every bearer of a link reads the one session: features written through the unenhanced
    /// bearer's server are what an enhanced bearer's server sees.
    @Test func theFeaturesAreOneForEveryBearerOfALink() throws {
        let f = try Fixture()
        let bearer = ATTBearer(scheduler: f.scheduler, transport: ATTClosureTransport { _, _ in true }, enhanced: true)
        let enhanced = ATTServer(database: f.database, peer: f.peer, scheduler: f.scheduler, bearer: bearer, session: f.server.session)
        #expect(f.server.session.writeClientFeatures([0x02]) == nil)
        #expect(enhanced.session.clientFeatures == 0x02)
    }
}
