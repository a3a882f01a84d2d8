import BlemuATT
import BlemuCore
import Testing
@testable import BlemuGATT

/// Services taken out and put back at run time (`GATTDatabase.setService`), and what a link
/// does about it (Vol 3, Part G, 2.5.2.1 and 7.1). Handle map: `Fixture`.
@Suite struct DatabaseChangeTests {
    @Test func aServiceTakenOutIsNotThereAndKeepsItsHandlesForLater() throws {
        let f = try Fixture()
        #expect(try f.database.setService(f.custom, present: false) == 23...27)
        #expect(f.database.attribute(25) == nil)
        #expect(f.database.attribute(28)?.type == GATTType.primaryService)
        #expect(f.request("0A 1900") == errorResponse(0x0A, 0x0019, .invalidHandle))
        // Discovery skips the gap: services 1, 7 and 28 remain, with their handles.
        #expect(f.request("10 0100 FFFF 0028") == [bytes("11 06 0100 0300 0018 0700 1600 0D18 1C00 1E00 0A18")])
        #expect(f.request("04 1600 1E00") == [bytes("05 01 1600 0429 1C00 0028 1D00 0328 1E00 292A")])
        #expect(f.database.absent.map(\.uuid) == [longService])
        // Find Information over the gap alone: nothing to return is Attribute Not Found (Vol 3,
        // Part F, 3.4.3.1), not a response without a format (found by the att-server fuzzer).
        #expect(f.request("04 1700 1B00") == errorResponse(0x04, 0x0017, .attributeNotFound))
        // Already out: nothing changes.
        #expect(try f.database.setService(f.custom, present: false) == nil)
        #expect(try f.database.setService(f.custom, present: true) == 23...27)
        #expect(f.request("0A 1900").first?.first == 0x0B)
        #expect(f.database.absent.isEmpty)
    }

    @Test func theHashFollowsTheServicesPresent() throws {
        let f = try Fixture()
        let whole = f.database.hash
        _ = try f.database.setService(f.deviceInformation, present: false)
        let without = f.database.hash
        #expect(without != whole)
        #expect(without.count == 16)
        _ = try f.database.setService(f.deviceInformation, present: true)
        #expect(f.database.hash == whole)
    }

    /// GAP and GATT stay; an included service stays while a present service includes it, and
    /// a service comes back only after what it includes.
    @Test func changesThatWouldBreakTheDatabaseAreRefused() throws {
        let f = try Fixture()
        #expect(throws: GATTDatabaseError.self) { try f.database.setService(f.gap, present: false) }
        #expect(throws: GATTDatabaseError.self) { try f.database.setService(f.battery, present: false) }
        #expect(try f.database.setService(f.heartRate, present: false) == 7...22)
        #expect(try f.database.setService(f.battery, present: false) == 4...6)
        #expect(throws: GATTDatabaseError.self) { try f.database.setService(f.heartRate, present: true) }
        #expect(try f.database.setService(f.battery, present: true) == 4...6)
        #expect(try f.database.setService(f.heartRate, present: true) == 7...22)
        let stranger = Service(0x1810) { Characteristic(0x2A35, properties: [.read], cachedValue: [0]) }
        #expect(throws: GATTDatabaseError.self) { try f.database.setService(stranger, present: false) }
    }

    /// A link forgets subscriptions, long reads and prepared writes in the changed handles.
    @Test func aLinkForgetsWhatItKnewInTheRange() throws {
        let f = try Fixture()
        f.configure(20, 0x0001)
        f.configure(13, 0x0002)
        #expect(f.request("16 1100 0000 3412").count == 1)   // Prepare Write to handle 0x11
        _ = try f.database.setService(f.heartRate, present: false)
        let ended = f.server.databaseChanged(7...22)
        #expect(ended.map(\.characteristic.valueHandle).sorted() == [12, 19])
        #expect(ended.map(\.configuration).sorted() == [1, 2])
        #expect(f.server.notify(f.notifyOnly, value: [1]) == .notSubscribed)
        // The prepared write went with the range: executing writes nothing.
        #expect(f.request("18 01") == [[0x19]])
        #expect(f.log.writes.isEmpty)
        // A client that did not ask for robust caching stays change-aware.
        #expect(f.server.isChangeAware)
    }
}

/// Vol 3, Part G, 2.5.2.1: a robust-caching client is change-unaware after a change until it
/// confirms Service Changed, reads the Database Hash, or was told Database Out Of Sync — each
/// followed by its next request.
@Suite struct RobustCachingTests {
    func unawareClient() throws -> Fixture {
        let f = try Fixture()
        f.server.session.clientSupportsRobustCaching = true
        _ = try f.database.setService(f.custom, present: false)
        #expect(f.server.databaseChanged(23...27).isEmpty)
        #expect(!f.server.isChangeAware)
        return f
    }

