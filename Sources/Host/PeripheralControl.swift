import BlemuATT
import BlemuCore
import BlemuGATT
import BlemuHCI
import Logging

/// A link as a listing shows it.
public struct LinkSummary: Sendable, Equatable {
    public let handle: UInt16
    public let peer: BluetoothAddress
    public let mtu: Int
    /// Whether the link is encrypted (always false until pairing exists).
    public let encrypted: Bool
}

/// What a test script may do to a running device from outside (the control socket): set its
/// simulated world, break it on purpose, and drive its links and advertising. Each call
/// returns nil, or one line saying why it was refused; nothing is changed when it refuses.
extension Peripheral {
    public var deviceName: String { type(of: device).deviceName }

    public var linkSummaries: [LinkSummary] {
        connections.values.sorted { $0.handle < $1.handle }.map {
            LinkSummary(handle: $0.handle, peer: $0.peer.address, mtu: $0.server.mtu, encrypted: false)
        }
    }

    /// Sets a value of the device's world by its key (`DeviceSetting`).
    public func applySetting(_ key: String, _ value: String) -> String? {
        let settings = device.settings
        guard let setting = settings.first(where: { $0.key == key }) else {
            let known = settings.map(\.key).joined(separator: ", ")
            return "\(deviceName) has no setting '\(key)'" + (known.isEmpty ? "" : "; settings: \(known)")
        }
        return setting.apply(value)
    }

    /// Plans a fault for the characteristic with `uuid` (see `FaultPlan`).
    public func injectFault(_ action: FaultPlan.Action, characteristic uuid: BluetoothUUID, count: Int?) -> String? {
        guard let characteristic = database.characteristics.first(where: { $0.uuid == uuid }) else {
            return "\(deviceName) has no characteristic \(uuid)"
        }
        if case .drop = action, !characteristic.notifies {
            return "characteristic \(uuid) neither notifies nor indicates: there is nothing to drop"
        }
        if let count, count < 1 { return "--count must be at least 1" }
        faults.add(action, valueHandle: characteristic.valueHandle, count: count)
        logger.event(.faultInjected, .notice, "fault planned: \(action) for \(uuid)\(count.map { ", \($0) time(s)" } ?? ", until cleared")",
                     [LogKey.attHandle: .string(Hex.word(characteristic.valueHandle))])
        return nil
    }

    public func clearFaults() {
        faults.clear()
        logger.event(.faultInjected, .notice, "faults cleared")
    }

    /// Turns advertising on or off; off stays off, also after disconnections, until on.
    public func setAdvertisingAllowed(_ allowed: Bool) {
        advertisingAllowed = allowed
        if allowed {
            startAdvertising(fast: true)
        } else if let set = advertisingSet, isAdvertising || advertisingRequested {
            if let timer = advertisingPhaseTimer { scheduler.cancel(timer) }
            advertisingPhaseTimer = nil
            host.advertiser.stop(set: set)
            setAdvertising(false, log: true)
        }
    }

    /// Disconnects every link of this device with `reason` (Vol 4, Part E, 7.1.6 allows 0x05,
    /// 0x13 – 0x15, 0x1A, 0x29, 0x3B); returns how many links were asked to close.
    @discardableResult
    public func disconnectAll(reason: UInt8 = HCIStatus.remoteUserTerminated) -> Int {
        for handle in connections.keys.sorted() {
            hci.send(.disconnect(handle: handle, reason: reason))
        }
        return connections.count
    }

    /// The reasons HCI Disconnect accepts (Vol 4, Part E, 7.1.6).
    public static let disconnectReasons: Set<UInt8> = [0x05, 0x13, 0x14, 0x15, 0x1A, 0x29, 0x3B]
}
