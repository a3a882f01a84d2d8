import BlemuATT
import BlemuCore
import Testing
@testable import BlemuGATT

@Suite struct GATTDatabaseTests {
    @Test func handlesAreContiguousFromOne() throws {
        let f = try Fixture()
        #expect(f.database.attributes.map(\.handle) == Array(1...30))
        #expect(f.database.lastHandle == 30)
        #expect(f.database.attribute(0) == nil)
        #expect(f.database.attribute(31) == nil)
        #expect(f.database.attribute(0xFFFF) == nil)
        #expect(f.database.attribute(30)?.handle == 30)
    }

    /// Vol 3, Part G, 3.1: a service group runs from its declaration to the last attribute
    /// before the next service declaration.
    @Test func serviceGroupHandles() throws {
        let f = try Fixture()
        let ranges = [f.gap, f.battery, f.heartRate, f.custom, f.deviceInformation].map { [$0.startHandle, $0.endHandle] }
        #expect(ranges == [[1, 3], [4, 6], [7, 22], [23, 27], [28, 30]])
        let declarations = f.database.attributes.filter {
            $0.type == GATTType.primaryService || $0.type == GATTType.secondaryService
        }
        #expect(declarations.map(\.handle) == [1, 4, 7, 23, 28])
        #expect(declarations.map(\.groupEnd) == [3, 6, 22, 27, 30])
        #expect(declarations.map(\.type) == [GATTType.primaryService, GATTType.secondaryService,
                                             GATTType.primaryService, GATTType.primaryService,
                                             GATTType.primaryService])
    }

    /// Vol 3, Part G, 3.1: the service declaration's value is the service UUID, 2 or 16 octets.
    @Test func serviceDeclarationValues() throws {
        let f = try Fixture()
        #expect(fixedValue(f.database, 1) == bytes("0018"))
        #expect(fixedValue(f.database, 4) == bytes("0F18"))
        #expect(fixedValue(f.database, 23) == longServiceWire)
    }

    /// Vol 3, Part G, 3.2: Include = included service handle, end group handle, and the
    /// service UUID only when it is a 16-bit one.
    @Test func includeDeclaration() throws {
        let f = try Fixture()
        #expect(f.database.attribute(8)?.type == GATTType.include)
        #expect(fixedValue(f.database, 8) == bytes("0400 0600 0F18"))

        let secondary = Service(longService, primary: false) {
            Characteristic(0x2A00, properties: [.read], cachedValue: [0])
        }
        let including = Service(0x180D, includes: [secondary]) {
            Characteristic(0x2A01, properties: [.read], cachedValue: [0, 0])
        }
        let database = try GATTDatabase(services: [secondary, including])
        #expect(fixedValue(database, 5) == bytes("0100 0300"))
    }

    /// Vol 3, Part G, 3.3.1: properties, value handle, characteristic UUID; the value follows
    /// the declaration directly.
    @Test func characteristicDeclarationValues() throws {
        let f = try Fixture()
        let expected: [UInt16: [UInt8]] = [
            2: bytes("02 0300 002A"),
            5: bytes("02 0600 192A"),
            9: bytes("02 0A00 382A"),
            11: bytes("30 0C00 372A"),
            14: bytes("0C 0F00 392A"),
            16: bytes("0A 1100 6E2A"),
            18: bytes("10 1300 3A2A"),
            24: bytes("02 1900") + longCharacteristicWire,
            29: bytes("02 1E00 292A"),
        ]
        let declarations = f.database.attributes.filter { $0.type == GATTType.characteristic }
        #expect(declarations.map(\.handle) == expected.keys.sorted())
        for (handle, value) in expected {
            #expect(fixedValue(f.database, handle) == value, "declaration \(handle)")
        }
        let characteristics = [f.nameCharacteristic, f.batteryLevel, f.dynamicRead, f.notifyIndicate, f.writable,
                               f.fixedLength, f.notifyOnly, f.long, f.manufacturer]
        #expect(characteristics.map(\.declarationHandle) == [2, 5, 9, 11, 14, 16, 18, 24, 29])
        #expect(characteristics.map(\.valueHandle) == [3, 6, 10, 12, 15, 17, 19, 25, 30])
        for c in characteristics {
            #expect(f.database.attribute(c.valueHandle)?.type == c.uuid)
        }
    }

    /// Vol 3, Part G, 3.3.3.3: a CCCD exists for (and only for) characteristics that notify or indicate.
    @Test func clientConfigurationOnlyForNotifyAndIndicate() throws {
        let f = try Fixture()
        let cccds = f.database.attributes.filter { $0.type == GATTType.clientConfiguration }.map(\.handle)
        #expect(cccds == [13, 20])
        #expect(f.notifyIndicate.clientConfigurationHandle == 13)
        #expect(f.notifyOnly.clientConfigurationHandle == 20)
        for c in [f.nameCharacteristic, f.batteryLevel, f.dynamicRead, f.writable, f.fixedLength, f.long, f.manufacturer] {
            #expect(c.clientConfigurationHandle == nil, "\(c.uuid)")
        }
    }

    /// Vol 3, Part G, 3.3.3.2 and 3.3.3.5.
    @Test func descriptors() throws {
        let f = try Fixture()
        #expect(f.database.attribute(21)?.type == GATTType.userDescription)
        #expect(fixedValue(f.database, 21) == Array("Notify".utf8))
        #expect(f.database.attribute(22)?.type == GATTType.presentationFormat)
        // Format uint8 (0x04), exponent 0, unit 0x27AD, name space 0x01 (Bluetooth SIG), description 0.
        #expect(fixedValue(f.database, 22) == bytes("04 00 AD27 01 0000"))
        #expect(f.database.attribute(26)?.type == customDescriptor)
        #expect(fixedValue(f.database, 26) == [1, 2, 3])
    }

    @Test func permissionsFollowProperties() throws {
        let f = try Fixture()
        let readable = f.database.attributes.filter(\.readable).map(\.handle)
        // Everything except the values of the two characteristics without .read and the writable one.
        #expect(readable == Array(1...30).filter { ![12, 15, 19].contains($0) })
        let writable = f.database.attributes.filter(\.writable).map(\.handle)
        #expect(writable == [13, 15, 17, 20])
    }

    @Test func lookupByUUID() throws {
        let f = try Fixture()
        #expect(f.database.characteristic(BluetoothUUID(0x2A39)) === f.writable)
        #expect(f.database.characteristic(longCharacteristic) === f.long)
        #expect(f.database.characteristic(BluetoothUUID(0x2A99)) == nil)
    }

    // MARK: Declarations the database refuses

    /// Core Bluetooth's rule: a cached value is served without asking the device, so it must
    /// never change: no writes, no notifications.
    @Test(arguments: [CharacteristicProperties.notify, .indicate, .write, .writeWithoutResponse,
                      [.read, .notify], [.read, .write]])
    func cachedValueMustBeReadOnly(_ properties: CharacteristicProperties) {
        let c = Characteristic(0x2A19, properties: properties, cachedValue: [0x64],
                               onWrite: properties.isDisjoint(with: [.write, .writeWithoutResponse]) ? nil : { _ in nil })
        expectBuildError(containing: "read-only", [Service(0x180F) { c }])
    }

    @Test func readableNeedsCachedValueOrOnRead() {
        expectBuildError(containing: "onRead", [Service(0x180F) { Characteristic(0x2A19, properties: [.read]) }])
    }

    @Test func writableNeedsOnWrite() {
        expectBuildError(containing: "onWrite", [Service(0x180F) { Characteristic(0x2A19, properties: [.write]) }])
        expectBuildError(containing: "onWrite",
                         [Service(0x180F) { Characteristic(0x2A19, properties: [.writeWithoutResponse]) }])
    }

    @Test func cachedValueOver512BytesIsRefused() {
        let c = Characteristic(0x2A00, properties: [.read], cachedValue: [UInt8](repeating: 0x41, count: 513))
        expectBuildError(containing: "512", [Service(0x1800) { c }])
        let ok = Characteristic(0x2A00, properties: [.read], cachedValue: [UInt8](repeating: 0x41, count: 512))
        #expect(throws: Never.self) { try GATTDatabase(services: [Service(0x1800) { ok }]) }
    }

    @Test func cachedValueWithHandlersIsRefused() {
        let c = Characteristic(0x2A00, properties: [.read], cachedValue: [1], onRead: { _, value in value.append(2); return nil })
        expectBuildError(containing: "cached", [Service(0x1800) { c }])
    }

    @Test func declaredCCCDIsRefused() {
        let c = Characteristic(0x2A37, properties: [.notify],
                               descriptors: [Descriptor(uuid: GATTType.clientConfiguration, value: [0, 0])])
        expectBuildError(containing: "CCCD", [Service(0x180D) { c }])
    }

    @Test func includedServiceMustBeDeclaredFirst() {
        let later = Service(0x180F, primary: false) { Characteristic(0x2A19, properties: [.read], cachedValue: [1]) }
        let including = Service(0x180D, includes: [later]) {
            Characteristic(0x2A38, properties: [.read], cachedValue: [1])
        }
        expectBuildError(containing: "declared before", [including, later])
    }
}

