import BlemuCore
import Testing

@testable import BlemuAssignedNumbers

/// The generated tables and their lookup: known entries, unknown numbers, the tables' ends.
@Suite struct AssignedNumbersTests {
    @Test func knownStandardUUIDsAreNamed() {
        #expect(AssignedNumbers.serviceName(BluetoothUUID(0x180D)) == "Heart Rate")
        #expect(AssignedNumbers.serviceName(BluetoothUUID(0x181A)) == "Environmental Sensing")
        #expect(AssignedNumbers.characteristicName(BluetoothUUID(0x2A37)) == "Heart Rate Measurement")
        #expect(AssignedNumbers.characteristicName(BluetoothUUID(0x2A6E)) == "Temperature")
        #expect(AssignedNumbers.descriptorName(BluetoothUUID(0x2902)) == "Client Characteristic Configuration")
        #expect(AssignedNumbers.descriptorName(BluetoothUUID(0x2904)) == "Characteristic Presentation Format")
        #expect(AssignedNumbers.descriptorName(BluetoothUUID(0x2906)) == "Valid Range")
        #expect(AssignedNumbers.unitName(0x272F) == "Celsius temperature (degree Celsius)")
        #expect(AssignedNumbers.companyName(0x004C) == "Apple, Inc.")
        #expect(AssignedNumbers.companyName(0x0059) == "Nordic Semiconductor ASA")
    }

    /// The Nordic database calls 0x2901 "Characteristic User Descriptor"; the SIG (Assigned Numbers
    /// 3.7, Core Vol 3, Part G, 3.3.3.2) says "Description": the generator's CORRECTIONS put it back.
    @Test func theUserDescriptionDescriptorHasTheSIGsName() {
        #expect(AssignedNumbers.descriptorName(BluetoothUUID(0x2901)) == "Characteristic User Description")
    }

    @Test func unknownNumbersAndOtherKindsAreNotNamed() {
        // A characteristic's UUID is not a service's, and a 128-bit UUID is nobody's here.
        #expect(AssignedNumbers.serviceName(BluetoothUUID(0x2A37)) == nil)
        #expect(AssignedNumbers.characteristicName(BluetoothUUID(0x180D)) == nil)
        #expect(AssignedNumbers.descriptorName(BluetoothUUID(0x2A00)) == nil)
        #expect(AssignedNumbers.serviceName(BluetoothUUID("7d3c0100-9a5e-4d1a-8f6e-5c1b2d3e4f50")!) == nil)
        // 0x180D's 16 bits inside a UUID not on the SIG's base.
        #expect(AssignedNumbers.serviceName(BluetoothUUID("0000180d-0000-1000-8000-00805f9b34fc")!) == nil)
        #expect(AssignedNumbers.companyName(0xFFFE) == nil)  // between the last assigned and 0xFFFF
        #expect(AssignedNumbers.unitName(0x2600) == nil)
    }

    @Test func appearanceNamesSubcategoriesAndFallsBackToTheCategory() {
        #expect(AssignedNumbers.appearanceName(0x0000) == "Unknown")
        #expect(AssignedNumbers.appearanceName(0x0601) == "HVAC: Thermostat")
        #expect(AssignedNumbers.appearanceName(0x0340) == "Heart Rate Sensor")
        // A subcategory not in the table: its category.
        #expect(AssignedNumbers.appearanceName(0x063F) == "HVAC")
        #expect(AssignedNumbers.appearanceName(0xFFFF) == nil)
    }

    @Test func lookupFindsTheFirstAndLastEntriesAndNothingBetweenOrBeyond() {
        let table: [(UInt16, StaticString)] = [(0x0000, "zero"), (0x0010, "sixteen"), (0x0011, "seventeen"), (0xFFFF, "last")]
        #expect(AssignedNumbers.lookup(0x0000, in: table).map(\.description) == "zero")
        #expect(AssignedNumbers.lookup(0xFFFF, in: table).map(\.description) == "last")
        #expect(AssignedNumbers.lookup(0x0011, in: table).map(\.description) == "seventeen")
        #expect(AssignedNumbers.lookup(0x000F, in: table) == nil)
        #expect(AssignedNumbers.lookup(0x0012, in: table) == nil)
        #expect(AssignedNumbers.lookup(0x0001, in: []) == nil)
        #expect(AssignedNumbers.lookup(0x0001, in: [(0x0001, "one")]).map(\.description) == "one")
    }

