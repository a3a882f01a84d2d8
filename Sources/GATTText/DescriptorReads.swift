import BlemuAssignedNumbers
import BlemuGATT
import BlemuGATTClient

/// The descriptors a value is shown with, read when a command needs them (a `dump` has them
/// read already: `GATTValueText.presentationFormat(of:values:)`).
extension GATTClient {
    /// The characteristic's Presentation Format (0x2904, Vol 3, Part G, 3.3.3.5) when it has
    /// one; nil when not, or when it cannot be read (the value is then shown without it).
    public func readPresentationFormat(of characteristic: RemoteCharacteristic, then: @escaping (PresentationFormat?) -> Void) {
        guard let handle = characteristic.descriptors.first(where: { $0.uuid == GATTType.presentationFormat })?.handle else { return then(nil) }
        read(handle) { result in
            guard case .success(let bytes) = result else { return then(nil) }
            then(PresentationFormat(bytes))
        }
    }

    /// The characteristic's User Description (0x2901) when it has no name blemu knows (what
    /// `dump` names it by then) and has one that can be read; nil otherwise.
    public func readUserDescriptionIfUnnamed(of characteristic: RemoteCharacteristic, then: @escaping ([UInt8]?) -> Void) {
        guard GATTValueText.nameOfCharacteristic(characteristic.uuid) == nil,
              let handle = characteristic.descriptors.first(where: { $0.uuid == GATTType.userDescription })?.handle else { return then(nil) }
        read(handle) { result in
            guard case .success(let bytes) = result, !bytes.isEmpty else { return then(nil) }
            then(bytes)
        }
    }
}
