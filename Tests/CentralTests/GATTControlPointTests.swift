import BlemuATT
import BlemuCentral
import BlemuCore
import BlemuGATT
@testable import BlemuGATTClient
import BlemuL2CAP
import BlemuSecurity
import Logging
import Testing
@testable import HostTestSupport

/// What `blemu gatt` does on a link, as library (`GATTValueListeners`,
/// `GATTWorkflow.writeAwaitingAnswer`), against a scripted controller: values go to their
/// handle's listener, and a control point's write is a subscription, a write and an answer.
@Suite struct GATTControlPointTests {
    static let quiet = Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })

    final class Bench {
        let central: CentralBench
        let link: CentralLink
        let workflow: GATTWorkflow
        let listeners = GATTValueListeners()
        var events: [GATTWorkflow.AnsweredWrite] = []

        init() throws {
            central = try CentralBench(extended: false)
            let own = BluetoothAddress("D0:01:02:03:04:05")!
            let security = CentralSecurity(configuration: CentralSecurityConfiguration(),
                                           owner: BondOwner(device: "central", name: "blemu central", address: own),
                                           localAddress: LEAddress(own, isRandom: true), scheduler: central.scheduler,
                                           logger: GATTControlPointTests.quiet)
            central.host.ownRandomAddress = own
            central.host.attach(security: security)
            link = try central.connect()
            workflow = GATTWorkflow(link: link, security: security, scheduler: central.scheduler, logger: GATTControlPointTests.quiet)
            listeners.install(on: link.client)
        }

        var attSent: [[UInt8]] { central.controller.takeL2CAP(handle: link.handle, cid: L2CAPChannel.att) }
        func answer(_ pdu: [UInt8]) { central.controller.sendL2CAP(handle: link.handle, cid: L2CAPChannel.att, pdu) }

        func write(_ characteristic: RemoteCharacteristic, _ value: [UInt8]) {
            workflow.writeAwaitingAnswer(characteristic, value, listeners: listeners) { [unowned self] in events.append($0) }
        }
    }

    /// A control point at 0x0012 (write, indicate) with its CCCD at 0x0013; `properties` to change that.
    static func controlPoint(_ properties: CharacteristicProperties = [.write, .indicate]) -> RemoteCharacteristic {
        RemoteCharacteristic(
            characteristic: DiscoveredCharacteristic(uuid: BluetoothUUID(0x2A52), properties: properties,
                                                     declarationHandle: 0x0011, valueHandle: 0x0012, endHandle: 0x0013),
            descriptors: properties.contains(.indicate) ? [DiscoveredDescriptor(uuid: GATTType.clientConfiguration, handle: 0x0013)] : [])
    }

    @Test func valuesGoToTheListenerOfTheirHandleOnly() throws {
        let b = try Bench()
        var heard: [[UInt8]] = []
        b.listeners[0x0021] = { heard.append(Array($0)) }
        #expect(b.listeners.isListening)
        b.answer([0x1B, 0x21, 0x00, 0x01])
        b.answer([0x1B, 0x31, 0x00, 0x02])   // nobody listens to 0x0031
        b.answer([0x1D, 0x21, 0x00, 0x03])
        #expect(heard == [[0x01], [0x03]])
        #expect(b.attSent == [[0x1E]], "the indication confirmed")
        b.listeners[0x0021] = nil
        #expect(!b.listeners.isListening)
    }

    @Test func aControlPointsIndicationsGoOnBeforeTheWriteAndItsAnswerEndsTheCommand() throws {
        let b = try Bench()
        b.write(Self.controlPoint(), [0x02, 0x34])
        #expect(b.attSent == [[0x12, 0x13, 0x00, 0x02, 0x00]], "indications on first")
        b.answer([0x13])
        #expect(b.attSent == [[0x12, 0x12, 0x00, 0x02, 0x34]], "then the write")
        b.answer([0x13])
        #expect(b.events == [.written])
        b.answer([0x1D, 0x12, 0x00, 0x80, 0x02, 0x01])
        #expect(b.events == [.written, .answered([0x80, 0x02, 0x01]), .finished])
        #expect(!b.listeners.isListening, "the answer's listener is gone")
        b.central.scheduler.advance(by: .seconds(6))
        #expect(b.events.count == 3, "finished once")
    }

    @Test func withoutAnAnswerTheCommandEndsAfterItsTimeAndTheSubscriptionIsBack() throws {
        let b = try Bench()
        var subscribed: [[UInt8]] = []
        b.listeners[0x0012] = { subscribed.append(Array($0)) }
        b.write(Self.controlPoint(), [0x01])
        b.answer([0x13])
        b.answer([0x13])
        #expect(b.events == [.written])
        b.central.scheduler.advance(by: GATTWorkflow.controlPointAnswerTime - .milliseconds(1))
        #expect(b.events == [.written])
        b.central.scheduler.advance(by: .milliseconds(1))
        #expect(b.events == [.written, .finished])
        b.answer([0x1D, 0x12, 0x00, 0x09])
        #expect(subscribed == [[0x09]], "the subscription hears the value again")
    }

    @Test func aRefusedWriteFailsAndPutsTheSubscriptionBack() throws {
        let b = try Bench()
        var subscribed = 0
        b.listeners[0x0012] = { _ in subscribed += 1 }
        b.write(Self.controlPoint(), [0x01])
        b.answer([0x13])
        _ = b.attSent
        // Write Not Permitted (0x03).
        b.answer([0x01, 0x12, 0x12, 0x00, 0x03])
        #expect(b.events.count == 1)
        guard case .failed(let message) = b.events.first else { Issue.record("\(b.events)"); return }
        #expect(message.hasPrefix("write 2A52: "))
        b.answer([0x1B, 0x12, 0x00, 0x01])
        #expect(subscribed == 1)
        b.central.scheduler.advance(by: .seconds(6))
        #expect(b.events.count == 1)
    }

    @Test func indicationsRefusedFailTheCommandBeforeAnyWrite() throws {
        let b = try Bench()
        b.write(Self.controlPoint(), [0x01])
        _ = b.attSent
        b.answer([0x01, 0x12, 0x13, 0x00, 0x03])
        guard case .failed(let message) = b.events.first else { Issue.record("\(b.events)"); return }
        #expect(message.contains("before writing"))
        #expect(b.attSent.isEmpty, "no write")
    }

    @Test func aCharacteristicThatDoesNotIndicateIsOnlyWritten() throws {
        let b = try Bench()
        b.write(Self.controlPoint([.write]), [0x07])
        #expect(b.attSent == [[0x12, 0x12, 0x00, 0x07]])
        b.answer([0x13])
        #expect(b.events == [.written, .finished])
    }

    /// `gatt subscribe`: notifications where the characteristic notifies, else indications; the
    /// listener hears values from before the answer, a refusal takes it away; one that does
    /// neither is refused without a request.
    @Test func aSubscriptionTurnsOnWhatTheCharacteristicDoesAndARefusalDropsItsListener() throws {
        let b = try Bench()
        var heard: [[UInt8]] = []
        var results: [Result<Void, GATTClientError>] = []
        #expect(b.workflow.subscribe(Self.controlPoint([.read, .indicate]), listeners: b.listeners,
                                     listener: { heard.append(Array($0)) }) { results.append($0) })
        #expect(b.attSent == [[0x12, 0x13, 0x00, 0x02, 0x00]], "indications: the characteristic does not notify")
        b.answer([0x1D, 0x12, 0x00, 0x07])   // an indication before the Write Response
        b.answer([0x13])
        #expect(heard == [[0x07]] && results.count == 1 && b.listeners.isListening)
        var done = false
        b.workflow.unsubscribe(Self.controlPoint([.read, .indicate]), listeners: b.listeners) { _ in done = true }
        #expect(!b.listeners.isListening, "the listener goes at once")
        _ = b.attSent
        b.answer([0x13])
        #expect(done)

        results = []
        #expect(b.workflow.subscribe(Self.controlPoint([.read, .notify, .indicate]), listeners: b.listeners,
                                     listener: { heard.append(Array($0)) }) { results.append($0) })
        #expect(b.attSent == [[0x12, 0x13, 0x00, 0x01, 0x00]], "notifications where it notifies")
        b.answer([0x01, 0x12, 0x13, 0x00, 0xFD])   // CCCD Improperly Configured
        #expect(results.first?.error != nil && !b.listeners.isListening)

        #expect(!b.workflow.subscribe(Self.controlPoint([.read, .write]), listeners: b.listeners, listener: { _ in }) { _ in })
        #expect(b.attSent.isEmpty && !b.listeners.isListening)
    }
}
