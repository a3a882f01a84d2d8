import BlemuCore
import BlemuGATT
import BlemuDevice

/// Device Information Service 0x180A (DIS 1.1): fixed strings, all cached — the stack serves
/// them without asking the device.
public struct DeviceInformation: Sendable {
    public var manufacturer: String
    public var model: String
    public var serialNumber: String
    public var hardwareRevision: String
    public var firmwareRevision: String
    public var softwareRevision: String

    public init(manufacturer: String = "blemu", model: String, serialNumber: String,
                hardwareRevision: String = "1.0", firmwareRevision: String = blemuVersion,
                softwareRevision: String = blemuVersion) {
        self.manufacturer = manufacturer
        self.model = model
        self.serialNumber = serialNumber
        self.hardwareRevision = hardwareRevision
        self.firmwareRevision = firmwareRevision
        self.softwareRevision = softwareRevision
    }

    public func makeService() -> Service {
        Service(0x180A) {
            Characteristic(0x2A29, properties: [.read], cachedValue: Array(manufacturer.utf8))
            Characteristic(0x2A24, properties: [.read], cachedValue: Array(model.utf8))
            Characteristic(0x2A25, properties: [.read], cachedValue: Array(serialNumber.utf8))
            Characteristic(0x2A27, properties: [.read], cachedValue: Array(hardwareRevision.utf8))
            Characteristic(0x2A26, properties: [.read], cachedValue: Array(firmwareRevision.utf8))
            Characteristic(0x2A28, properties: [.read], cachedValue: Array(softwareRevision.utf8))
        }
    }
}
