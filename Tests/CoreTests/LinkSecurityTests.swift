import BlemuCore
import Testing

/// The one link-security value both roles' Security Managers report and the ATT server checks.
@Suite struct LinkSecurityTests {
    @Test func aNewLinkIsUnencryptedWithoutKey() {
        let link = LinkSecurity.unencrypted
        #expect(!link.isEncrypted && !link.isAuthenticated && !link.isSecureConnections && !link.isBonded && !link.hasLongTermKey)
        #expect(link.encryptionKeySize == 0)
        #expect(link.summary == "not encrypted")
    }

    @Test func theSummaryNamesWhatProtectsTheLink() {
        let link = LinkSecurity(isEncrypted: true, isAuthenticated: false, isSecureConnections: true, encryptionKeySize: 16, isBonded: true)
        #expect(link.summary == "encrypted (LE Secure Connections, unauthenticated, 16-octet key, bonded)")
        let legacy = LinkSecurity(isEncrypted: true, isAuthenticated: true, encryptionKeySize: 7)
        #expect(legacy.summary == "encrypted (LE legacy, authenticated, 7-octet key)")
    }

    /// The key is as strong as the smaller of the negotiated and the reported size.
    @Test func theControllersKeySizeCountsWhenSmaller() {
        var link = LinkSecurity(isEncrypted: true, encryptionKeySize: 7)
        #expect(link.controllerReported(keySize: 16) != nil)
        #expect(link.encryptionKeySize == 7)
        #expect(link.controllerReported(keySize: 7) == nil)
        link.encryptionKeySize = 16
        #expect(link.controllerReported(keySize: 10)?.contains("counts as 10") == true)
        #expect(link.encryptionKeySize == 10)
    }
}
