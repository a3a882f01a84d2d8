import BlemuATT
import BlemuCore
import Testing
@testable import BlemuGATT

@Suite struct ATTServerMTUTests {
    /// Vol 3, Part F, 3.4.2: the server answers with its Rx MTU; ATT_MTU becomes the smaller of
    /// the two, and only after the response has gone out at the old MTU.
    @Test func exchangeMTU() throws {
        let f = try Fixture()
        #expect(f.server.mtu == 23)
        #expect(f.request("02 6400") == [bytes("03 0502")])
        #expect(f.delegate.sent.last?.mtu == 23)
        #expect(f.server.mtu == 100)
        #expect(f.delegate.mtuChanges == [100])
    }

    /// 3.4.2.2: a Client Rx MTU below the default leaves ATT_MTU at the default.
    @Test func clientMTUBelowDefaultKeepsDefault() throws {
        let f = try Fixture()
        #expect(f.request("02 0A00") == [bytes("03 0502")])
        #expect(f.server.mtu == 23)
        #expect(f.delegate.mtuChanges.isEmpty)
    }

    @Test func clientMTUAboveServerIsCapped() throws {
        let f = try Fixture()
        #expect(f.request("02 FFFF") == [bytes("03 0502")])
        #expect(f.server.mtu == 517)
    }

    @Test func serverRxMTUIsConfigurable() throws {
        let f = try Fixture()
        let small = ATTServer(database: f.database, peer: f.peer, scheduler: f.scheduler, serverRxMTU: 64)
        small.record(by: f.delegate)
        small.receive(bytes("02 0002")[...])
        #expect(f.delegate.sent.last?.pdu == bytes("03 4000"))
        #expect(small.mtu == 64)
    }

    @Test func malformedExchangeMTUIsInvalidPDU() throws {
        let f = try Fixture()
        #expect(f.request("02 64") == errorResponse(0x02, 0, .invalidPDU))
        #expect(f.request("02 6400 00") == errorResponse(0x02, 0, .invalidPDU))
        #expect(f.server.mtu == 23)
    }
}

@Suite struct ATTServerReadByGroupTypeTests {
    /// Vol 3, Part G, 4.4.1 Discover All Primary Services, walked to the end. 16-bit and 128-bit
    /// services never share a response (Vol 3, Part F, 3.4.4.10: one length per response).
    @Test func discoverAllPrimaryServices() throws {
        let f = try Fixture()
        #expect(f.request("10 0100 FFFF 0028") == [bytes("11 06 0100 0300 0018 0700 1600 0D18")])
        #expect(f.request("10 1700 FFFF 0028") == [bytes("11 14 1700 1B00") + longServiceWire])
        #expect(f.request("10 1C00 FFFF 0028") == [bytes("11 06 1C00 1E00 0A18")])
        #expect(f.request("10 1F00 FFFF 0028") == errorResponse(0x10, 0x1F, .attributeNotFound))
    }

    @Test func secondaryServices() throws {
        let f = try Fixture()
        #expect(f.request("10 0100 FFFF 0128") == [bytes("11 06 0400 0600 0F18")])
        #expect(f.request("10 0500 FFFF 0128") == errorResponse(0x10, 0x05, .attributeNotFound))
    }

    @Test func groupTypeAs128BitUUID() throws {
        let f = try Fixture()
        // 00002800-0000-1000-8000-00805F9B34FB is «Primary Service» (Vol 3, Part F, 3.2.1).
        #expect(f.request(bytes("10 0100 FFFF FB349B5F 80000080 00100000 00280000"))
                == [bytes("11 06 0100 0300 0018 0700 1600 0D18")])
    }

    @Test func rangeLimitsTheResponse() throws {
        let f = try Fixture()
        #expect(f.request("10 0100 0700 0028") == [bytes("11 06 0100 0300 0018 0700 1600 0D18")])
        #expect(f.request("10 0100 0600 0028") == [bytes("11 06 0100 0300 0018")])
        #expect(f.request("10 0200 0600 0028") == errorResponse(0x10, 0x02, .attributeNotFound))
    }

    @Test func fitsAtLargerMTU() throws {
        let f = try Fixture()
        f.exchangeMTU(100)
        // Still stops at the 128-bit service: the length may not change within a response.
        #expect(f.request("10 0100 FFFF 0028") == [bytes("11 06 0100 0300 0018 0700 1600 0D18")])
    }

    @Test func atMinimumMTUOnlyThreeEntriesFit() throws {
        // Four 16-bit primary services: 2 + 3 × 6 = 20 octets fit in 23, a fourth would not.
        let services = (0..<4).map { i in
            Service(0x1800 + UInt16(i)) { Characteristic(0x2A00, properties: [.read], cachedValue: [UInt8(i)]) }
        }
        let database = try GATTDatabase(services: services)
        let delegate = RecordingDelegate()
        let server = ATTServer(database: database, peer: ATTPeer(connectionHandle: 1, address: BluetoothAddress(value: 1)),
                               scheduler: ManualScheduler())
        server.record(by: delegate)
        server.receive(bytes("10 0100 FFFF 0028")[...])
        #expect(delegate.sent.map(\.pdu) == [bytes("11 06 0100 0300 0018 0400 0600 0118 0700 0900 0218")])
    }

    /// Vol 3, Part G, 2.5.3: only «Primary Service» and «Secondary Service» are grouping types a
    /// client may ask for; anything else is Unsupported Group Type at the starting handle.
    @Test func unsupportedGroupType() throws {
        let f = try Fixture()
        #expect(f.request("10 0100 FFFF 0328") == errorResponse(0x10, 0x0001, .unsupportedGroupType))
        #expect(f.request("10 0500 FFFF 0018") == errorResponse(0x10, 0x0005, .unsupportedGroupType))
    }

    /// Vol 3, Part F, 3.4.4.9: start 0 or start > end is Invalid Handle, naming the start handle.
    @Test func invalidRange() throws {
        let f = try Fixture()
        #expect(f.request("10 0500 0100 0028") == errorResponse(0x10, 0x0005, .invalidHandle))
        #expect(f.request("10 0000 FFFF 0028") == errorResponse(0x10, 0x0000, .invalidHandle))
    }

    @Test func badUUIDLengthIsInvalidPDU() throws {
        let f = try Fixture()
        #expect(f.request("10 0100 FFFF 002800") == errorResponse(0x10, 0, .invalidPDU))
        #expect(f.request("10 0100 FFFF") == errorResponse(0x10, 0, .invalidPDU))
    }
}

