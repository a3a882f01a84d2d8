import BlemuATT
import BlemuCore
import Testing
@testable import BlemuGATT

/// A database placed at given handles (a recorded device replayed, `Service.placement`):
/// attributes exactly where they were, empty handles between them absent, and placements that
/// overlap or come out of order refused when the database is built.
@Suite struct PlacedDatabaseTests {
    static func notifying(_ declaration: UInt16, cccd: UInt16, descriptors: [UInt16] = [],
                          described: [Descriptor] = []) -> Characteristic {
        let c = Characteristic(0x2A37, properties: [.notify], descriptors: described)
        c.placement = CharacteristicPlacement(declaration: declaration, clientConfiguration: cccd, descriptors: descriptors)
        return c
    }

    static func reading(_ declaration: UInt16, uuid: UInt16 = 0x2A38) -> Characteristic {
        let c = Characteristic(uuid, properties: [.read], cachedValue: [1])
        c.placement = CharacteristicPlacement(declaration: declaration)
        return c
    }

    @Test func servicesAndCharacteristicsSitAtTheirHandlesWithGapsAbsent() throws {
        // A GAP service at 0x0010 (not 1, where the stack puts its own), a heart rate service
        // from 0x0020 with a gap between its characteristics and room after them.
        let gap = Service(GATTType.gapService) { Self.reading(0x0011, uuid: 0x2A00) }
        gap.placement = 0x0010...0x0012
        let measurement = Self.notifying(0x0024, cccd: 0x0027, descriptors: [0x0026],
                                         described: [Descriptor.userDescription("HR")])
        let heartRate = Service(0x180D) {
            Self.reading(0x0021)
            measurement
        }
        heartRate.placement = 0x0020...0x0030
        // Declared in another order: placement decides.
        let database = try GATTDatabase(services: [heartRate, gap])
        #expect(database.services.map(\.uuid) == [GATTType.gapService, BluetoothUUID(0x180D)])
        #expect(gap.startHandle == 0x0010 && gap.endHandle == 0x0012)
        #expect(heartRate.startHandle == 0x0020 && heartRate.endHandle == 0x0030)
        #expect(measurement.declarationHandle == 0x0024 && measurement.valueHandle == 0x0025)
        #expect(measurement.clientConfigurationHandle == 0x0027)
        #expect(database.attribute(0x0026)?.type == GATTType.userDescription)
        #expect(database.attribute(0x0027)?.type == GATTType.clientConfiguration)
        let present = (1...0x0030).filter { database.attribute(UInt16($0)) != nil }
        #expect(present == [0x10, 0x11, 0x12, 0x20, 0x21, 0x22, 0x24, 0x25, 0x26, 0x27])
        // The group end is the placed one, past the empty handles (Vol 3, Part G, 3.1).
        #expect(database.attribute(0x0020)?.groupEnd == 0x0030)
        // The declaration names the value handle it was given.
        if case .fixed(let value)? = database.attribute(0x0024)?.content { #expect(Array(value[1...2]) == [0x25, 0x00]) }
        else { Issue.record("no declaration at 0x0024") }
    }

    @Test func unplacedServicesFollowThePlacedOnes() throws {
        let placed = Service(0x180D) { Self.reading(0x0041) }
        placed.placement = 0x0040...0x0042
        let added = Service(0x180F) { Characteristic(0x2A19, properties: [.read], cachedValue: [50]) }
        let database = try GATTDatabase(services: [added, placed])
        #expect(added.startHandle == 0x0043)
        #expect(database.attribute(1) == nil)
    }

    @Test func takingAServiceOutAndBackLeavesItsGapsEmpty() throws {
        let service = Service(0x180D) { Self.reading(0x0004) }
        service.placement = 0x0001...0x0008
        let database = try GATTDatabase(services: [service])
        _ = try database.setService(service, present: false)
        _ = try database.setService(service, present: true)
        #expect((1...8).filter { database.attribute(UInt16($0)) != nil } == [1, 4, 5])
    }

    @Test func overlappingOrOutOfOrderPlacementsAreRefused() {
        func refusal(_ services: [Service]) -> String {
            do { _ = try GATTDatabase(services: services); return "accepted" } catch { return error.description }
        }
        let first = Service(0x180D) { Self.reading(0x0011) }
        first.placement = 0x0010...0x0014
        let second = Service(0x180F) { Self.reading(0x0015) }
        second.placement = 0x0012...0x0016
        #expect(refusal([first, second]).contains("service 180F at handle 0x0012: overlaps or comes before handle 0x0014"))

        let backwards = Service(0x180D) {
            Self.reading(0x0014)
            Self.reading(0x0012, uuid: 0x2A39)
        }
        backwards.placement = 0x0010...0x0020
        #expect(refusal([backwards]).contains("characteristic 2A39 of service 180D at handle 0x0012: overlaps"))

        let short = Service(0x180D) { Self.reading(0x0011) }
        short.placement = 0x0010...0x0011
        #expect(refusal([short]).contains("placed to end at handle 0x0011 but its attributes reach 0x0012"))

        let cccdOnValue = Service(0x180D) { Self.notifying(0x0011, cccd: 0x0012) }
        cccdOnValue.placement = 0x0010...0x0020
        #expect(refusal([cccdOnValue]).contains("a descriptor placed at or before its value"))

        let noCCCD = Characteristic(0x2A37, properties: [.notify])
        noCCCD.placement = CharacteristicPlacement(declaration: 0x0011)
        let missing = Service(0x180D) { noCCCD }
        missing.placement = 0x0010...0x0020
        #expect(refusal([missing]).contains("its placement needs the CCCD's handle"))
    }
}
