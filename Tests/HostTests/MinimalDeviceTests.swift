import BlemuCore
import BlemuDevice
import BlemuGATT
import BlemuHCI
import BlemuHost
import BlemuL2CAP
import Testing
@testable import HostTestSupport

// The complete minimal device of Docs/WRITING-A-DEVICE.md ("A complete minimal device"), word
// for word: compiled and run here so the example in the docs cannot rot.

/// `soil`: a soil moisture sensor — one vendor service, one value a central reads and
/// subscribes to, which dries out by 0.01 % a second.
public final class SoilSensorDevice: Device {
    public static let deviceName = "soil"
    public static let summary = "soil moisture sensor: Soil 5e1f0100-…"

    public static let serviceUUID = BluetoothUUID("5e1f0100-3c7a-4b8e-9d21-6f0a1b2c3d4e")!
    public static let moistureUUID = BluetoothUUID("5e1f0101-3c7a-4b8e-9d21-6f0a1b2c3d4e")!

    public let moisture: Characteristic
    public let profile = DeviceProfile(defaultName: "blemu Soil", advertisedServices: [SoilSensorDevice.serviceUUID],
                                       appearance: 0x0540)  // Generic Sensor (Assigned Numbers 2.6)
    /// Hundredths of a percent: 42.00 %.
    public private(set) var hundredths: UInt16 = 4200
    private weak var context: DeviceContext?
    private var timer: TimerID?
    private var listeners: Set<UInt16> = []

    public init() {
        // uint16 (0x06), exponent -2, percentage (0x27AD): `blemu gatt` prints "42.00 %  [6810]"
        // with no decoder of its own (Vol 3, Part G, 3.3.3.5).
        moisture = Characteristic(Self.moistureUUID, properties: [.read, .notify], length: .fixed(2),
                                  descriptors: [.userDescription("Soil moisture"),
                                                .presentationFormat(format: 0x06, exponent: -2, unit: 0x27AD)])
        moisture.onRead = { [weak self] _, value in
            guard let self else { return .unlikelyError }
            value.append(contentsOf: self.bytes)
            return nil
        }
    }

    var bytes: [UInt8] { [UInt8(hundredths & 0xFF), UInt8(hundredths >> 8)] }

    public var services: [Service] {
        [Service(Self.serviceUUID) { moisture }]
    }

    public func start(context: DeviceContext) { self.context = context }

    public func stop() {
        if let timer { context?.scheduler.cancel(timer) }
        timer = nil
    }

    /// A timer only while somebody listens: an idle emulator makes no wakeups. (A closing
    /// link is reported here too, with both false.)
    public func subscriptionChanged(_ characteristic: Characteristic, peer: ATTPeer, notify: Bool, indicate: Bool) {
        if notify || indicate { listeners.insert(peer.connectionHandle) } else { listeners.remove(peer.connectionHandle) }
        if listeners.isEmpty { stop() } else if timer == nil { tick() }
    }

    private func tick() {
        guard let context else { return }
        timer = context.scheduler.schedule(after: .seconds(1)) { [weak self] in
            guard let self else { return }
            hundredths = hundredths > 0 ? hundredths - 1 : 0
            context.notify(moisture, value: bytes)
            tick()
        }
    }
}

@Suite struct MinimalDeviceTests {
    @Test func theMinimalDeviceServesReadsAndNotifiesWhileSubscribed() throws {
        let device = SoilSensorDevice()
        let bench = try Bench(device: device)
        bench.controller.connect(handle: 0x0040, peer: bench.central)
        let handle = device.moisture.valueHandle
        #expect(bench.att([0x0A, UInt8(handle & 0xFF), UInt8(handle >> 8)]) == [[0x0B, 0x68, 0x10]])
        let cccd = try #require(device.moisture.clientConfigurationHandle)
        #expect(bench.att([0x12, UInt8(cccd & 0xFF), UInt8(cccd >> 8), 0x01, 0x00]) == [[0x13]])
        bench.scheduler.advance(by: .seconds(2))
        let notifications = bench.controller.takeL2CAP(handle: 0x0040, cid: L2CAPChannel.att)
        #expect(notifications == [[0x1B, UInt8(handle & 0xFF), UInt8(handle >> 8), 0x67, 0x10],
                                  [0x1B, UInt8(handle & 0xFF), UInt8(handle >> 8), 0x66, 0x10]])
        // Unsubscribed: no timer left.
        #expect(bench.att([0x12, UInt8(cccd & 0xFF), UInt8(cccd >> 8), 0x00, 0x00]) == [[0x13]])
        bench.scheduler.advance(by: .seconds(5))
        #expect(bench.controller.takeL2CAP(handle: 0x0040, cid: L2CAPChannel.att).isEmpty)
    }
}
