import BlemuATT
import BlemuChannels
import BlemuConnection
import BlemuCore
import BlemuEATT
import BlemuGATT
import BlemuGATTClient

/// Whether a central's GATT client uses Enhanced ATT bearers (`blemu gatt --eatt`).
public enum EATTUse: String, CaseIterable, Sendable {
    /// When the link is encrypted and the peer's Server Supported Features say EATT; else one bearer.
    case auto
    /// Never: the unenhanced bearer only.
    case off
    /// Always: the link is secured for it, and a peer without EATT (or refusing) is an error.
    case require
}

extension CentralLink {
    /// The most enhanced bearers a central opens on a link: one Enhanced Credit Based request's worth (Vol 3, Part A, 4.25).
    public static let maxEnhancedBearers = EATT.maxBearersPerRequest

    /// A GATT client on each of the link's enhanced bearers (the bearers are its `LEConnection`'s).
    func attachClientsOnEnhancedBearers() {
        connection.attachClientsOnEnhancedBearers { [unowned self] client, enhanced in
            // Part G, 7.2 bit 1 (written before opening): the server may notify and indicate on
            // any bearer; they reach whoever listens to the link's client.
            client.onNotification = { [unowned self] handle, value in self.client.onNotification?(handle, value) }
            client.onIndication = { [unowned self] handle, value in self.client.onIndication?(handle, value) }
            // Part F, 3.3.3: a timed-out enhanced bearer is closed; the link and its other bearers stay.
            client.onTimeout = { [weak channel = enhanced.channel] in channel?.disconnect() }
        }
    }

    /// The link's Enhanced ATT bearers (`openEnhancedBearers`).
    var enhanced: EnhancedBearers<EnhancedEndpoint> { connection.enhanced }

    /// The GATT clients of the link's enhanced bearers (`openEnhancedBearers`).
    public var enhancedClients: [GATTClient] { enhanced.entries.compactMap(\.endpoint.client) }

    /// Every bearer's client: the unenhanced one first, then the enhanced ones.
    public var clients: [GATTClient] { [client] + enhancedClients }

    /// Opens up to `count` (1-5) Enhanced ATT bearers, one GATT client on each, when the peer's
    /// Server Supported Features (Vol 3, Part G, 7.4) say EATT (bit 0), after writing our
    /// Client Supported Features with the EATT bit (7.2: a client that supports EATT sets it; also
    /// bit 2, Multiple Handle Value Notification, which the client reads). A peer that does not
    /// gets `.failure(.att(.requestNotSupported, handle: 0))` without a channel asked for. The link
    /// must be encrypted (Part G, 3.6), else the peer refuses every channel (`.notSent`).
    /// `.success` with the clients of the bearers opened.
    public func openEnhancedBearers(count: Int = CentralLink.maxEnhancedBearers, mtu: UInt16 = UInt16(GATTClient.maximumMTU),
                                    completion: @escaping (Result<[GATTClient], GATTClientError>) -> Void) {
        gattCharacteristics { [weak self] result in
            guard let self else { return }
            let characteristics: [DiscoveredCharacteristic]
            switch result {
            case .failure(let error): return completion(.failure(error))
            case .success(let found): characteristics = found
            }
            guard let features = characteristics.first(where: { $0.uuid == GATTType.serverSupportedFeatures }) else {
                return completion(.failure(.att(.requestNotSupported, handle: 0)))
            }
            client.read(features.valueHandle) { [weak self] result in
                guard let self else { return }
                switch result {
                case .failure(let error): completion(.failure(error))
                case .success(let value):
                    guard (value.first ?? 0) & EATT.serverSupportsEATT != 0 else {
                        return completion(.failure(.att(.requestNotSupported, handle: 0)))
                    }
                    let open = { [weak self] in
                        guard let self else { return }
                        let before = enhanced.entries.count
                        let asked = enhanced.open(on: channels, count: count, mtu: mtu) { [weak self] opened in
                            guard let self else { return }
                            completion(opened == 0 ? .failure(.notSent) : .success(enhanced.entries[before...].compactMap(\.endpoint.client)))
                        }
                        if !asked { completion(.failure(.invalidArgument("no enhanced channels can be asked for"))) }
                    }
                    guard let clientFeatures = characteristics.first(where: { $0.uuid == GATTType.clientSupportedFeatures }) else {
                        return open()
                    }
                    // A refusal does not stop EATT: the bit only lets the server use any bearer.
                    client.write(clientFeatures.valueHandle, [EATT.clientSupportsEATT | EATT.clientSupportsMultipleNotifications]) { _ in open() }
                }
            }
        }
    }