    @Test func aRequestForAHandleGetsOutOfSyncThenTheNextIsServed() throws {
        let f = try unawareClient()
        #expect(f.request("0A 0A00") == errorResponse(0x0A, 0x000A, .databaseOutOfSync))
        #expect(f.log.dynamicReads == 0)
        #expect(!f.server.isChangeAware)
        #expect(f.request("0A 0A00") == [bytes("0B 01")])
        #expect(f.server.isChangeAware)
        #expect(f.log.dynamicReads == 1)
    }

    @Test func writesAndPreparedWritesAreRefusedToo() throws {
        let f = try unawareClient()
        #expect(f.request("12 1100 3412") == errorResponse(0x12, 0x0011, .databaseOutOfSync))
        #expect(f.log.writes.isEmpty)
        let g = try unawareClient()
        #expect(g.request("16 0F00 0000 01") == errorResponse(0x16, 0x000F, .databaseOutOfSync))
        let h = try unawareClient()
        #expect(h.request("0E 0A00 1E00") == errorResponse(0x0E, 0x000A, .databaseOutOfSync))
    }

    /// Commands of a change-unaware client are ignored: nothing answers, nothing is written.
    @Test func commandsAreIgnored() throws {
        let f = try unawareClient()
        #expect(f.request("52 0F00 01") == [])
        #expect(f.log.writes.isEmpty)
        #expect(!f.server.isChangeAware)
    }

    /// Discovery is how the client catches up, so it is served and changes nothing.
    @Test func discoveryIsServed() throws {
        let f = try unawareClient()
        #expect(f.request("10 0100 FFFF 0028").first?.first == 0x11)
        #expect(f.request("04 0100 FFFF").first?.first == 0x05)
        #expect(f.request("08 0700 1600 0328").first?.first == 0x09)   // characteristics of a range
        #expect(f.request("02 F700").first?.first == 0x03)
        #expect(!f.server.isChangeAware)
        // Read By Type of anything else over less than the whole range names a handle.
        #expect(f.request("08 0100 0300 002A") == errorResponse(0x08, 0x0001, .databaseOutOfSync))
    }

    @Test func readingTheDatabaseHashThenAnyRequestMakesItAware() throws {
        let f = try unawareClient()
        let hashCharacteristic = Characteristic(GATTType.databaseHash, properties: [.read], length: .fixed(16)) { _, value in
            value.append(contentsOf: [UInt8](repeating: 0xAB, count: 16))
            return nil
        }
        let database = try GATTDatabase(services: [Service(0x1801) { hashCharacteristic }])
        let server = ATTServer(database: database, peer: f.peer, scheduler: f.scheduler)
        let delegate = RecordingDelegate()
        server.record(by: delegate)
        server.session.clientSupportsRobustCaching = true
        _ = server.databaseChanged(1...1)
        server.receive(bytes("08 0100 FFFF 2A2B")[...])
        #expect(delegate.sent.last?.pdu == bytes("09 12 0300") + [UInt8](repeating: 0xAB, count: 16))
        #expect(!server.isChangeAware)
        server.receive(bytes("0A 0300")[...])
        #expect(server.isChangeAware)
        #expect(delegate.sent.last?.pdu == bytes("0B") + [UInt8](repeating: 0xAB, count: 16))
        _ = f
    }

    /// Prepared parts outside the range stay, with their bytes, and are written at Execute.
    @Test func preparedPartsOutsideTheRangeStay() throws {
        let f = try Fixture()
        #expect(f.request("16 1100 0000 AABB").count == 1)   // handle 0x11, in the range
        #expect(f.request("16 0F00 0000 3412").count == 1)   // handle 0x0F, outside it
        #expect(f.request("16 0F00 0200 5678").count == 1)
        _ = f.server.databaseChanged(16...17)
        #expect(f.request("18 01") == [[0x19]])
        #expect(f.log.writes.map(\.handle) == [0x0F])
        #expect(f.log.writes.first?.request.value == [0x34, 0x12, 0x56, 0x78])
    }

    @Test func confirmingServiceChangedMakesItAware() throws {
        let f = try unawareClient()
        f.server.session.serviceChangedConfirmed()
        #expect(f.server.isChangeAware)
        #expect(f.request("0A 0A00") == [bytes("0B 01")])
    }

    @Test func aClosedLinkDoesNotBecomeUnaware() throws {
        let f = try Fixture()
        f.server.session.clientSupportsRobustCaching = true
        _ = f.server.close()
        _ = f.server.databaseChanged(23...27)
        #expect(f.server.isChangeAware)
    }
}
