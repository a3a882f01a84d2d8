import BlemuATT
import BlemuCore
import BlemuCrypto
import BlemuDevices
import BlemuGATT
import BlemuHCI
import BlemuSimulator
import BlemuHost
import BlemuL2CAP
import BlemuSMP
import BlemuSecurity
import BlemuTestSupport
import Testing
@testable import HostTestSupport

/// Pairing, encryption and bonds through the whole stack, with a scripted controller.
@Suite struct SecurityHostTests {
    /// SimulatedController.connect: Peer_Address_Type 0x01 (random).
    private func centralAddress(_ bench: Bench) -> LEAddress { LEAddress(bench.central, isRandom: true) }

    private func longTermKeyRequest(_ bench: Bench, handle: UInt16 = Bench.link, rand: UInt64 = 0, ediv: UInt16 = 0) {
        var p: [UInt8] = [0x05]
        p.appendLE(handle)
        for index in 0..<8 { p.append(UInt8(truncatingIfNeeded: rand >> (8 * UInt64(index)))) }
        p.appendLE(ediv)
        bench.controller.event(0x3E, p)
    }

    private func encryptionChange(_ bench: Bench, handle: UInt16 = Bench.link, status: UInt8 = 0, enabled: UInt8 = 1) {
        var p: [UInt8] = [status]
        p.appendLE(handle)
        p.append(enabled)
        bench.controller.event(0x08, p)
    }

    @Test func aBondedCentralEncryptsAndItsSubscriptionsComeBack() throws {
        let device = HeartRateDevice(seed: 3)
        let bench = try Bench.connected(device)
        let key = [UInt8](repeating: 0x42, count: 16)
        let measurement = device.measurement.valueHandle
        bench.peripheral.security.bonds.save(Bond(
            peer: centralAddress(bench), longTermKey: SMPLongTermKey(key: key), encryptionKeySize: 16,
            secureConnections: true, authenticated: false,
            client: BondedClientState(clientConfigurations: [measurement: 0x0001])))

        longTermKeyRequest(bench)
        let reply = try #require(bench.controller.commands(HCIOpcode.leLongTermKeyRequestReply).last)
        #expect(reply.parameters == [0x40, 0x00] + key)
        encryptionChange(bench)
        // The controller's key size is checked (Vol 4, Part E, 7.5.7).
        #expect(bench.controller.commands(HCIOpcode.readEncryptionKeySize).last?.parameters == [0x40, 0x00])
        #expect(bench.peripheral.security.security(of: Bench.link).isBonded)
        // The ATT server sees Security's value as it is (one LinkSecurity, not a copy field by
        // field), plus the host's knowledge that the peer has a bond.
        var expected = bench.peripheral.security.security(of: Bench.link)
        expected.hasLongTermKey = true
        #expect(bench.peripheral.linkSecurity(of: ATTPeer(connectionHandle: Bench.link, address: bench.central)) == expected)
        #expect(expected.isEncrypted && expected.isBonded)
        // Notifications flow without a CCCD write on this link.
        bench.run(for: .seconds(2), step: .milliseconds(100))
        #expect(!bench.sent().notifications(of: device.measurement).isEmpty)
    }

    @Test func aCentralWithoutABondGetsTheNegativeReply() throws {
        let bench = try Bench.connected(HeartRateDevice(seed: 4))
        longTermKeyRequest(bench, rand: 7, ediv: 9)
        #expect(bench.controller.commands(HCIOpcode.leLongTermKeyRequestNegativeReply).last?.parameters == [0x40, 0x00])
        #expect(bench.controller.commands(HCIOpcode.leLongTermKeyRequestReply).isEmpty)
    }

    @Test func withAPasskeyTheLocksControlPointNeedsAnAuthenticatedLink() throws {
        let device = LockDevice(pin: "4821", seed: 2)
        let bench = try Bench(device: device, name: "Lock", security: SecurityConfiguration(passkey: 123456))
        bench.controller.connect(handle: Bench.link, peer: bench.central)
        #expect(bench.subscribe(device.controlPoint, notify: false, indicate: true) == [[0x13]])
        let unlock: [UInt8] = [0x02] + Array("4821".utf8)
        #expect(bench.writeError(device.controlPoint, unlock) == 0x05)
        // A bonded central that has not encrypted yet: Insufficient Encryption.
        bench.peripheral.security.bonds.save(Bond(
            peer: centralAddress(bench), longTermKey: SMPLongTermKey(key: [UInt8](repeating: 1, count: 16)),
            encryptionKeySize: 16, secureConnections: true, authenticated: false))
        bench.controller.connect(handle: 0x0041, peer: bench.central)
        #expect(bench.subscribe(device.controlPoint, notify: false, indicate: true, link: 0x0041) == [[0x13]])
        #expect(bench.writeError(device.controlPoint, unlock, link: 0x0041) == 0x0F)
        // Encrypted with that unauthenticated (Just Works) key: still Insufficient Authentication.
        longTermKeyRequest(bench, handle: 0x0041)
        encryptionChange(bench, handle: 0x0041)
        #expect(bench.writeError(device.controlPoint, unlock, link: 0x0041) == 0x05)
    }

