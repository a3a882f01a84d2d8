import BlemuCore
import BlemuCrypto
import BlemuDevice
import BlemuGATT
import BlemuHost
import BlemuL2CAP
import BlemuDevices
import BlemuSMP
import BlemuSecurity
import BlemuTestSupport
import Testing

/// GATT client steps on the `Bench`, as a central's stack takes them, for device tests.
extension Bench {
    static let link: UInt16 = 0x0040

    /// A bench with one central connected on `Bench.link`.
    static func connected(_ device: Device, logger: CapturedLog? = nil) throws -> Bench {
        let bench = try logger.map { try Bench(device: device, logger: $0.logger) } ?? Bench(device: device)
        bench.controller.connect(handle: link, peer: bench.central)
        return bench
    }

    /// A bench whose central has paired as the lock and the thermostat demand (Docs/SECURITY.md):
    /// bonded with an authenticated Secure Connections key, and the link encrypted with it
    /// (LE Long Term Key Request answered from the bond, then Encryption Change).
    static func paired(_ device: Device, logger: CapturedLog? = nil) throws -> Bench {
        let bench = try connected(device, logger: logger)
        bench.encryptWithBond(link: link, peer: bench.central)
        return bench
    }

    /// The central `peer` on `link` is bonded (authenticated, Secure Connections) and encrypts
    /// the link with that bond, as after pairing with the passkey.
    func encryptWithBond(link: UInt16, peer: BluetoothAddress) {
        peripheral.security.bonds.save(Bond(
            peer: LEAddress(peer, isRandom: true), longTermKey: SMPLongTermKey(key: [UInt8](repeating: 0x5A, count: 16)),
            encryptionKeySize: 16, secureConnections: true, authenticated: true))
        controller.event(0x3E, [0x05] + Self.le(link) + [UInt8](repeating: 0, count: 10))
        controller.event(0x08, [0x00] + Self.le(link) + [0x01])
        #expect(peripheral.linkSecurity(of: ATTPeer(connectionHandle: link, address: peer)).isAuthenticated)
    }

    /// Read Request: the value, or nil when the answer was an Error Response.
    func read(_ handle: UInt16, link: UInt16 = Bench.link) -> [UInt8]? {
        let answer = att([0x0A] + Self.le(handle), handle: link).last
        guard let answer, answer.first == 0x0B else { return nil }
        return Array(answer.dropFirst())
    }

    func read(_ characteristic: Characteristic, link: UInt16 = Bench.link) -> [UInt8]? {
        read(characteristic.valueHandle, link: link)
    }

    /// Write Request: every ATT PDU the peripheral sent in answer (notifications it triggered
    /// come before the Write Response).
    @discardableResult
    func write(_ handle: UInt16, _ value: [UInt8], link: UInt16 = Bench.link) -> [[UInt8]] {
        att([0x12] + Self.le(handle) + value, handle: link)
    }

    @discardableResult
    func write(_ characteristic: Characteristic, _ value: [UInt8], link: UInt16 = Bench.link) -> [[UInt8]] {
        write(characteristic.valueHandle, value, link: link)
    }

    /// The ATT error a write was answered with, or nil for a Write Response.
    func writeError(_ characteristic: Characteristic, _ value: [UInt8], link: UInt16 = Bench.link) -> UInt8? {
        let answer = write(characteristic, value, link: link).last ?? []
        if answer == [0x13] { return nil }
        guard answer.count == 5, answer[0] == 0x01, answer[1] == 0x12,
              Array(answer[2...3]) == Self.le(characteristic.valueHandle) else { return 0 }
        return answer[4]
    }

    /// Writes the CCCD: notifications, indications, or nothing. Returns what came back.
    @discardableResult
    func subscribe(_ characteristic: Characteristic, notify: Bool = true, indicate: Bool = false,
                   link: UInt16 = Bench.link) -> [[UInt8]] {
        let flags: UInt8 = (notify ? 1 : 0) | (indicate ? 2 : 0)
        return write(characteristic.clientConfigurationHandle ?? 0, [flags, 0], link: link)
    }

    /// Everything sent on ATT to `link` since the last look.
    func sent(link: UInt16 = Bench.link) -> [[UInt8]] {
        controller.takeL2CAP(handle: link, cid: L2CAPChannel.att)
    }

    /// The handle of `characteristic`'s descriptor of type `uuid`.
    func descriptorHandle(_ characteristic: Characteristic, _ uuid: BluetoothUUID) -> UInt16? {
        peripheral.database.attributes.first { $0.characteristic === characteristic && $0.type == uuid
            && $0.handle > characteristic.valueHandle }?.handle
    }

    /// Moves the clock in steps of `step`, so timers fire at their times.
    func run(for duration: Duration, step: Duration = .seconds(1)) {
        var left = duration
        while left > .zero {
            let now = min(step, left)
            scheduler.advance(by: now)
            left -= now
        }
    }

    static func le(_ value: UInt16) -> [UInt8] { [UInt8(value & 0xFF), UInt8(value >> 8)] }
}

extension Array where Element == [UInt8] {
    /// The values of the notifications (0x1B) for `characteristic` among these PDUs.
    func notifications(of characteristic: Characteristic) -> [[UInt8]] { updates(0x1B, characteristic) }
    /// The values of the indications (0x1D) for `characteristic` among these PDUs.
    func indications(of characteristic: Characteristic) -> [[UInt8]] { updates(0x1D, characteristic) }

    private func updates(_ opcode: UInt8, _ characteristic: Characteristic) -> [[UInt8]] {
        filter { $0.count >= 3 && $0[0] == opcode && [UInt8]($0[1...2]) == Bench.le(characteristic.valueHandle) }
            .map { [UInt8]($0.dropFirst(3)) }
    }
}
