import BlemuATT
import BlemuCentral
import BlemuCore
import BlemuGATTClient
import BlemuHCI
import BlemuSimulator
import BlemuL2CAP
import Logging
import Testing

/// The central role against a scripted controller: scanning (legacy and extended), connecting
/// with a timeout, the GATT client over the link, and LE signalling answered as a central.
final class CentralBench {
    let scheduler = ManualScheduler()
    let controller = SimulatedController()
    let host: CentralHost
    var advertisements: [(Advertisement, AdvertiserTable.Change)] = []
    let peer = BluetoothAddress("C4:11:22:33:44:55")!

    init(extended: Bool, twoMegabit: Bool = false) throws {
        controller.extendedAdvertisingSets = extended ? 4 : 0
        controller.supports2MPHY = twoMegabit
        let controller = self.controller
        host = try CentralHost(on: ControllerHost(controller: "scripted", scheduler: scheduler,
                                                  logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() }),
                                                  output: { controller.output($0, $1) }))
        host.onAdvertisement = { [unowned self] in self.advertisements.append(($0, $1)) }
        controller.host = host.hci
        host.controller.controllerUp()
    }

    /// LE Extended Advertising Report (Vol 4, Part E, 7.7.65.13) of one advertiser.
    /// `eventType` nil: legacy ADV_IND or its SCAN_RSP.
    func extendedReport(_ data: [UInt8], scanResponse: Bool, rssi: Int8 = -40, eventType: UInt16? = nil) {
        var p: [UInt8] = [0x0D, 1]
        p.appendLE(eventType ?? UInt16(scanResponse ? 0x001B : 0x0013))
        p += [0x01] + peer.littleEndianBytes + [0x01, 0x00, 0xFF, 0x7F, UInt8(bitPattern: rssi)]
        p += [0, 0, 0] + [UInt8](repeating: 0, count: 6) + [UInt8(data.count)] + data
        controller.event(0x3E, p)
    }

    /// LE Advertising Report (7.7.65.2).
    func legacyReport(_ data: [UInt8], type: UInt8, rssi: Int8 = -50) {
        controller.event(0x3E, [0x02, 1, type, 0x01] + peer.littleEndianBytes + [UInt8(data.count)] + data + [UInt8(bitPattern: rssi)])
    }

    func connect(handle: UInt16 = 0x0040) throws -> CentralLink {
        var result: Result<CentralLink, CentralError>?
        host.connect(to: LEAddress(peer, isRandom: true)) { result = $0 }
        controller.centralConnected(handle: handle, peer: peer)
        return try #require(try result?.get())
    }
}

let nameData: [UInt8] = [0x02, 0x01, 0x06, 0x05, 0x09] + Array("Test".utf8)
let servicesData: [UInt8] = [0x05, 0x03, 0x0D, 0x18, 0x0F, 0x18]

extension Result {
    var error: Failure? { if case .failure(let error) = self { return error } else { return nil } }
}
