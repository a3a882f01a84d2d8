import BlemuATT
import BlemuCore
import Testing
@testable import BlemuGATT

/// Attribute permissions against the link's security (Vol 3, Part C, 10.3; Part F, 3.2.5 and 4.4).
@Suite struct ATTServerSecurityTests {
    /// One service: 0x0003 needs encryption to read, 0x0005 authentication to write, 0x0007
    /// Secure Connections to read, 0x0009 a 16-octet key to read.
    final class Bench {
        let server: ATTServer
        let delegate = RecordingDelegate()

        init() throws {
            let encrypted = Characteristic(0x2A19, properties: [.read], permissions: [.readEncryptionRequired],
                                           onRead: { _, value in value.append(1); return nil })
            let authenticated = Characteristic(0x2A1A, properties: [.write], permissions: [.writeAuthenticationRequired],
                                               onWrite: { _ in nil })
            let secureConnections = Characteristic(0x2A1B, properties: [.read],
                                                   permissions: [.readEncryptionRequired, .secureConnectionsRequired],
                                                   onRead: { _, value in value.append(3); return nil })
            let longKey = Characteristic(0x2A1C, properties: [.read], permissions: [.readEncryptionRequired],
                                         onRead: { _, value in value.append(4); return nil })
            longKey.minimumEncryptionKeySize = 16
            let database = try GATTDatabase(services: [Service(0x180F) { encrypted; authenticated; secureConnections; longKey }])
            server = ATTServer(database: database, peer: ATTPeer(connectionHandle: 1, address: BluetoothAddress(value: 1)),
                               scheduler: ManualScheduler())
            server.record(by: delegate)
        }

        func error(_ hex: String) -> ATTError? {
            let before = delegate.answered.count
            server.receive(bytes(hex)[...])
            return delegate.answered.count > before ? delegate.answered.last?.error : nil
        }
    }

    @Test func anUnencryptedLinkIsToldToPairOrWithABondToEncrypt() throws {
        let bench = try Bench()
        #expect(bench.error("0A 0300") == .insufficientAuthentication)
        #expect(bench.error("12 0500 01") == .insufficientAuthentication)
        bench.server.session.linkSecurity.hasLongTermKey = true
        #expect(bench.error("0A 0300") == .insufficientEncryption)
        #expect(bench.error("12 0500 01") == .insufficientEncryption)
    }

    // MARK: A request that comes while the link pairs

    private static let encryptedJustWorks = LinkSecurity(isEncrypted: true, isAuthenticated: false, isSecureConnections: true,
                                                         encryptionKeySize: 16)

    @Test func aRequestRefusedWhileThePairingRunsIsAnsweredOnceTheLinkIsEncrypted() throws {
        let bench = try Bench()
        var pairing = true
        bench.server.session.security.pairingUnderWay = { pairing }
        bench.server.receive(bytes("0A 0300")[...])
        #expect(bench.delegate.sent.isEmpty, "no Insufficient Authentication in the middle of the pairing")
        #expect(bench.server.holdsRequestForPairing)
        // Encrypted, the key distribution still running: the read is answered now.
        bench.server.session.linkSecurity = Self.encryptedJustWorks
        bench.server.securitySettled()
        #expect(bench.delegate.sent.map(\.pdu) == [bytes("0B 01")])
        pairing = false
        bench.server.securitySettled()
        #expect(bench.delegate.sent.count == 1, "answered once")
    }

    @Test func aRequestTheEncryptionDoesNotSatisfyWaitsForThePairingsEndThenIsRefused() throws {
        let bench = try Bench()
        var pairing = true
        bench.server.session.security.pairingUnderWay = { pairing }
        bench.server.receive(bytes("12 0500 01")[...])
        bench.server.session.linkSecurity = Self.encryptedJustWorks
        bench.server.securitySettled()
        #expect(bench.delegate.sent.isEmpty, "authentication is wanted: held while the pairing runs")
        pairing = false
        bench.server.securitySettled()
        #expect(bench.delegate.sent.map(\.pdu) == [bytes("01 12 0500 05")])
        #expect(!bench.server.holdsRequestForPairing)
    }

    @Test func aPairingThatFailsGivesTheHeldRequestItsRefusal() throws {
        let bench = try Bench()
        var pairing = true
        bench.server.session.security.pairingUnderWay = { pairing }
        bench.server.receive(bytes("0A 0300")[...])
        pairing = false
        bench.server.securitySettled()
        #expect(bench.delegate.sent.map(\.pdu) == [bytes("01 0A 0300 05")])
    }

