import BlemuATT
import BlemuCore
import BlemuGATT
import BlemuHCI

/// The services every device gets: GAP (Vol 3, Part C, 12) and GATT (Vol 3, Part G, 7).
final class StandardServices {
    let gap: Service
    let gatt: Service
    /// The stack's, or a recorded GATT service's that replaces the stack's (`Peripheral`).
    var serviceChanged: Characteristic
    /// Client Supported Features per connection (Vol 3, Part G, 7.2): bits once set stay set.
    private var clientFeatures: [UInt16: UInt8] = [:]
    weak var database: GATTDatabase?
    /// Told each accepted write of Client Supported Features: connection handle, the bits now set.
    var featuresChanged: ((UInt16, UInt8) -> Void)?

    /// Resolvable Private Address Only (Vol 3, Part C, 12.5; Assigned Numbers 0x2AC9).
    static let resolvablePrivateAddressOnly = BluetoothUUID(0x2AC9)

    init(name: String, appearance: UInt16, parameters: ConnectionParameters, privacy: Bool = false) {
        var appearanceBytes: [UInt8] = []
        appearanceBytes.appendLE(appearance)
        gap = Service(GATTType.gapService) {
            Characteristic(GATTType.deviceName, properties: [.read], cachedValue: Array(name.utf8.prefix(248)))
            Characteristic(GATTType.appearance, properties: [.read], cachedValue: appearanceBytes)
            // Vol 3, Part C, 12.3: interval min, max, latency, timeout.
            Characteristic(GATTType.peripheralPreferredConnectionParameters, properties: [.read],
                           cachedValue: parameters.encoded)
            // With privacy the device uses only resolvable private addresses as its own (value 0,
            // 12.5), which tells a bonded central it may resolve it in its controller's
            // resolving list with network privacy.
            if privacy {
                Characteristic(StandardServices.resolvablePrivateAddressOnly, properties: [.read], cachedValue: [0x00])
            }
        }
        let serviceChanged = Characteristic(GATTType.serviceChanged, properties: [.indicate], length: .fixed(4))
        self.serviceChanged = serviceChanged
        let features = Characteristic(GATTType.clientSupportedFeatures, properties: [.read, .write],
                                      length: .variable(max: 1))
        let hash = Characteristic(GATTType.databaseHash, properties: [.read], length: .fixed(16))
        // Vol 3, Part G, 7.4: Server Supported Features; bit 0, "EATT Supported": every device
        // serves Enhanced ATT bearers on PSM 0x0027 (EnhancedATT.swift).
        let serverFeatures = Characteristic(GATTType.serverSupportedFeatures, properties: [.read], cachedValue: [0x01])
        gatt = Service(GATTType.gattService) {
            serviceChanged
            features
            hash
            serverFeatures
        }
        features.onRead = { [weak self] request, value in
            value.append(self?.clientFeatures[request.peer.connectionHandle] ?? 0)
            return nil
        }
        features.onWrite = { [weak self] request in
            guard let self else { return .unlikelyError }
            guard request.offset == 0, request.value.count == 1 else { return .invalidAttributeValueLength }
            let old = self.clientFeatures[request.peer.connectionHandle] ?? 0
            // Vol 3, Part G, 7.2: a client may not clear a bit it has set: Value Not Allowed.
            guard request.value[0] & old == old else { return .valueNotAllowed }
            // Bits 0-2 are defined (robust caching, EATT, multiple notifications); the rest are reserved.
            let features = request.value[0] & 0x07
            self.clientFeatures[request.peer.connectionHandle] = features
            self.featuresChanged?(request.peer.connectionHandle, features)
            return nil
        }
        hash.onRead = { [weak self] _, value in
            guard let hash = self?.database?.hash else { return .unlikelyError }
            value.append(contentsOf: hash)
            return nil
        }
    }

    /// A bonded client's Client Supported Features, kept with its bond (Vol 3, Part G, 2.5.2.1):
    /// the bits it set before stay set, and cannot be cleared (7.2).
    func restoreFeatures(_ features: UInt8, on handle: UInt16) {
        clientFeatures[handle] = features & 0x07
    }

    func features(on handle: UInt16) -> UInt8 {
        clientFeatures[handle] ?? 0
    }

    func connectionClosed(_ handle: UInt16) {
        clientFeatures[handle] = nil
    }
}
