import Testing
@testable import BlemuService

@Suite struct ServiceStatusTests {
    @Test func summaryLine() {
        let status = ServiceStatus(devices: [.init(name: "heart-rate", advertising: true, connections: 0),
                                             .init(name: "lock", advertising: false, connections: 1)],
                                   controllersDown: 1, lastError: "controller lost: connection reset")
        #expect(status.line == "heart-rate advertising, 0 connected; lock 1 connected; 1 controller(s) down; last error: controller lost: connection reset")
    }

    @Test func statusIsOneBoundedLine() {
        #expect(ServiceNotifier.sanitized("a\nREADY=1\tb") == "a READY=1 b")
        let long = String(repeating: "é", count: 500)
        let line = ServiceNotifier.sanitized(long)
        #expect(line.utf8.count <= ServiceNotifier.statusLimit)
        #expect(line.allSatisfy { $0 == "é" })
    }
}

@Suite struct ServiceStatusFleetTests {
    @Test func aFleetIsCountedNotNamedAndTheErrorStaysOnTheLine() {
        var devices = (0..<1_100).map { ServiceStatus.Device(name: "ibeacon", advertising: $0 != 7, connections: 0) }
        devices[3].connections = 2
        devices[900].connections = 1
        let line = ServiceStatus(devices: devices, controllersDown: 2, lastError: "controller lost: connection reset").line
        #expect(line == "1100 devices: 1099 advertising, 3 connected to 2; 2 controller(s) down; last error: controller lost: connection reset")
        #expect(ServiceNotifier.sanitized(line) == line)
    }

    @Test func devicesWhoseNamesCrowdOutTheErrorAreCounted() {
        // Eight devices fit the count, but their names would leave the error no room in 200 bytes.
        let devices = (0..<8).map { _ in ServiceStatus.Device(name: "bthome-thermometer", advertising: true, connections: 0) }
        let line = ServiceStatus(devices: devices, lastError: "controller lost: connection reset").line
        #expect(line == "8 devices: 8 advertising, 0 connected; last error: controller lost: connection reset")
        let quiet = ServiceStatus(devices: Array(devices.prefix(3))).line
        #expect(quiet == "bthome-thermometer advertising, 0 connected; bthome-thermometer advertising, 0 connected; bthome-thermometer advertising, 0 connected")
    }
}