    @Test func anotherRequestBeforeTheAnswerGetsTheHeldRefusalFirstAndNothingIsLost() throws {
        let bench = try Bench()
        bench.server.session.security.pairingUnderWay = { true }
        bench.server.receive(bytes("0A 0300")[...])
        bench.server.receive(bytes("0A 0900")[...])
        // The first is answered with its refusal; the second is held in its turn.
        #expect(bench.delegate.sent.map(\.pdu) == [bytes("01 0A 0300 05")])
        #expect(bench.server.holdsRequestForPairing)
    }

    @Test func withoutAPairingOrWithoutAnyoneToPairARefusalIsAtOnce() throws {
        let bench = try Bench()
        #expect(bench.error("0A 0300") == .insufficientAuthentication, "no security manager on the link")
        bench.server.session.security.pairingUnderWay = { false }
        #expect(bench.error("0A 0300") == .insufficientAuthentication)
        // A command refused for security is never held (nothing answers a command).
        bench.server.session.security.pairingUnderWay = { true }
        bench.server.receive(bytes("52 0500 01")[...])
        #expect(!bench.server.holdsRequestForPairing)
    }

    @Test func anUnauthenticatedKeyIsNotEnoughForAuthentication() throws {
        let bench = try Bench()
        bench.server.session.linkSecurity = LinkSecurity(isEncrypted: true, isAuthenticated: false, isSecureConnections: true,
                                                    encryptionKeySize: 16)
        #expect(bench.error("0A 0300") == nil)
        #expect(bench.error("12 0500 01") == .insufficientAuthentication)
        bench.server.session.linkSecurity.isAuthenticated = true
        #expect(bench.error("12 0500 01") == nil)
    }

    @Test func legacyIsNotSecureConnections() throws {
        let bench = try Bench()
        bench.server.session.linkSecurity = LinkSecurity(isEncrypted: true, isAuthenticated: true, isSecureConnections: false,
                                                    encryptionKeySize: 16)
        #expect(bench.error("0A 0700") == .insufficientAuthentication)
        bench.server.session.linkSecurity.isSecureConnections = true
        #expect(bench.error("0A 0700") == nil)
    }

    @Test func aShortKeyIsTooShort() throws {
        let bench = try Bench()
        bench.server.session.linkSecurity = LinkSecurity(isEncrypted: true, isAuthenticated: true, isSecureConnections: true,
                                                    encryptionKeySize: 7)
        #expect(bench.error("0A 0900") == .encryptionKeySizeTooShort)
        #expect(bench.error("0A 0300") == nil)
        bench.server.session.linkSecurity.encryptionKeySize = 16
        #expect(bench.error("0A 0900") == nil)
    }

    /// A descriptor's own read permissions (a clone's, from what the original refused): the
    /// link's security as for a value, the characteristic's own open value untouched.
    @Test func aDescriptorAsksForItsOwnSecurity() throws {
        let open = Characteristic(0x2A19, properties: [.read], cachedValue: [1], descriptors: [
            Descriptor(uuid: GATTType.userDescription, value: [0x41], permissions: [.readEncryptionRequired]),
            Descriptor(uuid: GATTType.presentationFormat, value: [0x42], permissions: [.readAuthenticationRequired]),
        ])
        let server = ATTServer(database: try GATTDatabase(services: [Service(0x180F) { open }]),
                               peer: ATTPeer(connectionHandle: 1, address: BluetoothAddress(value: 1)), scheduler: ManualScheduler())
        let delegate = RecordingDelegate()
        server.record(by: delegate)
        func error(_ hex: String) -> ATTError? {
            let before = delegate.answered.count
            server.receive(bytes(hex)[...])
            return delegate.answered.count > before ? delegate.answered.last?.error : nil
        }
        #expect(error("0A 0300") == nil)
        #expect(error("0A 0400") == .insufficientAuthentication)
        #expect(error("0A 0500") == .insufficientAuthentication)
        server.session.linkSecurity.hasLongTermKey = true
        #expect(error("0A 0400") == .insufficientEncryption)
        server.session.linkSecurity = LinkSecurity(isEncrypted: true, isAuthenticated: false, isSecureConnections: true, encryptionKeySize: 16)
        #expect(error("0A 0400") == nil)
        #expect(error("0A 0500") == .insufficientAuthentication)
        server.session.linkSecurity.isAuthenticated = true
        #expect(error("0A 0500") == nil)
    }

    @Test func aWriteCommandWithoutTheSecurityIsDropped() throws {
        let bench = try Bench()
        let sent = bench.delegate.sent.count
        bench.server.receive(bytes("52 0500 01")[...])
        #expect(bench.delegate.sent.count == sent)
        #expect(bench.delegate.wrote.isEmpty)
    }

