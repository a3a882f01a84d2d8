import BlemuCore
import BlemuCrypto
import BlemuDevice
import BlemuGATT
import BlemuHost
import BlemuSMP
import BlemuSecurity
import Testing
@testable import HostTestSupport

/// Authorization per central (`authorize DEVICE UUID allow|deny PEER`, Docs/SECURITY.md): the
/// answer for one central overrides the answer for every central, for that central only.
@Suite struct PeerAuthorizationTests {
    /// A device with one read-authorized value whose handler counts its reads.
    final class GuardedDevice: Device {
        static let deviceName = "guarded"
        static let summary = "test device"
        var reads = 0
        lazy var secret = Characteristic(0x2A20, properties: [.read], permissions: [.readAuthorizationRequired],
                                         onRead: { [unowned self] _, value in reads += 1; value.append(0x2A); return nil })
        var profile = DeviceProfile(defaultName: "Guarded", advertisedServices: [BluetoothUUID(0x1815)], appearance: 0)
        var services: [Service] { [Service(BluetoothUUID(0x1815)) { secret }] }
        func start(context: DeviceContext) {}
    }

    static let other: UInt16 = 0x0041
    static let otherCentral = BluetoothAddress("E0:E1:E2:E3:E4:E5")!

    /// Two centrals connected: `bench.central` on `Bench.link`, `otherCentral` on `other`.
    private func twoLinks() throws -> (Bench, GuardedDevice) {
        let device = GuardedDevice()
        let bench = try Bench(device: device)
        bench.controller.connect(handle: Bench.link, peer: bench.central)
        bench.controller.connect(handle: Self.other, peer: Self.otherCentral)
        return (bench, device)
    }

    /// The ATT error a Read Request got, nil when it was served.
    private func readError(_ bench: Bench, _ device: GuardedDevice, link: UInt16) -> UInt8? {
        let answer = bench.att([0x0A] + Bench.le(device.secret.valueHandle), handle: link).last
        guard let answer, answer.first == 0x01 else { return nil }
        return answer.last
    }

    @Test func allowForOneCentralOnly() throws {
        let (bench, device) = try twoLinks()
        #expect(bench.peripheral.control.setAuthorization(true, characteristic: BluetoothUUID(0x2A20), peer: LEAddress(bench.central, isRandom: true)) == nil)
        #expect(bench.read(device.secret, link: Bench.link) == [0x2A])
        #expect(device.reads == 1)
        #expect(readError(bench, device, link: Self.other) == 0x08)
        #expect(device.reads == 1, "a refused central's read reached the handler")
        #expect(bench.peripheral.control.peerAuthorizations.map(\.peer) == [LEAddress(bench.central, isRandom: true)])
        #expect(bench.peripheral.control.authorizations.isEmpty, "a per-central answer changed the answer for every central")
    }

    @Test func denyForOneCentralAfterAllowingEvery() throws {
        let (bench, device) = try twoLinks()
        #expect(bench.peripheral.control.setAuthorization(true, characteristic: BluetoothUUID(0x2A20)) == nil)
        #expect(bench.peripheral.control.setAuthorization(false, characteristic: BluetoothUUID(0x2A20), peer: LEAddress(Self.otherCentral, isRandom: true)) == nil)
        #expect(bench.read(device.secret, link: Bench.link) == [0x2A])
        #expect(readError(bench, device, link: Self.other) == 0x08)
        #expect(device.reads == 1)
        // The newest answer for that central counts.
        #expect(bench.peripheral.control.setAuthorization(true, characteristic: BluetoothUUID(0x2A20), peer: LEAddress(Self.otherCentral, isRandom: true)) == nil)
        #expect(bench.read(device.secret, link: Self.other) == [0x2A])
        #expect(bench.peripheral.control.peerAuthorizations.count == 1)
    }

    @Test func bondedCentralByItsIdentityAddress() throws {
        let device = GuardedDevice()
        let bench = try Bench(device: device)
        let identity = BluetoothAddress("C1:11:11:11:11:11")!
        let linkAddress = BluetoothAddress("C9:00:00:00:00:09")!
        bench.peripheral.security.bonds.save(Bond(
            peer: LEAddress(linkAddress, isRandom: true), identity: LEAddress(identity, isRandom: true),
            longTermKey: SMPLongTermKey(key: [UInt8](repeating: 0x5A, count: 16)),
            encryptionKeySize: 16, secureConnections: true, authenticated: false))
        bench.controller.connect(handle: Bench.link, peer: linkAddress)
        bench.controller.connect(handle: Self.other, peer: Self.otherCentral)
        #expect(bench.peripheral.control.setAuthorization(true, characteristic: BluetoothUUID(0x2A20), peer: LEAddress(identity, isRandom: true)) == nil)
        #expect(bench.read(device.secret, link: Bench.link) == [0x2A])
        #expect(readError(bench, device, link: Self.other) == 0x08)
        // Across a reconnection: the answer belongs to the identity, not to the link.
        bench.controller.disconnect(handle: Bench.link)
        bench.controller.connect(handle: 0x0042, peer: linkAddress)
        #expect(bench.read(device.secret, link: 0x0042) == [0x2A])
        #expect(device.reads == 2)
    }

