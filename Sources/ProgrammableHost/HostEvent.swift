import BlemuCentral
import BlemuCore
import BlemuSecurity

/// What the programmable host tells a program, as it happens (Docs/CONTROL.md, "The programmable
/// host"): the outcome of what a request started (a connection, a reset) and what the air brings
/// (advertising reports, disconnections). The control socket streams them to `watch host`.
public enum HostEvent: Equatable, Sendable {
    /// A `reset` finished: every link closed, scanning stopped, attempts called off, a new random address.
    case reset
    /// One advertising report of scan `scan`.
    case advertisement(scan: Int, AdvertisingReportDetails)
    /// Scan `scan` ended.
    case scanStopped(scan: Int, reason: ScanStopReason)
    /// A link opened, in either role.
    case connected(HostLinkSummary)
    /// Connection attempt `attempt` ended without a link: `status` is the HCI status when the
    /// controller gave one.
    case connectFailed(attempt: Int, reason: ConnectFailure, status: UInt8?)
    /// A link closed with this HCI reason (Vol 4, Part E, 7.7.5).
    case disconnected(link: Int, reason: UInt8)
    /// Advertisement `advertisement` ended, and why (`advertise-stop`, a reset, a timeout, the controller).
    case advertisingStopped(advertisement: Int, reason: ProgrammedAdvertising.StopReason)
    /// An L2CAP credit based channel opened: ours (`channel-connect`) or the peer's to an SPSM listened on.
    case channelOpened(HostChannelSummary)
    /// Our `channel-connect` ended without a channel.
    case channelFailed(channel: Int, reason: HostChannelEnd)
    /// One SDU received on a channel.
    case channelData(channel: Int, [UInt8])
    /// A channel's send queue has room again after refusing an SDU (`no-room`).
    case channelReady(channel: Int)
    /// An open channel closed, whoever closed it.
    case channelClosed(channel: Int, reason: HostChannelEnd)
    /// A pairing asks the program (`pairing-answer` answers it; a passkey display needs none).
    case pairingRequest(HostSecurity.Request)
    /// A link's security level rose (whoever started it), or the link turned bonded at its level.
    case security(link: Int, LinkSecurity)
    /// Securing a link failed: a `secure` asked of it, or a pairing the peer started.
    case securityFailed(link: Int, reason: SecureFailure, detail: String)

    /// The event's name on the socket.
    public var name: String {
        switch self {
        case .reset: return "reset"
        case .advertisement: return "advertisement"
        case .scanStopped: return "scan-stopped"
        case .connected: return "connected"
        case .connectFailed: return "connect-failed"
        case .disconnected: return "disconnected"
        case .advertisingStopped: return "advertising-stopped"
        case .channelOpened: return "channel-opened"
        case .channelFailed: return "channel-failed"
        case .channelData: return "channel-data"
        case .channelReady: return "channel-ready"
        case .channelClosed: return "channel-closed"
        case .pairingRequest: return "pairing-request"
        case .security: return "security"
        case .securityFailed: return "security-failed"
        }
    }
}

/// Why a scan ended.
public enum ScanStopReason: String, Equatable, Sendable {
    /// `scan-stop`.
    case requested
    /// A new `scan` took its place.
    case replaced
    /// `reset`.
    case reset
    /// The controller refused the scan, or went away.
    case controller
}

/// Why a connection attempt ended without a link.
public enum ConnectFailure: String, Equatable, Sendable {
    /// Nothing answered within the attempt's timeout: it was cancelled.
    case timeout
    /// The controller refused or failed the attempt (its status says how).
    case controller
    /// A reset, or the controller going away, ended it.
    case stopped
}

/// Which role this side plays on a link (Vol 4, Part E, 7.7.65.1: Role).
public enum HostRole: String, Equatable, Sendable {
    case central
    case peripheral
}

/// A link as the host shows it: in `connected` events and the `links` reply.
public struct HostLinkSummary: Equatable, Sendable {
    /// The link id: never reused while the process runs (not the HCI handle, which is).
    public var link: Int
    public var role: HostRole
    public var handle: UInt16
    public var peer: LEAddress
    /// The address this side used on the link, and its type.
    public var ownAddress: LEAddress
    /// What made it: the connection attempt (central) or the advertisement (peripheral).
    public var attempt: Int?
    public var advertisement: Int?
    /// Connection interval in 1.25 ms units, Peripheral latency, Supervision timeout in 10 ms units.
    public var interval: UInt16
    public var latency: UInt16
    public var supervisionTimeout: UInt16
    public var security: LinkSecurity

    public init(link: Int, role: HostRole, handle: UInt16, peer: LEAddress, ownAddress: LEAddress, attempt: Int?,
                advertisement: Int?, interval: UInt16, latency: UInt16, supervisionTimeout: UInt16, security: LinkSecurity) {
        self.link = link
        self.role = role
        self.handle = handle
        self.peer = peer
        self.ownAddress = ownAddress
        self.attempt = attempt
        self.advertisement = advertisement
        self.interval = interval
        self.latency = latency
        self.supervisionTimeout = supervisionTimeout
        self.security = security
    }

    /// The LE security mode 1 level the link has now (Vol 3, Part C, 10.2.1): 1 no security,
    /// 2 unauthenticated pairing with encryption, 3 authenticated pairing with encryption,
    /// 4 authenticated LE Secure Connections pairing with a 128-bit key.
    public var level: Int { security.leSecurityLevel }
}

extension LinkSecurity {
    /// LE security mode 1's level (Vol 3, Part C, 10.2.1).
    public var leSecurityLevel: Int {
        guard isEncrypted else { return 1 }
        guard isAuthenticated else { return 2 }
        return isSecureConnections && encryptionKeySize == 16 ? 4 : 3
    }
}
