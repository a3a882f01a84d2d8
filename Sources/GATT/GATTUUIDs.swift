import BlemuCore

/// Attribute types GATT itself defines (Vol 3, Part G, 3 and Assigned Numbers 3.5–3.8).
public enum GATTType {
    public static let primaryService = BluetoothUUID(0x2800)
    public static let secondaryService = BluetoothUUID(0x2801)
    public static let include = BluetoothUUID(0x2802)
    public static let characteristic = BluetoothUUID(0x2803)
    public static let extendedProperties = BluetoothUUID(0x2900)
    public static let userDescription = BluetoothUUID(0x2901)
    public static let clientConfiguration = BluetoothUUID(0x2902)
    public static let serverConfiguration = BluetoothUUID(0x2903)
    public static let presentationFormat = BluetoothUUID(0x2904)
    public static let aggregateFormat = BluetoothUUID(0x2905)
    public static let validRange = BluetoothUUID(0x2906)

    public static let gapService = BluetoothUUID(0x1800)
    public static let gattService = BluetoothUUID(0x1801)
    public static let deviceName = BluetoothUUID(0x2A00)
    public static let appearance = BluetoothUUID(0x2A01)
    public static let peripheralPreferredConnectionParameters = BluetoothUUID(0x2A04)
    public static let serviceChanged = BluetoothUUID(0x2A05)
    public static let clientSupportedFeatures = BluetoothUUID(0x2B29)
    public static let databaseHash = BluetoothUUID(0x2B2A)
    public static let serverSupportedFeatures = BluetoothUUID(0x2B3A)
}
