/// How the two devices authenticate each other (Vol 3, Part H, 2.3.5.1).
public enum SMPPairingMethod: Equatable, Sendable {
    /// No user interaction and no MITM protection (the keys are unauthenticated).
    case justWorks
    /// LE Secure Connections only: both show a six-digit value, both users confirm it matches.
    case numericComparison
    /// One side shows a six-digit passkey and the other types it, or both type the same one.
    case passkeyEntry(SMPPasskeyEntryRoles)
    /// Keys from out of band. blemu has no OOB channel; a request for it fails (OOB Not Available).
    case outOfBand

    /// Whether the keys this method yields are authenticated (MITM protection).
    public var isAuthenticated: Bool {
        switch self {
        case .justWorks: false
        case .numericComparison, .passkeyEntry, .outOfBand: true
        }
    }

    /// Selects the method (2.3.5.1).
    ///
    /// OOB first: in LE legacy when both set the OOB data flag, in Secure Connections when
    /// either does. Then "if both devices have not set the MITM option", Just Works; otherwise
    /// the IO capability mapping of Table 2.8 (initiator columns, responder rows), where
    /// Numeric Comparison replaces some Just Works and Passkey Entry cells when both support
    /// Secure Connections.
    public static func select(initiator: SMPPairingFeatures, responder: SMPPairingFeatures,
                              secureConnections: Bool) -> SMPPairingMethod {
        if secureConnections ? (initiator.oobDataPresent || responder.oobDataPresent)
            : (initiator.oobDataPresent && responder.oobDataPresent) {
            return .outOfBand
        }
        guard initiator.authRequirements.mitm || responder.authRequirements.mitm else { return .justWorks }
        return fromIOCapabilities(initiator: initiator.ioCapability, responder: responder.ioCapability,
                                  secureConnections: secureConnections)
    }

    /// Table 2.8: the IO capability mapping alone.
    public static func fromIOCapabilities(initiator: SMPIOCapability, responder: SMPIOCapability,
                                          secureConnections: Bool) -> SMPPairingMethod {
        let responderDisplays = SMPPairingMethod.passkeyEntry(.responderDisplays)
        let initiatorDisplays = SMPPairingMethod.passkeyEntry(.initiatorDisplays)
        switch (responder, initiator) {
        case (.noInputNoOutput, _), (_, .noInputNoOutput):
            return .justWorks
        case (.displayOnly, .displayOnly), (.displayOnly, .displayYesNo),
             (.displayYesNo, .displayOnly):
            return .justWorks
        case (.displayOnly, .keyboardOnly), (.displayOnly, .keyboardDisplay),
             (.displayYesNo, .keyboardOnly), (.keyboardDisplay, .keyboardOnly):
            return responderDisplays
        case (.displayYesNo, .displayYesNo):
            return secureConnections ? .numericComparison : .justWorks
        case (.displayYesNo, .keyboardDisplay), (.keyboardDisplay, .keyboardDisplay):
            return secureConnections ? .numericComparison : responderDisplays
        case (.keyboardOnly, .displayOnly), (.keyboardOnly, .displayYesNo), (.keyboardOnly, .keyboardDisplay),
             (.keyboardDisplay, .displayOnly):
            return initiatorDisplays
        case (.keyboardOnly, .keyboardOnly):
            return .passkeyEntry(.bothInput)
        case (.keyboardDisplay, .displayYesNo):
            return secureConnections ? .numericComparison : initiatorDisplays
        }
    }
}

/// Who shows the passkey and who types it.
public enum SMPPasskeyEntryRoles: Equatable, Sendable {
    case responderDisplays
    case initiatorDisplays
    /// Both users type the same passkey (KeyboardOnly on both sides).
    case bothInput

    /// Whether the responder (this peripheral) shows the passkey rather than asking for it.
    public var responderDisplays: Bool { self == .responderDisplays }
}