    /// `subscribingNeedsValueSecurity` (Vol 3, Part G, 3.3.3.3: the CCCD's write permissions
    /// are the higher layer's): 0x0004 is the CCCD of a value that needs encryption to write,
    /// 0x0007 of one that needs authentication, both with the option; 0x000A of a value that
    /// needs encryption, without it (the default, as before).
    final class SubscriptionBench {
        let server: ATTServer
        let delegate = RecordingDelegate()
        let encrypted: Characteristic
        let authenticated: Characteristic
        let open: Characteristic

        init() throws {
            let encrypted = Characteristic(0x2A19, properties: [.write, .notify], permissions: [.writeEncryptionRequired],
                                           onWrite: { _ in nil })
            encrypted.subscribingNeedsValueSecurity = true
            let authenticated = Characteristic(0x2A1A, properties: [.write, .notify], permissions: [.writeAuthenticationRequired],
                                               onWrite: { _ in nil })
            authenticated.subscribingNeedsValueSecurity = true
            let open = Characteristic(0x2A1B, properties: [.write, .notify], permissions: [.writeEncryptionRequired],
                                      onWrite: { _ in nil })
            self.encrypted = encrypted
            self.authenticated = authenticated
            self.open = open
            let database = try GATTDatabase(services: [Service(0x180F) { encrypted; authenticated; open }])
            server = ATTServer(database: database, peer: ATTPeer(connectionHandle: 1, address: BluetoothAddress(value: 1)),
                               scheduler: ManualScheduler())
            server.record(by: delegate)
        }

        func error(_ hex: String) -> ATTError? {
            let before = delegate.answered.count
            server.receive(bytes(hex)[...])
            return delegate.answered.count > before ? delegate.answered.last?.error : nil
        }
    }

    @Test func aCCCDThatNeedsTheValuesSecurityRefusesAnUnencryptedLink() throws {
        let bench = try SubscriptionBench()
        #expect(bench.encrypted.clientConfigurationHandle == 0x0004)
        #expect(bench.authenticated.clientConfigurationHandle == 0x0007)
        #expect(bench.open.clientConfigurationHandle == 0x000A)
        // No key for this central: it must pair (Vol 3, Part C, 10.3.1, Table 10.2).
        #expect(bench.error("12 0400 0100") == .insufficientAuthentication)
        #expect(bench.error("12 0700 0100") == .insufficientAuthentication)
        // With a key it only needs to encrypt.
        bench.server.session.linkSecurity.hasLongTermKey = true
        #expect(bench.error("12 0400 0100") == .insufficientEncryption)
        #expect(bench.error("12 0700 0100") == .insufficientEncryption)
        // A Write Command to it is dropped, as any write without the security.
        bench.server.receive(bytes("52 0400 0100")[...])
        #expect(bench.delegate.configured.isEmpty)
        #expect(bench.server.session.clientConfiguration(bench.encrypted) == 0)
        // Reading it stays open (Table 3.11: "Readable with no authentication or authorization").
        #expect(bench.error("0A 0400") == nil)
    }

    @Test func aCCCDWithoutTheOptionTakesAnyLink() throws {
        let bench = try SubscriptionBench()
        #expect(bench.error("12 0A00 0100") == nil)
        #expect(bench.server.session.clientConfiguration(bench.open) == 0x0001)
        // The value itself still needs encryption.
        #expect(bench.error("12 0900 01") == .insufficientAuthentication)
    }

    @Test func aCCCDThatNeedsTheValuesSecurityTakesAnEncryptedLink() throws {
        let bench = try SubscriptionBench()
        bench.server.session.linkSecurity = LinkSecurity(isEncrypted: true, isAuthenticated: false, isSecureConnections: true,
                                                 encryptionKeySize: 16)
        #expect(bench.error("12 0400 0100") == nil)
        #expect(bench.server.session.clientConfiguration(bench.encrypted) == 0x0001)
        // Authentication needs an authenticated key, for the CCCD as for the value.
        #expect(bench.error("12 0700 0100") == .insufficientAuthentication)
        bench.server.session.linkSecurity.isAuthenticated = true
        #expect(bench.error("12 0700 0100") == nil)
        #expect(bench.server.session.clientConfiguration(bench.authenticated) == 0x0001)
    }

    @Test func restoredSubscriptionsAreTheAllowedFlagsOnly() throws {
        let f = try Fixture()
        let notifying = f.database.characteristics.filter(\.notifies)
        let first = try #require(notifying.first)
        f.server.restoreClientConfigurations([first.valueHandle: 0x0003, 0x7777: 0x0001])
        let allowed: UInt16 = (first.properties.contains(.notify) ? 1 : 0) | (first.properties.contains(.indicate) ? 2 : 0)
        #expect(f.server.session.clientConfiguration(first) == allowed)
        #expect(f.server.session.clientConfigurationValues == [first.valueHandle: allowed])
    }
}