    @Test func theTableIsBounded() throws {
        let (bench, device) = try twoLinks()
        #expect(bench.peripheral.control.setAuthorization(true, characteristic: BluetoothUUID(0x2A20), peer: LEAddress(bench.central, isRandom: true)) == nil)
        for n in 0..<PeripheralControl.maximumPeerAuthorizations {
            let address = BluetoothAddress(value: 0xD0_0000_0000 + UInt64(n))
            #expect(bench.peripheral.control.setAuthorization(true, characteristic: BluetoothUUID(0x2A20), peer: LEAddress(address, isRandom: true)) == nil)
        }
        #expect(bench.peripheral.control.peerAuthorizations.count == PeripheralControl.maximumPeerAuthorizations)
        // The oldest, the first central's, went out.
        #expect(!bench.peripheral.control.peerAuthorizations.contains { $0.peer.address == bench.central })
        #expect(readError(bench, device, link: Bench.link) == 0x08)
    }
}

extension PeerAuthorizationTests {
    /// A public and a random address with the same 48 bits are two devices (Vol 6, Part B, 1.3):
    /// an answer for one is not an answer for the other.
    @Test func anAnswerMatchesTheAddressWithItsType() throws {
        let device = GuardedDevice()
        let bench = try Bench(device: device)
        let same = BluetoothAddress("C5:55:55:55:55:55")!
        bench.controller.connect(handle: Bench.link, peer: same)                                // random (0x01)
        bench.controller.connectEnhanced(handle: Self.other, peerType: 0x00, peer: same, rpa: nil)  // public
        #expect(bench.peripheral.control.linkSummaries.map(\.peer.isRandom) == [true, false])
        #expect(bench.peripheral.control.setAuthorization(true, characteristic: BluetoothUUID(0x2A20), peer: LEAddress(same, isRandom: false)) == nil)
        #expect(readError(bench, device, link: Bench.link) == 0x08, "the random central was served by the public one's answer")
        #expect(bench.read(device.secret, link: Self.other) == [0x2A])
        #expect(bench.peripheral.control.setAuthorization(true, characteristic: BluetoothUUID(0x2A20), peer: LEAddress(same, isRandom: true)) == nil)
        #expect(bench.read(device.secret, link: Bench.link) == [0x2A])
        // Both answers are kept, one per type.
        #expect(bench.peripheral.control.peerAuthorizations.map(\.peer.isRandom) == [false, true])
    }

    /// A bonded central's identity is matched with its type too.
    @Test func anIdentityIsMatchedWithItsType() throws {
        let device = GuardedDevice()
        let bench = try Bench(device: device)
        let identity = BluetoothAddress("11:22:33:44:55:66")!
        let linkAddress = BluetoothAddress("C9:00:00:00:00:09")!
        bench.peripheral.security.bonds.save(Bond(
            peer: LEAddress(linkAddress, isRandom: true), identity: LEAddress(identity, isRandom: false),
            longTermKey: SMPLongTermKey(key: [UInt8](repeating: 0x5A, count: 16)),
            encryptionKeySize: 16, secureConnections: true, authenticated: false))
        bench.controller.connect(handle: Bench.link, peer: linkAddress)
        #expect(bench.peripheral.control.setAuthorization(true, characteristic: BluetoothUUID(0x2A20), peer: LEAddress(identity, isRandom: true)) == nil)
        #expect(readError(bench, device, link: Bench.link) == 0x08, "a random answer served a public identity")
        #expect(bench.peripheral.control.setAuthorization(true, characteristic: BluetoothUUID(0x2A20), peer: LEAddress(identity, isRandom: false)) == nil)
        #expect(bench.read(device.secret, link: Bench.link) == [0x2A])
    }

    /// An answer for every central leaves the per-central ones in place: they are listed.
    @Test func theAnswersForOneCentralOutliveAWideAnswerAndAreListed() throws {
        let (bench, device) = try twoLinks()
        #expect(bench.peripheral.control.setAuthorization(false, characteristic: BluetoothUUID(0x2A20), peer: LEAddress(Self.otherCentral, isRandom: true)) == nil)
        #expect(bench.peripheral.control.setAuthorization(true, characteristic: BluetoothUUID(0x2A20)) == nil)
        #expect(bench.peripheral.control.peerAuthorizations(of: BluetoothUUID(0x2A20)).map(\.peer) == [LEAddress(Self.otherCentral, isRandom: true)])
        #expect(bench.peripheral.control.peerAuthorizations(of: BluetoothUUID(0x2A21)).isEmpty)
        #expect(readError(bench, device, link: Self.other) == 0x08)
    }
}
