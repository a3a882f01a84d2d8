import BlemuCore
import Testing
@testable import BlemuGATT

/// A device's view of a peer carries the address with its type (the one LE address type); the
/// device API's `address` is still the 48 bits.
@Suite struct ATTPeerTests {
    let bits = BluetoothAddress("C0:11:22:33:44:55")!

    @Test func thePeerKeepsItsAddressType() {
        let publicPeer = ATTPeer(connectionHandle: 0x0040, address: LEAddress(bits, peerAddressType: 0x02))
        #expect(!publicPeer.leAddress.isRandom)
        #expect(publicPeer.address == bits)
        // A random address with the same 48 bits on the same link is another device (Vol 6, Part B, 1.3).
        #expect(publicPeer != ATTPeer(connectionHandle: 0x0040, address: LEAddress(bits, isRandom: true)))
    }

    /// A server or client made alone names its peer by the bits only: random, as a phone's.
    @Test func aPeerMadeAloneIsRandom() {
        #expect(ATTPeer(connectionHandle: 0x0040, address: bits).leAddress == LEAddress(bits, isRandom: true))
    }
}
