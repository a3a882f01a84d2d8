import BlemuCore

extension PeripheralConfiguration {
    /// A device's identity address, written once: the configured static random address, else one
    /// derived from the device kind and its local name (stable across runs). The peripheral
    /// advertises from it and the assembly (BlemuStack) keys the device's bond and passkey files
    /// to it; were the two written apart and drifted, bonds would be kept under an address the
    /// device never uses (Vol 3, Part C, 10.8.1: a static address is the identity while it lasts).
    public static func identityAddress(deviceName: String, localName: String, configured: BluetoothAddress?) -> BluetoothAddress {
        configured ?? BluetoothAddress.staticRandom(seed: "blemu/\(deviceName)/\(localName)")
    }
}
