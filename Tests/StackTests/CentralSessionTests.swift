import BlemuRunLoop
import BlemuStack
import BlemuTransport
import Logging
import Testing

/// How a central command (`blemu gatt`, `blemu scan`) ends: a stop the user asked for is no
/// failure, whatever the stop itself causes.
@Suite struct CentralSessionTests {
    static func session() throws -> CentralSession {
        // Never started: finish() stops the host and the loop without a controller.
        try CentralSession(spec: ControllerSpec(parsing: "tcp:127.0.0.1:1"), loop: RunLoop(), logger: Logger(label: "test"))
    }

    /// Ctrl-C on `gatt … subscribe`: finish(), then the link's local disconnection (0x16) as the
    /// host closes it was recorded as the run's failure (`Error: the peripheral disconnected`, 1).
    @Test func theDisconnectionOfAStopIsNotAFailure() throws {
        let session = try Self.session()
        session.finish()
        session.finish(failure: "the peripheral disconnected (reason 0x16)")
        #expect(session.finishing)
        #expect(session.failure == nil)
    }

    @Test func theFirstFailureIsTheOneReported() throws {
        let session = try Self.session()
        session.finish(failure: "no advertiser matching --name X within 10 s")
        session.finish(failure: "the peripheral disconnected (reason 0x16)")
        #expect(session.failure == "no advertiser matching --name X within 10 s")
    }
}
