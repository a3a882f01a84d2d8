import BlemuCentral
import BlemuCore
import BlemuCrypto
import BlemuHCI
import BlemuL2CAP
import BlemuSMP
import BlemuSecurity
import Logging
import Testing
@testable import HostTestSupport

/// The central's security wired into `CentralHost`, against a scripted controller: SMP on CID
/// 0x0006, LE Enable Encryption with a bond's key, Encryption Change back.
@Suite struct CentralSecurityHostTests {
    private func attached(_ b: CentralBench) -> CentralSecurity {
        let security = CentralSecurity(
            configuration: CentralSecurityConfiguration(),
            owner: BondOwner(device: "central", name: "blemu central", address: BluetoothAddress("D0:01:02:03:04:05")!),
            localAddress: LEAddress(BluetoothAddress("D0:01:02:03:04:05")!, isRandom: true), scheduler: b.scheduler,
            logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() }))
        b.host.ownRandomAddress = BluetoothAddress("D0:01:02:03:04:05")!
        b.host.attach(security: security)
        return security
    }

    @Test func aBondedPeripheralIsEncryptedWithLEEnableEncryption() throws {
        let b = try CentralBench(extended: false)
        let security = attached(b)
        let link = try b.connect()
        let key = SMPLongTermKey(key: [UInt8](repeating: 0x42, count: 16), encryptedDiversifier: 0x1234, randomNumber: 0x0102_0304_0506_0708)
        security.bonds.save(Bond(peer: LEAddress(b.peer, isRandom: true), longTermKey: key, encryptionKeySize: 16,
                                 secureConnections: false, authenticated: true))
        var outcome: Result<LinkSecurity, CentralSecurityError>?
        security.secure(link.handle) { outcome = $0 }
        let command = try #require(b.controller.commands(HCIOpcode.leEnableEncryption).last)
        #expect(command.parameters == HCICommand.leEnableEncryption(handle: link.handle, randomNumber: key.randomNumber,
                                                                    encryptedDiversifier: key.encryptedDiversifier, key: key.key).parameters)
        #expect(b.controller.takeL2CAP(handle: link.handle, cid: L2CAPChannel.securityManager).isEmpty, "no pairing")
        #expect(outcome == nil)
        b.controller.event(0x08, [0x00, 0x40, 0x00, 0x01])   // Encryption Change, enabled
        let security2 = try #require(try outcome?.get())
        #expect(security2.isEncrypted && security2.isAuthenticated && security2.isBonded)
        // Written into the link's LEConnection, where its GATT session and channels read it.
        #expect(link.connection.security.current == security2)
    }

    @Test func withoutABondItPairsOnTheSMPChannel() throws {
        let b = try CentralBench(extended: false)
        let security = attached(b)
        let link = try b.connect()
        security.secure(link.handle) { _ in }
        let sent = b.controller.takeL2CAP(handle: link.handle, cid: L2CAPChannel.securityManager)
        let request = try SMPPairingRequest(pdu: try #require(sent.first)[...])
        #expect(request.features.ioCapability == .keyboardDisplay && request.features.authRequirements.mitm)
        #expect(request.features.authRequirements.bonding && request.features.authRequirements.secureConnections)
        // The peripheral refuses: the outcome names the reason.
        var outcome: Result<LinkSecurity, CentralSecurityError>?
        security.secure(link.handle) { outcome = $0 }
        b.controller.sendL2CAP(handle: link.handle, cid: L2CAPChannel.securityManager, SMPPairingFailed(reason: .pairingNotSupported).encoded)
        #expect(outcome == .failure(.pairingFailed(reason: .pairingNotSupported, origin: .peer)))
    }

    @Test func withoutSecurityAttachedPairingIsStillRefused() throws {
        let b = try CentralBench(extended: false)
        let link = try b.connect()
        b.controller.sendL2CAP(handle: link.handle, cid: L2CAPChannel.securityManager, SMPSecurityRequest(
            authRequirements: SMPAuthRequirements(bonding: true, mitm: false, secureConnections: true)).encoded)
        let answer = b.controller.takeL2CAP(handle: link.handle, cid: L2CAPChannel.securityManager)
        #expect(answer.first?.first == SMPCode.pairingFailed.rawValue)
    }
}
