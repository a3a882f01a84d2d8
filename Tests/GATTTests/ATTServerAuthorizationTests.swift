import BlemuATT
import BlemuCore
import Testing
@testable import BlemuGATT

/// Authorization (Vol 3, Part C, 10.5; Vol 3, Part F, 3.2.5): a value that requires it is served
/// only when the device authorizes the request, else Insufficient Authorization (0x08), and its
/// handlers never hear of a refused request.
@Suite struct ATTServerAuthorizationTests {
    /// The delegate's answer for characteristics without an `authorize` of their own.
    final class AuthorizingDelegate: ATTServerDelegate, ATTServerObserver {
        var allow = false
        var asked: [(uuid: BluetoothUUID, access: AttributeAccess)] = []
        var answered: [ATTError?] = []
        var sent = 0
        func attServer(_ server: ATTServer, send pdu: ArraySlice<UInt8>, kind: ATTSendKind) -> Bool {
            sent += 1
            return true
        }
        func attServer(_ server: ATTServer, answered opcode: UInt8, handle: UInt16, error: ATTError?) { answered.append(error) }
        func attServer(_ server: ATTServer, authorize characteristic: Characteristic, access: AttributeAccess) -> Bool {
            asked.append((characteristic.uuid, access))
            return allow
        }
        func attServerTransactionTimedOut(_ server: ATTServer) {}
    }

    /// 0x0003 read needs authorization; 0x0005 write needs it; 0x0007 read needs encryption
    /// and authorization; 0x0009 read decides itself (only the central at address 1); 0x000B
    /// takes Write Commands only, with authorization.
    final class Bench {
        let server: ATTServer
        let delegate = AuthorizingDelegate()
        /// What the handlers saw.
        final class Handled {
            var reads = 0
            var validated = 0
            var written: [[UInt8]] = []
        }
        let handled: Handled
        var reads: Int { handled.reads }
        var validated: Int { handled.validated }
        var written: [[UInt8]] { handled.written }

        init(peer: UInt64 = 1) throws {
            let handled = Handled()
            self.handled = handled
            let readAuthorized = Characteristic(0x2A20, properties: [.read], permissions: [.readAuthorizationRequired],
                                                onRead: { _, value in handled.reads += 1; value.append(1); return nil })
            let writeAuthorized = Characteristic(0x2A21, properties: [.write, .writeWithoutResponse],
                                                 permissions: [.writeAuthorizationRequired],
                                                 validateWrite: { _ in handled.validated += 1; return nil },
                                                 onWrite: { request in handled.written.append(Array(request.value)); return nil })
            let encryptedAndAuthorized = Characteristic(0x2A22, properties: [.read],
                                                        permissions: [.readEncryptionRequired, .readAuthorizationRequired],
                                                        onRead: { _, value in handled.reads += 1; value.append(3); return nil })
            let deciding = Characteristic(0x2A23, properties: [.read], permissions: [.readAuthorizationRequired],
                                          onRead: { _, value in handled.reads += 1; value.append(4); return nil })
            deciding.authorize = { peer, access in peer.address == BluetoothAddress(value: 1) && access == .read }
            let commandOnly = Characteristic(0x2A24, properties: [.writeWithoutResponse], permissions: [.writeAuthorizationRequired],
                                             onWrite: { request in handled.written.append(Array(request.value)); return nil })
            let database = try GATTDatabase(services: [Service(0x180F) {
                readAuthorized; writeAuthorized; encryptedAndAuthorized; deciding; commandOnly
            }])
            server = ATTServer(database: database, peer: ATTPeer(connectionHandle: 1, address: BluetoothAddress(value: peer)),
                               scheduler: ManualScheduler())
            server.record(by: delegate)
        }

        /// The error the request was answered with; nil when it succeeded.
        func error(_ hex: String) -> ATTError? {
            let before = delegate.answered.count
            server.receive(bytes(hex)[...])
            #expect(delegate.answered.count == before + 1, "one answer to \(hex)")
            return delegate.answered.last ?? nil
        }
    }

    @Test func aRefusedReadIsInsufficientAuthorizationAndTheHandlerNeverRuns() throws {
        let bench = try Bench()
        #expect(bench.error("0A 0300") == .insufficientAuthorization)
        #expect(bench.error("0C 0300 0000") == .insufficientAuthorization)  // Read Blob
        #expect(bench.error("0E 0300 0300") == .insufficientAuthorization)  // Read Multiple
        #expect(bench.reads == 0)
        #expect(bench.delegate.asked.allSatisfy { $0.uuid == BluetoothUUID(0x2A20) && $0.access == .read })
        bench.delegate.allow = true
        #expect(bench.error("0A 0300") == nil)
        #expect(bench.reads == 1)
    }

