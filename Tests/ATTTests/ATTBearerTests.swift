import Testing
import BlemuATT
import BlemuCore
import BlemuHCI
import BlemuL2CAP
import Logging

/// The ATT bearer alone (Vol 3, Part F, 3.2.11 and 3.3): what the peer sends goes to the end it
/// is for, decided in one place; what either end sends goes to the link with the kind's priority.
@Suite struct ATTBearerTests {
    final class End: ATTBearerEnd {
        var received: [[UInt8]] = []
        var timedOut: [ATTTransaction] = []
        func bearerTimedOut(_ transaction: ATTTransaction) { timedOut.append(transaction) }
        func receive(_ pdu: ArraySlice<UInt8>, opcode: UInt8) {
            #expect(opcode == pdu.first)
            received.append(Array(pdu))
        }
    }

    @Test func requestsCommandsAndConfirmationsToTheServerTheRestToTheClient() {
        let bearer = ATTBearer(scheduler: ManualScheduler())
        let server = End(), client = End()
        bearer.server = server
        bearer.client = client
        let toServer: [[UInt8]] = [[0x02, 0x17, 0x00], [0x0A, 0x03, 0x00], [0x52, 0x03, 0x00, 0x01], [0x1E], [0xD2, 0x03, 0x00],
                                   [0x15], [0x20, 0x01, 0x00, 0x02, 0x00]]
        let toClient: [[UInt8]] = [[0x01, 0x0A, 0x03, 0x00, 0x0A], [0x03, 0x17, 0x00], [0x0B, 0x41], [0x1B, 0x03, 0x00, 0x2A],
                                   [0x1D, 0x03, 0x00], [0x23, 0x03, 0x00, 0x01, 0x00, 0x2A], [0x21]]
        for pdu in toServer + toClient { bearer.receive(pdu[...]) }
        bearer.receive([][...])
        #expect(server.received == toServer)
        #expect(client.received == toClient)
    }

    /// A peripheral's bearer has no client: a response answers nothing asked and is dropped.
    @Test func aPDUForAMissingEndIsDropped() {
        let bearer = ATTBearer(scheduler: ManualScheduler())
        let server = End()
        bearer.server = server
        bearer.receive([0x0B, 0x41][...])
        #expect(server.received.isEmpty)
    }

    @Test func theClassificationIsTheOneTheServerAnswersBy() {
        // Vol 3, Part F, 3.4.8, Table 3.37: the responses, notifications and indications.
        let clientOpcodes: Set<UInt8> = [0x01, 0x03, 0x05, 0x07, 0x09, 0x0B, 0x0D, 0x0F, 0x11, 0x13, 0x17, 0x19, 0x1B, 0x1D, 0x21, 0x23]
        for raw in UInt8.min...UInt8.max {
            let forClient = ATTOpcode.isForClient(raw)
            #expect(forClient == clientOpcodes.contains(raw), "opcode \(raw)")
            // Nothing the client takes is a request the server must answer.
            if forClient { #expect(!ATTOpcode.isRequestForm(raw)) }
            // Responses are odd opcodes; every even one is the server's (Bumble routes by parity).
            if raw & 1 == 0 { #expect(!forClient) }
        }
    }

    @Test func onABearerOnALinkPDUsTravelOnTheATTChannel() {
        final class Lower: L2CAPLower {
            var frames: [([UInt8], TransmitPriority)] = []
            func sendL2CAP(handle: UInt16, pdu: ArraySlice<UInt8>, priority: TransmitPriority) -> Bool {
                frames.append((Array(pdu), priority))
                return true
            }
            func send(_ command: HCICommand, completion: ((CommandResult) -> Void)?) -> Bool { true }
        }
        let lower = Lower()
        let context = L2CAPLinkContext(hci: lower, scheduler: ManualScheduler(),
                                       logger: Logger(label: "att-test", factory: { _ in SwiftLogNoOpLogHandler() }))
        let link = L2CAPLink(handle: 0x0040, role: .peripheral, context: context)
        let bearer = ATTBearer(link: link)
        let server = End()
        bearer.server = server
        link.receive(ACLPacket(handle: 0x0040, boundary: .firstFlushable, data: [0x03, 0x00, 0x04, 0x00, 0x0A, 0x03, 0x00][...]))
        #expect(server.received == [[0x0A, 0x03, 0x00]])
        #expect(bearer.send([0x0B, 0x41][...], kind: .response))
        #expect(bearer.send([0x1B, 0x03, 0x00, 0x41][...], kind: .notification))
        #expect(lower.frames.map(\.0) == [[0x02, 0x00, 0x04, 0x00, 0x0B, 0x41], [0x04, 0x00, 0x04, 0x00, 0x1B, 0x03, 0x00, 0x41]])
        // Only notifications may be refused by a full queue (nothing above bounds them).
        #expect(lower.frames.map(\.1) == [.required, .bestEffort])
        link.close()
        #expect(!bearer.send([0x0B][...], kind: .response))
    }

    @Test func withoutATransportNothingIsSent() {
        #expect(!ATTBearer(scheduler: ManualScheduler()).send([0x0B][...], kind: .response))
        #expect(ATTBearer(scheduler: ManualScheduler()).mtu == 23)
    }

    // MARK: The transaction timer (Vol 3, Part F, 3.3.3)

    /// Either end's transaction that times out kills the bearer: both ends hear it, and nothing
    /// more is sent on it.
    @Test(arguments: [ATTTransaction.request, .indication])
    func aTransactionTimeoutEndsTheBearerForBothEnds(transaction: ATTTransaction) {
        let scheduler = ManualScheduler()
        var sent = 0
        let transport = ATTClosureTransport { _, _ in sent += 1; return true }
        let bearer = ATTBearer(scheduler: scheduler, transport: transport)
        let server = End(), client = End()
        bearer.server = server
        bearer.client = client
        bearer.begin(transaction)
        #expect(bearer.isOpen(transaction))
        scheduler.advance(by: .seconds(29))
        #expect(!bearer.isTimedOut && bearer.send([0x0A][...], kind: .request))
        scheduler.advance(by: .seconds(1))
        #expect(bearer.isTimedOut && !bearer.isOpen(transaction))
        #expect(server.timedOut == [transaction] && client.timedOut == [transaction])
        #expect(!bearer.send([0x1B, 0x03, 0x00][...], kind: .notification))
        #expect(sent == 1)
        // A dead bearer starts nothing new.
        bearer.begin(.request)
        #expect(!bearer.isOpen(.request) && scheduler.pendingCount == 0)
    }

    @Test func aCompletedTransactionStopsItsTimer() {
        let scheduler = ManualScheduler()
        let bearer = ATTBearer(scheduler: scheduler)
        bearer.begin(.request)
        bearer.begin(.indication)
        bearer.end(.request)
        #expect(!bearer.isOpen(.request) && bearer.isOpen(.indication))
        bearer.end(.indication)
        #expect(scheduler.pendingCount == 0)
        scheduler.advance(by: .seconds(60))
        #expect(!bearer.isTimedOut)
    }
}
