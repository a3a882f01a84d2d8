import BlemuATT
import BlemuChannels
import BlemuCore
import BlemuDevice
import BlemuEATT
import BlemuGATT
import BlemuHCI
import BlemuL2CAP
import Logging

// MARK: - The device's view

extension Peripheral: DeviceContext {
    public func publishL2CAPChannel(security: ChannelSecurity, parameters: ChannelParameters,
                                    delegate: CreditBasedChannelDelegate) -> UInt16? {
        guard let links = madeConnectionParts?.links,
              let server = links.channelServers.publish(security: security, parameters: parameters, delegate: delegate) else { return nil }
        logger.info("L2CAP channel published on SPSM \(Hex.word(server.spsm))\(security.requiresEncryption ? " (encrypted)" : "")")
        return server.spsm
    }

    public func unpublishL2CAPChannel(_ spsm: UInt16) {
        madeConnectionParts?.links.channelServers.remove(spsm: spsm)
    }

    public var peers: [ATTPeer] {
        guard let parts = madeConnectionParts else { return [] }
        return parts.links.connections.values.map(\.peer).sorted { $0.connectionHandle < $1.connectionHandle }
    }

    @discardableResult
    public func notify(_ characteristic: Characteristic, to peer: ATTPeer?, encode: (inout ValueBuffer) -> Void) -> Bool {
        // One buffer for the peripheral: the device encodes once, each link copies what its
        // ATT_MTU allows into its own update buffer, and nothing is allocated.
        notificationValue.reset()
        encode(&notificationValue)
        return send(characteristic, notificationValue.bytes, to: peer)
    }

    @discardableResult
    public func notify(_ characteristic: Characteristic, value: [UInt8], to peer: ATTPeer?) -> Bool {
        send(characteristic, value[...], to: peer)
    }

    private func send(_ characteristic: Characteristic, _ value: ArraySlice<UInt8>, to peer: ATTPeer?) -> Bool {
        guard let parts = madeConnectionParts else { return true }
        var all = true
        for connection in parts.links.connections.values where peer == nil || connection.peer == peer {
            // Every link of the device has its server behind a stage (DeviceLinks.makeLink).
            guard let stage = connection.stage else { continue }
            var outcome = stage.notify(characteristic, value: value)
            // Patterns, not `==` (a call in a debug build): every notification takes this path.
            if case .queueFull = outcome, !connection.enhanced.isEmpty {
                outcome = connection.notifyOnEnhancedBearer(characteristic, value: value)
            }
            if case .queueFull = outcome { all = false }
            if isObserved, outcome == .queued, let observer = eventObserver {
                observer(.notification(peer: connection.peer, characteristic: EventCharacteristic(characteristic), value: Array(value)))
            }
        }
        if !all { deviceWaitingForRoom = true }
        return all
    }

    @discardableResult
    public func notify(_ updates: [(characteristic: Characteristic, value: [UInt8])], to peer: ATTPeer?) -> Bool {
        guard let parts = madeConnectionParts else { return true }
        var all = true
        let slices = updates.map { (characteristic: $0.characteristic, value: $0.value[...]) }
        for connection in parts.links.connections.values where peer == nil || connection.peer == peer {
            // Vol 3, Part G, 7.2, bit 2: only a client that set it gets opcode 0x23.
            guard connection.session.clientFeatures & EATT.clientSupportsMultipleNotifications != 0 else {
                for update in slices where !send(update.characteristic, update.value, to: connection.peer) { all = false }
                continue
            }
            guard let stage = connection.stage else { continue }
            let outcome = stage.notifyMultiple(slices)
            if outcome == .queueFull { all = false }
            if isObserved, outcome == .queued, let observer = eventObserver {
                for update in slices where connection.session.isSubscribed(update.characteristic, indications: false) {
                    observer(.notification(peer: connection.peer, characteristic: EventCharacteristic(update.characteristic),
                                           value: Array(update.value)))
                }
            }
        }
        if !all { deviceWaitingForRoom = true }
        return all
    }

    @discardableResult
    public func indicate(_ characteristic: Characteristic, to peer: ATTPeer?, completion: IndicationCompletion?,
                         encode: (inout ValueBuffer) -> Void) -> Bool {
        // As for notify: encoded once into the peripheral's buffer; each link keeps a copy in
        // a buffer of its own, reused, until the indication is confirmed.
        guard let parts = madeConnectionParts else { return true }
        notificationValue.reset()
        encode(&notificationValue)
        var all = true
        let observer = isObserved ? eventObserver : nil
        for connection in parts.links.connections.values where peer == nil || connection.peer == peer {
            var completion = completion
            if let observer {
                // The outcome told to the watcher too; this closure exists only while someone watches.
                let told = completion, named = EventCharacteristic(characteristic)
                completion = { peer, outcome in
                    observer(.confirmed(peer: peer, characteristic: named, outcome: outcome))
                    told?(peer, outcome)
                }
            }
            guard let stage = connection.enhanced.isEmpty ? connection.stage : connection.indicationStage else { continue }
            let outcome = stage.indicate(characteristic, value: notificationValue.bytes, completion: completion)
            if outcome == .queueFull { all = false }
            if let observer, outcome == .queued {
                observer(.indication(peer: connection.peer, characteristic: EventCharacteristic(characteristic),
                                     value: Array(notificationValue.bytes)))
            }
        }
        if !all { deviceWaitingForRoom = true }
        return all
    }

    public func attMTU(of peer: ATTPeer) -> Int {
        madeConnectionParts?.links.connections[peer.connectionHandle].map { $0.peer == peer ? $0.bearer.mtu : ATTServer.defaultMTU } ?? ATTServer.defaultMTU
    }

    public func isSubscribed(_ characteristic: Characteristic, peer: ATTPeer?, indications: Bool) -> Bool {
        madeConnectionParts?.links.connections.values.contains { connection in
            (peer == nil || connection.peer == peer) && connection.session.isSubscribed(characteristic, indications: indications)
        } ?? false
    }

    public func log(_ event: BlemuEvent, _ level: Logger.Level, _ message: @autoclosure () -> String,
                    _ metadata: @autoclosure () -> Logger.Metadata) {
        logger.event(event, level, "\(message())", metadata())
    }

    public func linkSecurity(of peer: ATTPeer) -> LinkSecurity {
        guard let connection = madeConnectionParts?.links.connections[peer.connectionHandle], connection.peer == peer else {
            return .unencrypted
        }
        return connection.session.linkSecurity
    }

    public var pairsWithPasskey: Bool { configuration.security.passkey != nil }
}