@Suite struct ATTServerFindByTypeValueTests {
    /// Vol 3, Part G, 4.4.2 Discover Primary Service by Service UUID: each match with its group end
    /// (Vol 3, Part F, 3.4.3.4).
    @Test func discoverPrimaryServiceByUUID() throws {
        let f = try Fixture()
        #expect(f.request("06 0100 FFFF 0028 0D18") == [bytes("07 0700 1600")])
        #expect(f.request("06 0100 FFFF 0028 0A18") == [bytes("07 1C00 1E00")])
        #expect(f.request("06 0100 FFFF 0028 0018") == [bytes("07 0100 0300")])
        #expect(f.request(bytes("06 0100 FFFF 0028") + longServiceWire) == [bytes("07 1700 1B00")])
        // The secondary service is not a primary service.
        #expect(f.request("06 0100 FFFF 0028 0F18") == errorResponse(0x06, 0x0001, .attributeNotFound))
        #expect(f.request("06 0100 FFFF 0128 0F18") == [bytes("07 0400 0600")])
    }

    @Test func continuesAfterTheLastMatch() throws {
        let f = try Fixture()
        #expect(f.request("06 1700 FFFF 0028 0D18") == errorResponse(0x06, 0x0017, .attributeNotFound))
        #expect(f.request("06 0800 FFFF 0028 0D18") == errorResponse(0x06, 0x0008, .attributeNotFound))
    }

    /// 3.4.3.4: for an attribute that is not a grouping attribute, the group end is its own handle.
    @Test func nonGroupingAttributeEndsAtItself() throws {
        let f = try Fixture()
        #expect(f.request("06 0100 FFFF 0129 4E6F74696679") == [bytes("07 1500 1500")])
    }

    @Test func invalidRange() throws {
        let f = try Fixture()
        #expect(f.request("06 0900 0800 0028 0D18") == errorResponse(0x06, 0x0009, .invalidHandle))
        #expect(f.request("06 0000 0800 0028 0D18") == errorResponse(0x06, 0x0000, .invalidHandle))
        #expect(f.request("06 0100 FFFF 00") == errorResponse(0x06, 0, .invalidPDU))
    }
}

@Suite struct ATTServerFindInformationTests {
    /// Vol 3, Part F, 3.4.3.2: format 0x01 with as many (handle, 16-bit UUID) pairs as fit.
    @Test func format1FillsTheMTU() throws {
        let f = try Fixture()
        #expect(f.request("04 0100 FFFF") == [bytes("05 01 0100 0028 0200 0328 0300 002A 0400 0128 0500 0328")])
        #expect(f.request("04 0D00 0D00") == [bytes("05 01 0D00 0229")])
        #expect(f.request("04 1400 1600") == [bytes("05 01 1400 0229 1500 0129 1600 0429")])
    }

    /// One response carries one format: the list stops where the UUID size changes.
    @Test func splitsAtFormatChange() throws {
        let f = try Fixture()
        #expect(f.request("04 1700 FFFF") == [bytes("05 01 1700 0028 1800 0328")])
        #expect(f.request("04 1900 FFFF") == [bytes("05 02 1900") + longCharacteristicWire])
        #expect(f.request("04 1A00 FFFF") == [bytes("05 02 1A00") + customDescriptorWire])
        #expect(f.request("04 1B00 FFFF") == [bytes("05 01 1B00 0129 1C00 0028 1D00 0328 1E00 292A")])
        f.exchangeMTU(100)
        #expect(f.request("04 1900 FFFF")
                == [bytes("05 02 1900") + longCharacteristicWire + bytes("1A00") + customDescriptorWire])
    }

    @Test func nothingFoundAndInvalidRange() throws {
        let f = try Fixture()
        #expect(f.request("04 1F00 FFFF") == errorResponse(0x04, 0x001F, .attributeNotFound))
        #expect(f.request("04 0300 0200") == errorResponse(0x04, 0x0003, .invalidHandle))
        #expect(f.request("04 0000 0200") == errorResponse(0x04, 0x0000, .invalidHandle))
        #expect(f.request("04 0100 FF") == errorResponse(0x04, 0, .invalidPDU))
        #expect(f.request("04 0100 FFFF 00") == errorResponse(0x04, 0, .invalidPDU))
    }
}