    @Test func everyGeneratedTableIsSortedWithUniqueKeysAndEveryEntryIsFound() {
        for (name, table) in AssignedNumbers.allTables {
            #expect(!table.isEmpty, "\(name)")
            #expect(zip(table, table.dropFirst()).allSatisfy { $0.0 < $1.0 }, "\(name) is not strictly sorted")
            for (key, value) in table {
                #expect(AssignedNumbers.lookup(key, in: table).map(\.description) == value.description, "\(name) \(Hex.word(key))")
            }
        }
        // The first and last company identifiers.
        let companies = AssignedNumberTables.companies
        #expect(AssignedNumbers.companyName(companies.first!.0) == companies.first!.1.description)
        #expect(AssignedNumbers.companyName(companies.last!.0) == companies.last!.1.description)
        #expect(AssignedNumbers.companyName(companies.last!.0 &+ 1) == nil || companies.last!.0 == 0xFFFF)
    }
}

/// The Characteristic Presentation Format (Vol 3, Part G, 3.3.3.5) and values decoded with it.
@Suite struct PresentationFormatTests {
    func format(_ format: UInt8, exponent: Int8 = 0, unit: UInt16 = 0x2700) -> PresentationFormat {
        PresentationFormat([format, UInt8(bitPattern: exponent), UInt8(unit & 0xFF), UInt8(unit >> 8), 0x01, 0x00, 0x00])!
    }

    @Test func theThermostatsTargetDecodesToDegreesCelsius() {
        // What the thermostat serves: sint16, exponent -2, 0x272F; `ca08` is 2250.
        let target = format(0x0E, exponent: -2, unit: 0x272F)
        #expect(target.decode([0xCA, 0x08]) == "22.50 °C")
        #expect(target.decode([0xFB, 0xFF]) == "-0.05 °C")
        #expect(target.decode([0x00, 0x80]) == "-327.68 °C")
        #expect(target.decode([0x00, 0x00]) == "0.00 °C")
    }

    @Test func integerFormatsSignsAndExponents() {
        #expect(format(0x04).decode([0xFF]) == "255")
        #expect(format(0x0C).decode([0xFF]) == "-1")
        #expect(format(0x0C).decode([0x80]) == "-128")
        #expect(format(0x06, unit: 0x2703).decode([0x2C, 0x01]) == "300 s")
        #expect(format(0x07).decode([0x01, 0x02, 0x03]) == "197121")
        #expect(format(0x0F).decode([0xFF, 0xFF, 0xFF]) == "-1")
        #expect(format(0x08, exponent: 3).decode([0x02, 0, 0, 0]) == "2000")
        #expect(format(0x12).decode([0, 0, 0, 0, 0, 0, 0, 0x80]) == "-9223372036854775808")
        #expect(format(0x0A).decode([0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF]) == "18446744073709551615")
        #expect(format(0x04, unit: 0x27AD).decode([95]) == "95 %")
        #expect(format(0x01).decode([1]) == "true")
        #expect(format(0x19).decode([0x68, 0x1B]) == "\"h\\x1b\"")
    }

    @Test func farExponentsAreScientificNotBoundlessStrings() {
        #expect(format(0x04, exponent: 127).decode([5]) == "5e127")
        #expect(format(0x04, exponent: -128).decode([5]) == "5e-128")
        #expect(format(0x04, exponent: -3).decode([5]) == "0.005")
    }

    @Test func wrongLengthsAndUnknownFormatsAreNotDecoded() {
        #expect(format(0x0E).decode([0x01]) == nil)
        #expect(format(0x0E).decode([0x01, 0x02, 0x03]) == nil)
        #expect(format(0x04).decode([]) == nil)
        #expect(format(0x1B).decode([0x01]) == nil)  // struct
        #expect(format(0x01).decode([2]) == nil)
        #expect(PresentationFormat([0x0E, 0xFE, 0x2F, 0x27, 0x01, 0x00]) == nil)
        #expect(PresentationFormat([]) == nil)
    }

    @Test func unitsWithoutASymbolUseTheTablesName() {
        #expect(format(0x04, unit: 0x2781).unitText == "millimetre of mercury")
        #expect(format(0x04, unit: 0x27FF).unitText == "(unit 0x27ff)" || AssignedNumbers.unitName(0x27FF) != nil)
    }
}
