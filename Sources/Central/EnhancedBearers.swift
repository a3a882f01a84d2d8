import BlemuATT
import BlemuChannels
import BlemuCore
import BlemuGATT
import BlemuGATTClient

/// One Enhanced ATT bearer a central opened (Vol 3, Part G, 3.6; Part F, 3.2.11): an Enhanced
/// Credit Based channel on the EATT PSM, an `ATTBearer` over it with the channel's ATT_MTU, and
/// a GATT client of its own on it, whose requests wait for no other bearer's.
public final class EnhancedClientBearer: ATTTransport {
    public let channel: CreditBasedChannel
    public let bearer: ATTBearer
    public let client: GATTClient

    init(channel: CreditBasedChannel, scheduler: TimerScheduling) {
        self.channel = channel
        // Part F, 3.2.8: the smaller of the two MTUs L2CAP configured.
        bearer = ATTBearer(scheduler: scheduler, mtu: Int(min(channel.local.mtu, channel.peerMTU)), enhanced: true)
        client = GATTClient(scheduler: scheduler, bearer: bearer)
        bearer.transport = self
    }

    /// One ATT PDU is one SDU on the channel.
    public func sendATT(_ pdu: ArraySlice<UInt8>, kind: ATTSendKind) -> Bool { channel.send(pdu) }
}

/// The enhanced bearers of one central link, and the channels under them.
final class EnhancedClientBearers: CreditBasedChannelDelegate {
    /// The EATT PSM (Assigned Numbers, L2CAP PSM 0x0027).
    static let psm: UInt16 = 0x0027
    let channels: CreditBasedChannels
    let scheduler: TimerScheduling
    private(set) var bearers: [EnhancedClientBearer] = []
    private var asked: [CreditBasedChannel] = []
    private var completion: ((Result<[EnhancedClientBearer], GATTClientError>) -> Void)?

    init(channels: CreditBasedChannels, scheduler: TimerScheduling) {
        self.channels = channels
        self.scheduler = scheduler
    }

    func open(count: Int, mtu: UInt16, completion: @escaping (Result<[EnhancedClientBearer], GATTClientError>) -> Void) {
        guard self.completion == nil else { return completion(.failure(.queueFull)) }
        let opened = channels.connectEnhanced(spsm: Self.psm, count: count,
                                              parameters: ChannelParameters(mtu: mtu, mps: mtu, initialCredits: 8), delegate: self)
        guard !opened.isEmpty else { return completion(.failure(.invalidArgument("no enhanced channels can be asked for"))) }
        asked = opened
        self.completion = completion
    }

    private func settle(_ channel: CreditBasedChannel) {
        asked.removeAll { $0 === channel }
        guard asked.isEmpty, let completion else { return }
        self.completion = nil
        completion(bearers.isEmpty ? .failure(.notSent) : .success(bearers))
    }

    func channelOpened(_ channel: CreditBasedChannel) {
        bearers.append(EnhancedClientBearer(channel: channel, scheduler: scheduler))
        settle(channel)
    }

    func channel(_ channel: CreditBasedChannel, received sdu: ArraySlice<UInt8>) {
        bearers.first { $0.channel === channel }?.bearer.receive(sdu)
    }

    func channelClosed(_ channel: CreditBasedChannel, reason: ChannelCloseReason) {
        if let index = bearers.firstIndex(where: { $0.channel === channel }) {
            bearers.remove(at: index).client.close()
        }
        settle(channel)
    }

    func channelIsReady(_ channel: CreditBasedChannel) {}
}

extension CentralLink {
    /// Opens up to `count` (1-5) Enhanced ATT bearers, one GATT client on each, when the peer's
    /// Server Supported Features (Vol 3, Part G, 7.4) say EATT (bit 0); a peer that does not
    /// gets `.failure(.att(.requestNotSupported, handle: 0))` without a channel asked for. The link must
    /// be encrypted (Part G, 3.6), else the peer refuses every channel (`.notSent`).
    public func openEnhancedBearers(count: Int, mtu: UInt16 = UInt16(GATTClient.maximumMTU),
                                    completion: @escaping (Result<[EnhancedClientBearer], GATTClientError>) -> Void) {
        client.discoverPrimaryServices(GATTType.gattService) { [weak self] result in
            guard let self else { return }
            switch result {
            case .failure(let error): completion(.failure(error))
            case .success(let services):
                guard let gatt = services.first else { return completion(.failure(.att(.requestNotSupported, handle: 0))) }
                self.client.discoverCharacteristics(of: gatt) { [weak self] result in
                    guard let self else { return }
                    switch result {
                    case .failure(let error): completion(.failure(error))
                    case .success(let characteristics):
                        guard let features = characteristics.first(where: { $0.uuid == GATTType.serverSupportedFeatures }) else {
                            return completion(.failure(.att(.requestNotSupported, handle: 0)))
                        }
                        self.client.read(features.valueHandle) { [weak self] result in
                            guard let self else { return }
                            switch result {
                            case .failure(let error): completion(.failure(error))
                            case .success(let value):
                                guard (value.first ?? 0) & 0x01 != 0 else { return completion(.failure(.att(.requestNotSupported, handle: 0))) }
                                self.enhancedBearers.open(count: count, mtu: mtu, completion: completion)
                            }
                        }
                    }
                }
            }
        }
    }
}
