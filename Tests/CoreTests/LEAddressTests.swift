import BlemuCore
import Testing

/// The one LE address type: an address with its type, as HCI reports it and SMP, bonds and
/// connection events use it.
@Suite struct LEAddressTests {
    let address = BluetoothAddress("C0:11:22:33:44:55")!

    /// Peer_Address_Type (Vol 4, Part E, 7.7.65.10): 0x00 public, 0x01 random, 0x02 public
    /// identity, 0x03 random identity; the type is bit 0, and a reserved value is read the same
    /// way rather than refused.
    @Test func fromHCIPeerAddressType() {
        #expect(LEAddress(address, peerAddressType: 0x00) == LEAddress(address, isRandom: false))
        #expect(LEAddress(address, peerAddressType: 0x01) == LEAddress(address, isRandom: true))
        #expect(LEAddress(address, peerAddressType: 0x02) == LEAddress(address, isRandom: false))
        #expect(LEAddress(address, peerAddressType: 0x03) == LEAddress(address, isRandom: true))
        for raw in UInt8(0x04)...0xFF {
            #expect(LEAddress(address, peerAddressType: raw).isRandom == (raw & 0x01 != 0))
        }
    }

    /// What HCI commands that name the address take back: 0x00 or 0x01, never an identity type.
    @Test func backToHCI() {
        #expect(LEAddress(address, peerAddressType: 0x03).peerAddressType == 0x01)
        #expect(LEAddress(address, peerAddressType: 0x02).peerAddressType == 0x00)
    }

    /// A public and a random address with the same 48 bits are two devices (Vol 6, Part B, 1.3).
    @Test func theTypeIsPartOfTheAddress() {
        let random = LEAddress(address, isRandom: true), publicOne = LEAddress(address, isRandom: false)
        #expect(random != publicOne)
        #expect(Set([random, publicOne, LEAddress(address, isRandom: true)]).count == 2)
    }
}