@Suite struct ATTServerReadByTypeTests {
    /// Vol 3, Part G, 4.6.1 Discover All Characteristics of a Service, walked over the whole
    /// database at the default MTU: 2 + 3 × 7 = 23, and the pair length never changes within a
    /// response (Vol 3, Part F, 3.4.4.2), so each 16/128-bit boundary ends one.
    @Test func discoverAllCharacteristics() throws {
        let f = try Fixture()
        #expect(f.request("08 0100 FFFF 0328") == [bytes("09 07 0200 02 0300 002A 0500 02 0600 192A 0900 02 0A00 382A")])
        #expect(f.request("08 0A00 FFFF 0328") == [bytes("09 07 0B00 30 0C00 372A 0E00 0C 0F00 392A 1000 0A 1100 6E2A")])
        #expect(f.request("08 1100 FFFF 0328") == [bytes("09 07 1200 10 1300 3A2A")])
        #expect(f.request("08 1300 FFFF 0328") == [bytes("09 15 1800 02 1900") + longCharacteristicWire])
        #expect(f.request("08 1900 FFFF 0328") == [bytes("09 07 1D00 02 1E00 292A")])
        #expect(f.request("08 1E00 FFFF 0328") == errorResponse(0x08, 0x001E, .attributeNotFound))
    }

    @Test func stopsAtAValueOfDifferentLength() throws {
        let f = try Fixture()
        f.exchangeMTU(100)
        #expect(f.request("08 0100 FFFF 0328") == [bytes("""
            09 07 0200 02 0300 002A 0500 02 0600 192A 0900 02 0A00 382A 0B00 30 0C00 372A
            0E00 0C 0F00 392A 1000 0A 1100 6E2A 1200 10 1300 3A2A
            """)])
    }

    /// Vol 3, Part G, 4.5.1 Find Included Services.
    @Test func findIncludedServices() throws {
        let f = try Fixture()
        #expect(f.request("08 0700 1600 0228") == [bytes("09 08 0800 0400 0600 0F18")])
    }

    /// Vol 3, Part G, 4.8.2 Read Using Characteristic UUID.
    @Test func readUsingCharacteristicUUID() throws {
        let f = try Fixture()
        #expect(f.request("08 0100 FFFF 382A") == [bytes("09 03 0A00 01")])
        #expect(f.log.dynamicReads == 1)
        #expect(f.request("08 0100 FFFF 6E2A") == [bytes("09 04 1100 3412")])
        // A value longer than ATT_MTU - 4 is cut to ATT_MTU - 4 (3.4.4.2).
        #expect(f.request("08 0100 FFFF 002A") == [bytes("09 15 0300") + deviceName.prefix(19)])
    }

    /// 3.4.4.1: when the first attribute in the range would cause an error, that error is the
    /// answer, naming its handle.
    @Test func firstAttributeUnreadable() throws {
        let f = try Fixture()
        #expect(f.request("08 0100 FFFF 3A2A") == errorResponse(0x08, 0x0013, .readNotPermitted))
        #expect(f.request("08 0100 FFFF 372A") == errorResponse(0x08, 0x000C, .readNotPermitted))
    }

    @Test func laterUnreadableAttributeEndsTheList() throws {
        // Two characteristics of one type: the readable first one is returned alone.
        let readable = Characteristic(0x2A3A, properties: [.read], cachedValue: [0x11])
        let unreadable = Characteristic(0x2A3A, properties: [.notify])
        let database = try GATTDatabase(services: [Service(0x180D) { readable; unreadable }])
        let delegate = RecordingDelegate()
        let server = ATTServer(database: database, peer: ATTPeer(connectionHandle: 1, address: BluetoothAddress(value: 1)),
                               scheduler: ManualScheduler())
        server.record(by: delegate)
        server.receive(bytes("08 0100 FFFF 3A2A")[...])
        #expect(delegate.sent.map(\.pdu) == [bytes("09 03 0300 11")])
    }

    @Test func invalidRangeAndPDU() throws {
        let f = try Fixture()
        #expect(f.request("08 0200 0100 0328") == errorResponse(0x08, 0x0002, .invalidHandle))
        #expect(f.request("08 0000 0100 0328") == errorResponse(0x08, 0x0000, .invalidHandle))
        #expect(f.request("08 0100 FFFF 032800") == errorResponse(0x08, 0, .invalidPDU))
        #expect(f.request("08 0100 FFFF") == errorResponse(0x08, 0, .invalidPDU))
    }
}