func fixedValue(_ database: GATTDatabase, _ handle: UInt16) -> [UInt8]? {
    guard let attribute = database.attribute(handle), case .fixed(let value) = attribute.content else { return nil }
    return value
}

func expectBuildError(containing text: String, _ services: [Service], sourceLocation: SourceLocation = #_sourceLocation) {
    do {
        _ = try GATTDatabase(services: services)
        Issue.record("database built, expected an error mentioning \"\(text)\"", sourceLocation: sourceLocation)
    } catch {
        #expect(error.description.contains(text), "\(error.description)", sourceLocation: sourceLocation)
    }
}

@Suite struct DeclarationRuleTests {
    /// Vol 3, Part G, 3.3.1.1: the Extended Properties bit and its descriptor go together.
    @Test func extendedPropertiesNeedTheirDescriptor() throws {
        let bare = Characteristic(0x2A00, properties: [.read, .extendedProperties], cachedValue: [1])
        #expect(throws: GATTDatabaseError.self) { try GATTDatabase(services: [Service(0x1800) { bare }]) }
        let orphan = Characteristic(0x2A00, properties: [.read], cachedValue: [1],
                                    descriptors: [Descriptor(uuid: GATTType.extendedProperties, value: [0x01, 0x00])])
        #expect(throws: GATTDatabaseError.self) { try GATTDatabase(services: [Service(0x1800) { orphan }]) }
        let both = Characteristic(0x2A00, properties: [.read, .extendedProperties], cachedValue: [1],
                                  descriptors: [Descriptor(uuid: GATTType.extendedProperties, value: [0x01, 0x00])])
        let database = try GATTDatabase(services: [Service(0x1800) { both }])
        #expect(database.attribute(4)?.type == GATTType.extendedProperties)
    }

    @Test func broadcastIsRefusedWithAReason() {
        let c = Characteristic(0x2A00, properties: [.read, .broadcast], cachedValue: [1])
        #expect(throws: GATTDatabaseError.self) { try GATTDatabase(services: [Service(0x1800) { c }]) }
    }
}
