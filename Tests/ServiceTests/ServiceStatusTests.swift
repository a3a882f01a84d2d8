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
