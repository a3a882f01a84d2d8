import BlemuCore
import BlemuGATT
import BlemuHost
import BlemuRunLoop
import FoundationEssentials
import Logging
import Testing
@testable import BlemuControl

#if canImport(Glibc)
import Glibc
#endif

/// `watch`: how events are written, which ones a filter passes, `ctl wait`'s matching, and the
/// bounded queue of a watcher that does not read (a real socket on the run loop, the clock a
/// ManualScheduler).
@Suite(.serialized) struct EventWatchTests {
    static let peer = ATTPeer(connectionHandle: 0x40, address: LEAddress(BluetoothAddress("C0:11:22:33:44:55")!, isRandom: true))
    static let heartRateMeasurement = EventCharacteristic(uuid: BluetoothUUID(0x2A37), handle: 0x0010)
    static let controlPoint = EventCharacteristic(uuid: BluetoothUUID(0x2A39), handle: 0x0015)

    // MARK: Encoding

    @Test func aWriteIsOneLineWithSeqTimeUUIDAndHexValue() {
        let event = DeviceEvent.write(peer: Self.peer, characteristic: Self.controlPoint, offset: 0, value: [0x01, 0xAB],
                                      withResponse: true, prepared: false)
        let line = EventEncoding.line(seq: 7, nanoseconds: 12_345_678_901, EventEncoding.members(event, device: "heart-rate"))
        #expect(line == #"{"seq":7,"t":12.345678,"event":"write","device":"heart-rate","peer":"C0:11:22:33:44:55","peer_random":true,"conn":64,"uuid":"2A39","att_handle":"0x0015","value":"01ab","offset":0,"with_response":true,"prepared":false}"#)
    }