    @Test func aRefusedWriteIsInsufficientAuthorizationAndNeitherHandlerRuns() throws {
        let bench = try Bench()
        #expect(bench.error("12 0500 07") == .insufficientAuthorization)
        #expect(bench.delegate.asked.last?.access == .write)
        let sent = bench.delegate.sent
        bench.server.receive(bytes("52 0500 08")[...])  // Write Command: no answer, dropped
        #expect(bench.delegate.sent == sent)
        #expect(bench.validated == 0 && bench.written.isEmpty)
        bench.delegate.allow = true
        #expect(bench.error("12 0500 09") == nil)
        #expect(bench.written == [[0x09]])
    }

    /// Vol 3, Part F, 3.4.6.1: the Prepare Write Request is refused itself, so nothing of the
    /// refused value is queued and the Execute Write Request that follows writes nothing.
    @Test func aPreparedWriteIsRefusedWhenPrepared() throws {
        let bench = try Bench()
        #expect(bench.error("16 0500 0000 0A0B") == .insufficientAuthorization)
        #expect(bench.error("18 01") == nil)
        #expect(bench.validated == 0 && bench.written.isEmpty)
        bench.delegate.allow = true
        #expect(bench.error("16 0500 0000 0A0B") == nil)
        bench.delegate.allow = false  // what was authorized when prepared is written
        #expect(bench.error("18 01") == nil)
        #expect(bench.written == [[0x0A, 0x0B]])
    }

    /// Authorization comes after the link's security: an unencrypted link is told to pair
    /// (0x05) or encrypt (0x0F) first, and the device is not asked about it.
    @Test func securityIsAnsweredBeforeAuthorization() throws {
        let bench = try Bench()
        bench.delegate.allow = false
        #expect(bench.error("0A 0700") == .insufficientAuthentication)
        bench.server.session.linkSecurity.hasLongTermKey = true
        #expect(bench.error("0A 0700") == .insufficientEncryption)
        #expect(bench.delegate.asked.isEmpty)
        bench.server.session.linkSecurity = LinkSecurity(isEncrypted: true, isAuthenticated: false, isSecureConnections: true,
                                                    encryptionKeySize: 16)
        #expect(bench.error("0A 0700") == .insufficientAuthorization)
        #expect(bench.delegate.asked.count == 1)
        bench.delegate.allow = true
        #expect(bench.error("0A 0700") == nil)
        #expect(bench.reads == 1)
    }

    /// Access comes first: a Write Request or Prepare Write Request to a value that takes Write
    /// Commands only is Write Not Permitted (0x03), and the device is not asked.
    @Test func writeNotPermittedIsAnsweredBeforeAuthorization() throws {
        let bench = try Bench()
        bench.delegate.allow = true
        #expect(bench.error("12 0B00 01") == .writeNotPermitted)
        #expect(bench.error("16 0B00 0000 01") == .writeNotPermitted)
        #expect(bench.delegate.asked.isEmpty)
        bench.server.receive(bytes("52 0B00 02")[...])
        #expect(bench.delegate.asked.count == 1 && bench.written == [[0x02]])
    }

    @Test func aCharacteristicThatDecidesItselfIsNotLeftToTheDelegate() throws {
        let allowed = try Bench(peer: 1)
        allowed.delegate.allow = false
        #expect(allowed.error("0A 0900") == nil)
        let refused = try Bench(peer: 2)
        refused.delegate.allow = true
        #expect(refused.error("0A 0900") == .insufficientAuthorization)
        #expect(allowed.delegate.asked.isEmpty && refused.delegate.asked.isEmpty)
        #expect(refused.reads == 0)
    }

    /// A delegate that does not answer for authorization (a fuzz target, a test) refuses.
    @Test func withNobodyToAskTheValueIsRefused() throws {
        final class Silent: ATTServerDelegate {
            var errors: [ATTError?] = []
            func attServer(_ server: ATTServer, send pdu: ArraySlice<UInt8>, kind: ATTSendKind) -> Bool { true }
            func attServer(_ server: ATTServer, refused opcode: UInt8, handle: UInt16, error: ATTError) { errors.append(error) }
            func attServerTransactionTimedOut(_ server: ATTServer) {}
        }
        let bench = try Bench()
        let silent = Silent()
        bench.server.delegate = silent
        bench.server.receive(bytes("0A 0300")[...])
        #expect(silent.errors == [.insufficientAuthorization])
    }

    @Test func permissionsThatRequireAuthorizationAllowTheAccess() {
        #expect(AttributePermissions.readAuthorizationRequired.allowsReading)
        #expect(!AttributePermissions.readAuthorizationRequired.allowsWriting)
        #expect(AttributePermissions.writeAuthorizationRequired.allowsWriting)
        #expect(!AttributePermissions.writeAuthorizationRequired.allowsReading)
    }
}
