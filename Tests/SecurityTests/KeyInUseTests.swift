import BlemuCore
import BlemuCrypto
@testable import BlemuSMP
import Testing
@testable import BlemuSecurity

/// What a link's key brings once Encryption Change says it is on, for both roles.
@Suite struct KeyInUseTests {
    @Test func aBondsKeyIsBondedAndKeepsItsStrength() {
        let bond = Bond(peer: LEAddress(BluetoothAddress(value: 1), isRandom: false), longTermKey: SMPLongTermKey(key: [UInt8](repeating: 7, count: 16)),
                        encryptionKeySize: 12, secureConnections: true, authenticated: true)
        #expect(LinkSecurity(bond: bond) == LinkSecurity(isEncrypted: true, isAuthenticated: true, isSecureConnections: true,
                                                         encryptionKeySize: 12, isBonded: true))
    }

    @Test func aPairingsKeyIsNotBondedYet() {
        let summary = SMPPairingSummary(method: .justWorks, secureConnections: false, bonded: true, encryptionKeySize: 7)
        #expect(LinkSecurity(pairing: summary) == LinkSecurity(isEncrypted: true, encryptionKeySize: 7))
    }

    /// The smaller of the two sizes counts; no key known counts as unauthenticated legacy, 16 octets.
    @Test func theLinkIsAsStrongAsTheSmallerKeySize() {
        let unknown = LinkSecurity.encrypted(with: nil, controllerKeySize: nil)
        #expect(unknown.security == LinkSecurity(isEncrypted: true, encryptionKeySize: 16) && unknown.difference == nil)
        let key = LinkSecurity(isEncrypted: true, isSecureConnections: true, encryptionKeySize: 16)
        let same = LinkSecurity.encrypted(with: key, controllerKeySize: 16)
        #expect(same.security == key && same.difference == nil)
        let shorter = LinkSecurity.encrypted(with: key, controllerKeySize: 10)
        #expect(shorter.security.encryptionKeySize == 10 && shorter.difference != nil)
        let longer = LinkSecurity.encrypted(with: LinkSecurity(isEncrypted: true, encryptionKeySize: 7), controllerKeySize: 16)
        #expect(longer.security.encryptionKeySize == 7 && longer.difference != nil)
    }
}
