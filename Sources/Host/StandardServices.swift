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
    weak var database: GATTDatabase?
    /// The GATT server session of a connection (its handle): where the client's Client
    /// Supported Features are kept (Vol 3, Part G, 7.2: per client).
    var session: (UInt16) -> GATTServerSession? = { _ in nil }
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
            value.append(self?.session(request.peer.connectionHandle)?.clientFeatures ?? 0)
            return nil
        }
        features.onWrite = { [weak self] request in
            guard let self, let session = self.session(request.peer.connectionHandle) else { return .unlikelyError }
            guard request.offset == 0 else { return .invalidAttributeValueLength }
            if let refused = session.writeClientFeatures(request.value) { return refused }
            self.featuresChanged?(request.peer.connectionHandle, session.clientFeatures)
            return nil
        }
        hash.onRead = { [weak self] _, value in
            guard let hash = self?.database?.hash else { return .unlikelyError }
            value.append(contentsOf: hash)
            return nil
        }
    }
}