    @Test func withoutAPasskeyTheLockStillNeedsAnAuthenticatedLink() throws {
        // The passkey is then the generated label (RunCommand); the rule is the lock's own.
        let device = LockDevice(pin: "4821", seed: 2)
        let bench = try Bench.connected(device)
        #expect(bench.subscribe(device.controlPoint, notify: false, indicate: true) == [[0x13]])
        #expect(bench.writeError(device.controlPoint, [0x02] + Array("4821".utf8)) == 0x05)
        #expect(bench.read(device.eventLog) == nil, "an unpaired central reads no event log")
        let lock = LockDevice(pin: "4821", seed: 2)
        let paired = try Bench.paired(lock)
        #expect(paired.subscribe(lock.controlPoint, notify: false, indicate: true) == [[0x13]])
        #expect(paired.write(lock.controlPoint, [0x02] + Array("4821".utf8)).last == [0x13])
        #expect(paired.read(lock.eventLog) != nil)
        // An authenticated key from LE legacy Passkey Entry is not enough: Secure Connections.
        let legacyLock = LockDevice(pin: "4821", seed: 2)
        let legacy = try Bench.connected(legacyLock)
        legacy.peripheral.security.bonds.save(Bond(
            peer: LEAddress(legacy.central, isRandom: true), longTermKey: SMPLongTermKey(key: [UInt8](repeating: 7, count: 16)),
            encryptionKeySize: 16, secureConnections: false, authenticated: true))
        legacy.controller.event(0x3E, [0x05, 0x40, 0x00] + [UInt8](repeating: 0, count: 10))
        legacy.controller.event(0x08, [0x00, 0x40, 0x00, 0x01])
        #expect(legacy.peripheral.linkSecurity(of: ATTPeer(connectionHandle: Bench.link, address: legacy.central)).isAuthenticated)
        #expect(legacy.read(legacyLock.eventLog) == nil)
        #expect(legacy.subscribe(legacyLock.controlPoint, notify: false, indicate: true) == [[0x13]])
        #expect(legacy.writeError(legacyLock.controlPoint, [0x02] + Array("4821".utf8)) == 0x05)
    }
}

extension SecurityHostTests {
    @Test func withAPasskeyTheThermostatsWritesNeedAnEncryptedLink() throws {
        let device = ThermostatDevice()
        let bench = try Bench(device: device, name: "Thermostat", security: SecurityConfiguration(passkey: 123456))
        bench.controller.connect(handle: Bench.link, peer: bench.central)
        #expect(bench.writeError(device.target, [0xD0, 0x07]) == 0x05)
        #expect(bench.writeError(device.mode, [0x01]) == 0x05)
        bench.peripheral.security.bonds.save(Bond(
            peer: LEAddress(bench.central, isRandom: true), longTermKey: SMPLongTermKey(key: [UInt8](repeating: 3, count: 16)),
            encryptionKeySize: 16, secureConnections: true, authenticated: true))
        bench.controller.connect(handle: 0x0041, peer: bench.central)
        #expect(bench.writeError(device.target, [0xD0, 0x07], link: 0x0041) == 0x0F)
        var p: [UInt8] = [0x05, 0x41, 0x00]
        p += [UInt8](repeating: 0, count: 10)
        bench.controller.event(0x3E, p)
        bench.controller.event(0x08, [0x00, 0x41, 0x00, 0x01])
        #expect(bench.write(device.target, [0xD0, 0x07], link: 0x0041).last == [0x13])
        // Still the range rule once the link is good.
        #expect(bench.writeError(device.target, [0x28, 0x23], link: 0x0041) == 0xFF)
    }

    @Test func withoutAPasskeyTheThermostatsWritesStillNeedEncryptionJustWorksIsEnough() throws {
        let device = ThermostatDevice()
        let bench = try Bench.connected(device)
        #expect(bench.writeError(device.target, [0xD0, 0x07]) == 0x05)
        #expect(bench.read(device.target) != nil, "reads stay open")
        // An unauthenticated (Just Works) bond's key is enough.
        bench.peripheral.security.bonds.save(Bond(
            peer: LEAddress(bench.central, isRandom: true), longTermKey: SMPLongTermKey(key: [UInt8](repeating: 4, count: 16)),
            encryptionKeySize: 16, secureConnections: true, authenticated: false))
        bench.controller.event(0x3E, [0x05, 0x40, 0x00] + [UInt8](repeating: 0, count: 10))
        bench.controller.event(0x08, [0x00, 0x40, 0x00, 0x01])
        #expect(bench.write(device.target, [0xD0, 0x07]).last == [0x13])
    }
}

/// Item: the key size each device needs is a declared permission (Vol 3, Part C, 10.2.1), checked
/// at pairing (Encryption Key Size, 0x06) and at every request (0x0C), whatever the controller says.
extension SecurityHostTests {
    /// Pairing Request: KeyboardDisplay, no OOB, bonding + MITM + SC, `maximumKeySize`, keys IdKey / EncKey+IdKey.
    private func pairingRequest(maximumKeySize: UInt8) -> [UInt8] { [0x01, 0x04, 0x00, 0x0D, maximumKeySize, 0x02, 0x03] }

