import BlemuDevice

extension Peripheral: BroadcastContext {
    public func broadcastChanged() { advertising.broadcastChanged() }

    public var periodicAdvertisingUnsupportedReason: String? {
        guard hci.isReady else { return nil }
        return host.advertiser.periodicAdvertisingUnsupportedReason
    }

    /// The interval of the periodic train the device sends now (1.25 ms units), nil for none.
    public var periodicInterval: UInt16? { advertising.periodicInterval }

    /// The advertising data a broadcaster sends now (nil for a connectable device): the
    /// control socket's `list` shows it.
    public var broadcastPayload: [UInt8]? { advertising.broadcaster != nil ? advertising.payload.advertisingData : nil }
}