    @Test func everyKindNamesItsFields() {
        let lines: [(DeviceEvent, String)] = [
            (.connected(peer: Self.peer), #""event":"connected","device":"d","peer":"C0:11:22:33:44:55","peer_random":true,"conn":64"#),
            (.disconnected(peer: Self.peer, reason: 0x13), #""reason":"0x13""#),
            (.mtu(peer: Self.peer, mtu: 247), #""mtu":247"#),
            (.paired(peer: Self.peer, method: .passkeyEntry, keySize: 16, secureConnections: true, bonded: true),
             #""method":"passkey","key_size":16,"secure_connections":true,"bonded":true"#),
            (.encrypted(peer: Self.peer, keySize: 16, authenticated: false), #""event":"encrypted","#),
            (.subscribed(peer: Self.peer, characteristic: Self.heartRateMeasurement, notify: true, indicate: false),
             #""uuid":"2A37","att_handle":"0x0010","notify":true,"indicate":false"#),
            (.unsubscribed(peer: Self.peer, characteristic: Self.heartRateMeasurement, cause: "link closed"), #""cause":"link closed""#),
            (.read(peer: Self.peer, characteristic: Self.heartRateMeasurement, offset: 22), #""event":"read","#),
            (.notification(peer: Self.peer, characteristic: Self.heartRateMeasurement, value: [0x00, 0x48]), #""value":"0048""#),
            (.indication(peer: Self.peer, characteristic: Self.controlPoint, value: [0x10]), #""event":"indication","#),
            (.confirmed(peer: Self.peer, characteristic: Self.controlPoint, outcome: .timedOut), #""outcome":"timeout""#),
            (.advertising(on: false, address: BluetoothAddress("D0:00:00:00:00:01")!), #""on":false,"address":"D0:00:00:00:00:01""#),
            (.service(uuid: BluetoothUUID(0x180D), on: false), #""event":"service","device":"d","uuid":"180D","on":false"#),
            (.fault(peer: Self.peer, characteristic: Self.heartRateMeasurement, handle: 0x0010, opcode: 0x0A, action: .drop),
             #""uuid":"2A37","att_handle":"0x0010","opcode":"0x0a","action":"drop""#),
        ]
        for (event, expected) in lines {
            let line = JSONValue.object(EventEncoding.members(event, device: "d")).encoded
            #expect(line.contains(expected), "\(line)")
        }
        #expect(Set(lines.map(\.0.kind)).count == DeviceEventKind.allCases.count - 1, "every kind but write (above) is here")
    }

    // MARK: Filters and requests

    @Test func aFilterPassesItsKindsAndUUIDOnly() {
        let read = DeviceEvent.read(peer: Self.peer, characteristic: Self.heartRateMeasurement, offset: 0)
        let connected = DeviceEvent.connected(peer: Self.peer)
        #expect(EventFilter().matches(read) && EventFilter().matches(connected))
        #expect(EventFilter(kinds: [.read, .write]).matches(read))
        #expect(!EventFilter(kinds: [.write]).matches(read))
        #expect(EventFilter(uuid: BluetoothUUID(0x2A37)).matches(read))
        #expect(!EventFilter(uuid: BluetoothUUID(0x2A39)).matches(read))
        #expect(!EventFilter(uuid: BluetoothUUID(0x2A37)).matches(connected), "an event naming no UUID fails a UUID filter")
    }

    @Test func watchRequestsDecodeAndBadFiltersAreRefused() {
        let decoded = ControlRequest.decode(line: Array(#"{"id":3,"cmd":"watch","device":"heart-rate","kinds":"write,read","uuid":"0x2a37"}"#.utf8))
        #expect(decoded == .success(ControlRequest(id: 3, command: .watch(EventFilter(device: "heart-rate", kinds: [.write, .read],
                                                                                        uuid: BluetoothUUID(0x2A37))))))
        #expect(ControlRequest.decode(line: Array(#"{"id":1,"cmd":"watch"}"#.utf8)) == .success(ControlRequest(id: 1, command: .watch(EventFilter()))))
        guard case .failure(let error) = ControlRequest.decode(line: Array(#"{"id":1,"cmd":"watch","kinds":"write,typo"}"#.utf8)) else {
            Issue.record("an unknown kind was taken")
            return
        }
        #expect(error.id == 1 && error.message.contains("subscribed"), "\(error.message)")
        let words = try? ControlCommand(arguments: ["watch", "heart-rate", "--kinds", "subscribed,write", "--uuid", "2A37"])
        #expect(words == .watch(EventFilter(device: "heart-rate", kinds: [.subscribed, .write], uuid: BluetoothUUID(0x2A37))))
        // What `ctl` sends is what the server decodes.
        let request = ControlRequest(id: 1, command: words!)
        #expect(ControlRequest.decode(line: Array(request.json.encoded.utf8)) == .success(request))
        #expect(throws: ControlUsageError.self) { try ControlCommand(arguments: ["watch", "--count", "3"]) }
    }

    /// `blemu ctl PATH wait`'s stream: the `watch` it sends, a refused reply ends it with the
    /// reply, an accepted one is followed by events until the one waited for; nothing after counts.
    @Test func aWaitTakesTheReplyThenEventsUntilTheOneWaitedFor() throws {
        let wait = try EventWait(arguments: ["write", "2A39", "equals", "01ab"])
        let line = { (value: [UInt8]) in
            EventEncoding.line(seq: 1, nanoseconds: 0, EventEncoding.members(
                .write(peer: Self.peer, characteristic: Self.controlPoint, offset: 0, value: value, withResponse: true, prepared: false), device: "d"))
        }
        var progress = EventWaitProgress(wait)
        #expect(ControlRequest.decode(line: Array(progress.request.utf8)) == .success(ControlRequest(id: 1, command: .watch(wait.filter))))
        #expect(progress.take(#"{"id":1,"ok":true}"#) && progress.state == .watching)
        #expect(progress.take(line([0x01])) && progress.state == .watching)
        #expect(!progress.take(line([0x01, 0xAB])) && progress.state == .happened(line([0x01, 0xAB])))
        #expect(!progress.take(line([0x02])) && progress.state == .happened(line([0x01, 0xAB])))

        var refused = EventWaitProgress(wait)
        let refusal = #"{"id":1,"ok":false,"error":"no device d"}"#
        #expect(!refused.take(refusal) && refused.state == .refused(refusal))
        var early = EventWaitProgress(wait)
        #expect(!early.take(line([0x01, 0xAB])) && early.state == .refused(line([0x01, 0xAB])), "a first line that is no ok reply refuses")
    }

    @Test func ctlWaitParsesItsFormsAndMatchesOnlyTheEventWaitedFor() throws {
        let wait = try EventWait(arguments: ["write", "2a39", "equals", "0x01ab"])
        #expect(wait.filter == EventFilter(kinds: [.write], uuid: BluetoothUUID(0x2A39)))
        let line = { (value: [UInt8], uuid: EventCharacteristic) in
            EventEncoding.line(seq: 1, nanoseconds: 0, EventEncoding.members(
                .write(peer: Self.peer, characteristic: uuid, offset: 0, value: value, withResponse: true, prepared: false), device: "d"))
        }
        #expect(wait.matches(line: line([0x01, 0xAB], Self.controlPoint)))
        #expect(!wait.matches(line: line([0x01], Self.controlPoint)))
        #expect(!wait.matches(line: line([0x01, 0xAB], Self.heartRateMeasurement)))
        #expect(!wait.matches(line: #"{"seq":2,"event":"missed","count":3}"#))
        #expect(try EventWait(arguments: ["connected"]).filter == EventFilter(kinds: [.connected]))
        #expect(try EventWait(arguments: ["subscribed", "2A37", "--device", "heart-rate"]).filter
                == EventFilter(device: "heart-rate", kinds: [.subscribed], uuid: BluetoothUUID(0x2A37)))
        for bad in [["subscribed"], ["write", "2A39", "equals"], ["write", "2A39", "equals", "zz"], ["teleported"], ["connected", "2A37"]] {
            #expect(throws: ControlUsageError.self, "\(bad)") { try EventWait(arguments: bad) }
        }
    }

    /// `write UUID matches PATTERN`: hex digits, `.` for any one digit, a final `*` for any bytes
    /// after; the event and its JSON line are matched alike.
    @Test func aWriteMatchesAValuePattern() throws {
        let write = { (value: [UInt8]) in
            DeviceEvent.write(peer: Self.peer, characteristic: Self.controlPoint, offset: 0, value: value, withResponse: true, prepared: false)
        }
        let line = { (value: [UInt8]) in EventEncoding.line(seq: 1, nanoseconds: 0, EventEncoding.members(write(value), device: "d")) }
        let oneAndAnyByte = try EventWait(arguments: ["write", "2A39", "matches", "01.."])
        #expect(oneAndAnyByte.pattern == "01..")
        for (value, fits) in [([0x01, 0xFF], true), ([0x01, 0x00], true), ([0x02, 0xFF], false), ([0x01], false), ([0x01, 0xFF, 0x00], false)] as [([UInt8], Bool)] {
            #expect(oneAndAnyByte.matches(write(value)) == fits, "\(value)")
            #expect(oneAndAnyByte.matches(line: line(value)) == fits, "\(value)")
        }
        let prefix = try EventWait(arguments: ["write", "2A39", "matches", "CA0.*"])
        #expect(prefix.pattern == "ca0.*")
        #expect(prefix.matches(write([0xCA, 0x08])) && prefix.matches(write([0xCA, 0x01, 0x99])))
        #expect(!prefix.matches(write([0xCA])) && !prefix.matches(write([0xCB, 0x08])))
        #expect(prefix.description.contains("matching ca0.*"))
        for bad in ["0", "0g", "*0", "", "01.*.", "01 02"] {
            #expect(throws: ControlUsageError.self, "\(bad)") { try EventWait(arguments: ["write", "2A39", "matches", bad]) }
        }
    }

    // MARK: The bounded queue

    final class Rig {
        let loop: RunLoop
        let timers = ManualScheduler()
        let path = ControlServerTests.Rig.freshPath()
        var server: ControlServer!
        var watchers: EventWatchers!
        var observing = false

        init(limits: ControlServer.Limits = ControlServer.Limits()) throws {
            loop = try RunLoop()
            let logger = Logger(label: "watch-test") { _ in SwiftLogNoOpLogHandler() }
            server = try ControlServer(path: path, loop: loop, timers: timers, logger: logger, limits: limits) { [unowned self] line, client in
                let text = String(decoding: line, as: UTF8.self)
                let filter = text.contains("writes") ? EventFilter(kinds: [.write]) : EventFilter()
                self.watchers.add(client: client, filter: filter, devices: nil)
                return #"{"id":1,"ok":true}"#
            }
            watchers = EventWatchers(server: server, clock: timers, deviceRefs: ["heart-rate"]) { [unowned self] sink in
                self.observing = sink != nil
            }
        }

        deinit {
            server?.close()
            unlink(path)
        }

        @discardableResult
        func run(until condition: () -> Bool, limit: Int = 2000) -> Bool {
            for _ in 0..<limit {
                if condition() { return true }
                loop.runOnce(timeout: .milliseconds(5))
            }
            return condition()
        }

        func watcher(_ request: String = "{\"id\":1,\"cmd\":\"watch\"}") throws -> ControlServerTests.TestClient {
            let client = try ControlServerTests.TestClient(path: path)
            client.send(request + "\n")
            #expect(run(until: { client.poll(); return client.lines.count == 1 }))
            return client
        }
    }

    static func notification(_ n: Int) -> DeviceEvent {
        .notification(peer: peer, characteristic: heartRateMeasurement, value: [0x00, UInt8(truncatingIfNeeded: n)])
    }

    /// Parsed event lines: (seq, event, count) per line after the reply.
    static func events(_ client: ControlServerTests.TestClient) -> [(seq: Int, event: String, count: Int?, fromSeq: Int?)] {
        client.lines.dropFirst().map { line in
            let fields = (try? JSONDecoder().decode([String: JSONField].self, from: Data(line.utf8))) ?? [:]
            func number(_ key: String) -> Int? {
                guard case .integer(let value)? = fields[key] else { return nil }
                return Int(value)
            }
            guard case .string(let event)? = fields["event"] else { return (number("seq") ?? -1, "?", nil, nil) }
            return (number("seq") ?? -1, event, number("count"), number("from_seq"))
        }
    }

    @Test func aWatcherThatNeverReadsIsToldWhatItMissedAndNothingGrowsOrBlocks() throws {
        var limits = ControlServer.Limits()
        limits.streamQueueBytes = 8 * 1024
        // A short stall timeout: a watcher must outlive it (it holds no replies back).
        limits.stallTimeout = .milliseconds(100)
        let rig = try Rig(limits: limits)
        let deaf = try rig.watcher()
        var shrink: Int32 = 4096
        setsockopt(deaf.fd, SOL_SOCKET, SO_RCVBUF, &shrink, socklen_t(MemoryLayout<Int32>.size))
        let writes = try rig.watcher(#"{"id":1,"cmd":"watch","kinds":"writes"}"#)
        #expect(rig.observing, "devices report while someone watches")

        // A flood while the watcher reads nothing: its queue stays within the bound throughout.
        let flood = 5000
        var largest = 0
        for n in 1...flood {
            rig.watchers.deliver(Self.notification(n), device: 0)
            largest = max(largest, rig.server.pendingOutput(client: 1))
        }
        #expect(largest <= limits.streamQueueBytes, "\(largest) bytes queued")
        rig.timers.advance(by: .seconds(1))
        #expect(rig.server.clientCount == 2, "a watcher is never dropped for not reading")
        rig.watchers.deliver(.write(peer: Self.peer, characteristic: Self.controlPoint, offset: 0, value: [1], withResponse: true,
                                    prepared: false), device: 0)

        // It reads at last: events in order, then one `missed` line that accounts for the rest.
        #expect(rig.run(until: { deaf.poll(); return Self.events(deaf).contains { $0.event == "missed" } }))
        let seen = Self.events(deaf)
        let missed = try #require(seen.last)
        #expect(missed.event == "missed")
        let delivered = seen.dropLast()
        #expect(delivered.map(\.seq) == Array(1...delivered.count), "consecutive from 1")
        #expect(missed.fromSeq == delivered.count + 1)
        #expect(missed.seq == flood + 1 && missed.count == flood + 1 - delivered.count, "\(missed)")
        #expect(delivered.count < flood)

        // Events flow again, numbered on.
        rig.watchers.deliver(Self.notification(0), device: 0)
        #expect(rig.run(until: { deaf.poll(); return Self.events(deaf).count == seen.count + 1 }))
        #expect(Self.events(deaf).last?.seq == flood + 2)

        // The other watcher's filter passed the one write only: it missed nothing.
        writes.poll()
        #expect(Self.events(writes).map(\.event) == ["write"] && Self.events(writes).first?.seq == 1)

        // A watcher that shuts down its sending side (`nc -N`) goes on watching.
        shutdown(writes.fd, Int32(SHUT_WR))
        rig.run(until: { false }, limit: 20)
        rig.watchers.deliver(.write(peer: Self.peer, characteristic: Self.controlPoint, offset: 0, value: [2], withResponse: true,
                                    prepared: false), device: 0)
        #expect(rig.run(until: { writes.poll(); return Self.events(writes).count == 2 }))

        // When the last watcher leaves, the devices stop reporting.
        shutdown(deaf.fd, Int32(SHUT_RDWR))
        shutdown(writes.fd, Int32(SHUT_RDWR))
        #expect(rig.run(until: { rig.server.clientCount == 0 }))
        #expect(!rig.observing)
    }
}