    @Test func theLockRefusesAPairingThatWouldLeaveAKeyShorterThan16Octets() throws {
        let lock = LockDevice(pin: "4821", seed: 2)
        #expect(lock.controlPoint.minimumEncryptionKeySize == 16 && lock.eventLog.minimumEncryptionKeySize == 16)
        let bench = try Bench(device: lock, name: "Lock", security: SecurityConfiguration(passkey: 123456))
        #expect(bench.peripheral.database.requiredEncryptionKeySize == 16)
        bench.controller.connect(handle: Bench.link, peer: bench.central)
        bench.controller.sendL2CAP(handle: Bench.link, cid: 0x0006, pairingRequest(maximumKeySize: 7))
        #expect(bench.controller.takeL2CAP(handle: Bench.link, cid: 0x0006) == [[0x05, 0x06]])
        // 16 octets is what it needs: the pairing goes on.
        bench.controller.sendL2CAP(handle: Bench.link, cid: 0x0006, pairingRequest(maximumKeySize: 16))
        #expect(bench.controller.takeL2CAP(handle: Bench.link, cid: 0x0006).first?.first == 0x02)
    }

    @Test func theThermostatTakesAnyKeySizeTheCoreAllows() throws {
        let thermostat = ThermostatDevice()
        let bench = try Bench(device: thermostat, name: "Thermostat")
        #expect(bench.peripheral.database.requiredEncryptionKeySize == 7)
        bench.controller.connect(handle: Bench.link, peer: bench.central)
        bench.controller.sendL2CAP(handle: Bench.link, cid: 0x0006, pairingRequest(maximumKeySize: 7))
        let response = try #require(bench.controller.takeL2CAP(handle: Bench.link, cid: 0x0006).first)
        #expect(response.first == 0x02 && response[4] == 7)
    }

    /// A key of 7 octets (an older bond, or a controller that shortened it) never reaches the
    /// lock's control point or event log: Encryption Key Size Too Short (0x0C).
    @Test func aSevenOctetAuthenticatedKeyGetsEncryptionKeySizeTooShortFromTheLock() throws {
        let lock = LockDevice(pin: "4821", seed: 2)
        let bench = try Bench.connected(lock)
        bench.peripheral.security.bonds.save(Bond(
            peer: centralAddress(bench), longTermKey: SMPLongTermKey(key: [UInt8](repeating: 0x5A, count: 7) + [UInt8](repeating: 0, count: 9)),
            encryptionKeySize: 7, secureConnections: true, authenticated: true))
        longTermKeyRequest(bench)
        encryptionChange(bench)
        #expect(bench.peripheral.linkSecurity(of: ATTPeer(connectionHandle: Bench.link, address: bench.central)).isAuthenticated)
        #expect(bench.subscribe(lock.controlPoint, notify: false, indicate: true) == [[0x13]])
        #expect(bench.writeError(lock.controlPoint, [0x02] + Array("4821".utf8)) == 0x0C)
        #expect(bench.read(lock.eventLog) == nil)
        #expect(lock.state == .locked)
    }

    /// rootcanal reports 16 for a 7-octet key: the link keeps the smaller size, and the log
    /// says both.
    @Test func aControllerReportingALongerKeyThanNegotiatedDoesNotMakeTheKeyLonger() throws {
        let capture = CapturedLog()
        let lock = LockDevice(pin: "4821", seed: 2)
        let bench = try Bench.connected(lock, logger: capture)
        bench.controller.reportedKeySize = 16
        bench.peripheral.security.bonds.save(Bond(
            peer: centralAddress(bench), longTermKey: SMPLongTermKey(key: [UInt8](repeating: 0x5A, count: 7) + [UInt8](repeating: 0, count: 9)),
            encryptionKeySize: 7, secureConnections: true, authenticated: true))
        longTermKeyRequest(bench)
        encryptionChange(bench)
        #expect(bench.controller.commands(HCIOpcode.readEncryptionKeySize).count == 1)
        #expect(bench.peripheral.security.security(of: Bench.link).encryptionKeySize == 7)
        #expect(capture.lines.contains { $0.contains("reports a 16-octet key, 7 octets were negotiated") })
        #expect(bench.subscribe(lock.controlPoint, notify: false, indicate: true) == [[0x13]])
        #expect(bench.writeError(lock.controlPoint, [0x02] + Array("4821".utf8)) == 0x0C)
    }

    /// A controller that shortened the key itself: the smaller size counts too.
    @Test func aControllerReportingAShorterKeyMakesTheLinkShorter() throws {
        let lock = LockDevice(pin: "4821", seed: 2)
        let bench = try Bench.paired(lock)
        #expect(bench.peripheral.security.security(of: Bench.link).encryptionKeySize == 16)
        var security = LinkSecurity(isEncrypted: true, isAuthenticated: true, isSecureConnections: true, encryptionKeySize: 16, isBonded: true)
        #expect(security.controllerReported(keySize: 16) == nil)
        #expect(security.controllerReported(keySize: 10) != nil && security.encryptionKeySize == 10)
    }
}