    /// The characteristics of the peer's GATT service: from what `discoverAll` found, else discovered.
    private func gattCharacteristics(_ completion: @escaping (Result<[DiscoveredCharacteristic], GATTClientError>) -> Void) {
        if let known = client.services.first(where: { $0.uuid == GATTType.gattService }) {
            return completion(.success(known.characteristics.map(\.characteristic)))
        }
        client.discoverPrimaryServices(GATTType.gattService) { [weak self] result in
            guard let self else { return }
            switch result {
            case .failure(let error): completion(.failure(error))
            case .success(let services):
                guard let gatt = services.first else { return completion(.success([])) }
                client.discoverCharacteristics(of: gatt, completion: completion)
            }
        }
    }

    /// Reads every handle, the reads spread over the link's bearers with at most one on each at
    /// a time (Vol 3, Part F, 3.3.2; `RequestSpread`); `then` with each handle's result and how
    /// many bearers carried them. A read lost with an enhanced bearer that closed (the peer may
    /// close one at any time) is read again on the unenhanced bearer.
    public func read(_ handles: [UInt16],
                     then: @escaping (_ results: [UInt16: Result<[UInt8], GATTClientError>], _ bearersUsed: Int) -> Void) {
        spread(handles, key: { $0 }, run: { client, handle, done in client.read(handle, completion: done) }, then: then)
    }

    /// Writes every value with a response (Write Characteristic Value, Vol 3, Part G, 4.9.3),
    /// the writes spread over the link's bearers as `read` spreads reads: any bearer may carry
    /// any request (Part G, 3.6). A value too long for one request is a Long Write (4.9.4) whose
    /// Prepare Writes and Execute Write all go on the one bearer that started it: a prepare
    /// queue is per bearer (Part F, 3.4.6: an Execute Write acts on what was prepared on its own
    /// bearer), so the procedure is never split (`reliableWrite` stays on one bearer likewise).
    /// The handles must differ (one result each); `then` with each handle's result and how many
    /// bearers carried them.
    public func write(_ writes: [(handle: UInt16, value: [UInt8])],
                      then: @escaping (_ results: [UInt16: Result<Void, GATTClientError>], _ bearersUsed: Int) -> Void) {
        spread(writes.map { Keyed(key: $0.handle, value: $0.value) }, key: \.key, run: { client, write, done in
            client.write(write.key, write.value, completion: done)
        }, then: then)
    }

    /// Writes each characteristic's CCCD (`GATTClient.configure`): notifications when it
    /// notifies, else indications; spread over the link's bearers as `write` spreads writes.
    /// The values reach the link's client (`onNotification`, `onIndication`) whichever bearer
    /// carried the subscription and whichever the server sends them on (Part G, 7.2, bit 1).
    /// `then` with each value handle's result and how many bearers carried them.
    public func subscribe(_ characteristics: [RemoteCharacteristic],
                          then: @escaping (_ results: [UInt16: Result<Void, GATTClientError>], _ bearersUsed: Int) -> Void) {
        spread(characteristics, key: \.valueHandle, run: { client, characteristic, done in
            let notify = characteristic.properties.contains(.notify)
            client.configure(characteristic, notify: notify, indicate: !notify, completion: done)
        }, then: then)
    }

    private struct Keyed {
        var key: UInt16
        var value: [UInt8]
    }

    /// Runs each request on one of the link's bearers, at most one at a time on each
    /// (`RequestSpread`); a request lost with an enhanced bearer that closed is run again on the
    /// unenhanced one. `then` with each key's result and how many bearers carried them.
    private func spread<Request, Value>(_ requests: [Request], key: @escaping (Request) -> UInt16,
                                        run: @escaping (GATTClient, Request, @escaping (Result<Value, GATTClientError>) -> Void) -> Void,
                                        then: @escaping ([UInt16: Result<Value, GATTClientError>], Int) -> Void) {
        var results: [UInt16: Result<Value, GATTClientError>] = [:]
        RequestSpread.start(requests, over: { [weak self] in self?.clients ?? [] }, run: { [weak self] request, client, done in
            run(client, request) { [weak self] result in
                if case .failure(.disconnected) = result, let self, isOpen, client !== self.client {
                    return run(self.client, request) { result in
                        results[key(request)] = result
                        done()
                    }
                }
                results[key(request)] = result
                done()
            }
        }, then: { used in then(results, used) })
    }
}
