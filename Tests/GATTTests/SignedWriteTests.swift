import BlemuATT
import BlemuCore
import BlemuCrypto
import Testing
@testable import BlemuGATT

/// Signed Write Command (Vol 3, Part F, 3.4.5.4) and data signing (Vol 3, Part H, 2.4.5;
/// Vol 3, Part C, 10.4).
@Suite struct SignedWriteTests {
    /// 0x0003: signed writes allowed; 0x0005: Write Without Response only; 0x0007: signed
    /// writes, but encryption required.
    final class Bench {
        let server: ATTServer
        let delegate = RecordingDelegate()
        var values: [[UInt8]] = []
        static let csrk = bytes("00112233445566778899aabbccddeeff")

        init() throws {
            let signed = Characteristic(0x2A1A, properties: [.read, .authenticatedSignedWrites],
                                        onRead: { _, value in value.append(0); return nil }, onWrite: { _ in nil })
            let plain = Characteristic(0x2A1B, properties: [.writeWithoutResponse], onWrite: { _ in nil })
            let encrypted = Characteristic(0x2A1C, properties: [.authenticatedSignedWrites], permissions: [.writeEncryptionRequired],
                                           onWrite: { _ in nil })
            let database = try GATTDatabase(services: [Service(0x180F) { signed; plain; encrypted }])
            server = ATTServer(database: database, peer: ATTPeer(connectionHandle: 1, address: BluetoothAddress(value: 1)),
                               scheduler: ManualScheduler())
            server.record(by: delegate)
            signed.onWrite = { [unowned self] request in
                self.values.append(Array(request.value))
                return nil
            }
        }

        func send(_ handle: UInt16, _ value: [UInt8], counter: UInt32, key: [UInt8] = Bench.csrk) {
            var pdu: [UInt8] = [0xD2]
            pdu.appendLE(handle)
            pdu += value
            server.receive((pdu + ATTSignature.sign(pdu, counter: counter, csrk: key))[...])
        }
    }

    @Test func aVerifiedWriteReachesTheDeviceAndAReplayDoesNot() throws {
        let bench = try Bench()
        bench.server.session.signing = ATTSigningState(signatureKey: Bench.csrk, lastCounter: nil)
        bench.send(0x0003, [0x2A], counter: 0)
        #expect(bench.values == [[0x2A]])
        #expect(bench.delegate.acceptedCounters == [0])
        #expect(bench.server.session.signing?.lastCounter == 0)
        // The same PDU again, and an older counter: dropped (Vol 3, Part C, 10.4.2).
        bench.send(0x0003, [0x2A], counter: 0)
        #expect(bench.delegate.droppedSignedWrites == [.replayed(counter: 0, last: 0)])
        bench.send(0x0003, [0x2B], counter: 5)
        bench.send(0x0003, [0x2C], counter: 4)
        #expect(bench.values == [[0x2A], [0x2B]])
        #expect(bench.delegate.droppedSignedWrites.last == .replayed(counter: 4, last: 5))
        // No response is ever sent for a command.
        #expect(bench.delegate.sent.isEmpty)
    }

    @Test func aBadSignatureOrNoKeyIsIgnored() throws {
        let bench = try Bench()
        bench.send(0x0003, [0x01], counter: 1)
        #expect(bench.delegate.droppedSignedWrites == [.noKey])
        bench.server.session.signing = ATTSigningState(signatureKey: Bench.csrk, lastCounter: 7)
        bench.send(0x0003, [0x01], counter: 8, key: bytes("ffeeddccbbaa99887766554433221100"))
        #expect(bench.delegate.droppedSignedWrites.last == .badSignature)
        // A signature that failed does not spend the counter: the real one with 8 still goes.
        #expect(bench.server.session.signing?.lastCounter == 7)
        bench.send(0x0003, [0x02], counter: 8)
        #expect(bench.values == [[0x02]])
        // A truncated signature is an invalid command: ignored without an answer.
        bench.server.receive(bytes("D2 0300 01 0000")[...])
        #expect(bench.values == [[0x02]])
        #expect(bench.delegate.sent.isEmpty)
    }

    @Test func onlyCharacteristicsWithTheSignedWriteProperty() throws {
        let bench = try Bench()
        bench.server.session.signing = ATTSigningState(signatureKey: Bench.csrk, lastCounter: nil)
        bench.send(0x0005, [0x01], counter: 1)
        #expect(bench.delegate.answered.last?.error == .writeNotPermitted)
        // A value that needs encryption: a signature is not encryption (Vol 3, Part C, 10.2.3).
        bench.send(0x0007, [0x01], counter: 2)
        #expect(bench.delegate.answered.last?.error == .insufficientAuthentication)
        #expect(bench.values.isEmpty)
    }

    /// Hostile bytes: random Signed Write Commands never trap, and none reaches the device.
    @Test func randomSignedWritesNeverReachTheDevice() throws {
        let bench = try Bench()
        bench.server.session.signing = ATTSigningState(signatureKey: Bench.csrk, lastCounter: nil)
        var random = SeededRandom(seed: 10)
        for _ in 0..<3000 {
            let length = Int(random.next() % 23)
            var pdu: [UInt8] = [0xD2]
            for _ in 0..<length { pdu.append(UInt8(truncatingIfNeeded: random.next())) }
            if length >= 2, random.next() % 2 == 0 { pdu[1] = 0x03; pdu[2] = 0x00 }   // often the signed value
            bench.server.receive(pdu[...])
        }
        #expect(bench.values.isEmpty)
        #expect(bench.delegate.acceptedCounters.isEmpty)
        #expect(bench.delegate.sent.isEmpty, "a command is never answered")
    }

    @Test func onAnEncryptedLinkTheEncryptionIsTheProtection() throws {
        let bench = try Bench()
        bench.server.session.linkSecurity = LinkSecurity(isEncrypted: true, isAuthenticated: false, isSecureConnections: true,
                                                    encryptionKeySize: 16, hasLongTermKey: true)
        // No CSRK needed, the signature not checked (Vol 3, Part G, 4.9.2; Part C, 10.2.3).
        bench.send(0x0003, [0x05], counter: 0, key: bytes("ffeeddccbbaa99887766554433221100"))
        #expect(bench.values == [[0x05]])
        #expect(bench.delegate.droppedSignedWrites.isEmpty)
    }
}
