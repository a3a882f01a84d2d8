import BlemuHCI

extension Peripheral {
    /// The advertising data and scan response a connectable device starts advertising with
    /// (built from its name, services, appearance and TX power, or its recorded ones), read
    /// without a controller: `blemu lint` and the run's start-up check judge them.
    public var advertisingPayload: AdvertisingPayload { advertising.payload }
}
