import BlemuATT
import BlemuCore
import BlemuDevices
import BlemuGATT
import BlemuHCI
import BlemuHost
import BlemuL2CAP
import Testing
@testable import HostTestSupport

/// `Peripheral.eventObserver`: what a central does, told in order, with UUIDs; nothing built
/// while nobody observes.
@Suite struct DeviceEventTests {
    static func bytes(_ handle: UInt16) -> [UInt8] { [UInt8(handle & 0xFF), UInt8(handle >> 8)] }

    @Test func whatACentralDoesIsToldInOrderWithUUIDs() throws {
        let device = HeartRateDevice(seed: 4)
        let bench = try Bench(device: device)
        var events: [DeviceEvent] = []
        bench.peripheral.eventObserver = { events.append($0) }
        bench.controller.connect(handle: 0x0040, peer: bench.central)
        let cccd = try #require(device.measurement.clientConfigurationHandle)
        let point = device.controlPoint.valueHandle
        let location = device.bodySensorLocation.valueHandle
        #expect(bench.att([0x02, 0x00, 0x01]).first?.first == 0x03)
        #expect(bench.att([0x12] + Self.bytes(cccd) + [0x01, 0x00]) == [[0x13]])
        bench.scheduler.advance(by: .seconds(1))
        _ = bench.controller.takeL2CAP(handle: 0x0040, cid: L2CAPChannel.att)
        #expect(bench.att([0x12] + Self.bytes(point) + [0x02]).first?.last == 0x80, "refused: no event")
        #expect(bench.att([0x12] + Self.bytes(point) + [0x01]) == [[0x13]])
        #expect(bench.att([0x0A] + Self.bytes(location)).first?.first == 0x0B)
        bench.controller.disconnect(handle: 0x0040, reason: 0x13)

        // Advertising stops and resumes around the link; measurements may come more than once.
        var kinds: [DeviceEventKind] = []
        for kind in events.map(\.kind) where kind != .advertising && kinds.last != kind { kinds.append(kind) }
        #expect(kinds == [.connected, .mtu, .subscribed, .notification, .write, .read, .unsubscribed, .disconnected], "\(kinds)")
        let peer = try #require(events.first { $0.kind == .connected }?.peer)
        #expect(events.contains(.mtu(peer: peer, mtu: 256)))
        let measurement = EventCharacteristic(device.measurement)
        #expect(events.contains(.subscribed(peer: peer, characteristic: measurement, notify: true, indicate: false)))
        #expect(events.contains(.write(peer: peer, characteristic: EventCharacteristic(uuid: BluetoothUUID(0x2A39), handle: point),
                                       offset: 0, value: [0x01], withResponse: true, prepared: false)))
        #expect(events.contains(.read(peer: peer, characteristic: EventCharacteristic(uuid: BluetoothUUID(0x2A38), handle: location), offset: 0)))
        #expect(events.contains(.unsubscribed(peer: peer, characteristic: measurement, cause: "link closed")))
        #expect(events.contains(.disconnected(peer: peer, reason: 0x13)))
        #expect(events.contains { if case .notification(_, measurement, let value) = $0 { return value.count >= 4 } else { return false } })
        #expect(events.contains { if case .advertising(true, _) = $0 { return true } else { return false } }, "advertising resumes")
    }

    @Test func anObserverSetLaterSeesReadsAndWritesOfLinksAlreadyOpenAndNoneAfterItGoes() throws {
        let device = HeartRateDevice(seed: 4)
        let bench = try Bench(device: device)
        bench.controller.connect(handle: 0x0040, peer: bench.central)
        let location = device.bodySensorLocation.valueHandle
        var events: [DeviceEvent] = []
        bench.peripheral.eventObserver = { events.append($0) }
        _ = bench.att([0x0A] + Self.bytes(location))
        #expect(events.map(\.kind) == [.read])
        bench.peripheral.eventObserver = nil
        _ = bench.att([0x0A] + Self.bytes(location))
        #expect(events.count == 1)
    }

    @Test func indicationsAndTheirConfirmationAreTold() throws {
        let device = ProbeDevice()
        let bench = try Bench(device: device)
        bench.controller.connect(handle: 0x0040, peer: bench.central)
        let cccd = try #require(device.value.clientConfigurationHandle)
        #expect(bench.att([0x12] + Self.bytes(cccd) + [0x02, 0x00]) == [[0x13]])
        var events: [DeviceEvent] = []
        bench.peripheral.eventObserver = { events.append($0) }
        var told: [IndicationOutcome] = []
        let context = try #require(device.context)
        #expect(context.indicate(device.value, to: nil, completion: { _, outcome in told.append(outcome) }, encode: { $0.append(7) }))
        _ = bench.att([0x1E])
        let named = EventCharacteristic(device.value)
        let peer = try #require(events.first?.peer)
        #expect(events == [.indication(peer: peer, characteristic: named, value: [7]),
                           .confirmed(peer: peer, characteristic: named, outcome: .confirmed)])
        #expect(told == [.confirmed], "the device's own completion still runs")
    }
}
