import BlemuBroadcast
import BlemuCore
import BlemuDevice

/// An Eddystone beacon (github.com/google/eddystone): UID and URL frames in turn, with an
/// unencrypted TLM frame every fifth slot, as real beacons interleave them (the spec lets a
/// beacon rotate its frames; TLM goes along with the others, not alone). Each frame is advertised
/// for `slot`. The TLM tells the truth: the battery voltage and temperature set, the advertising
/// events sent since the start (elapsed time over the interval, across interval changes) and the
/// time since the start in tenths of a second. Never connectable.
public final class EddystoneDevice: BroadcastingDevice {
    public static let deviceName = "eddystone"
    public static let summary = "Eddystone beacon (UID and URL frames, TLM telemetry interleaved), broadcast only"
    /// How long one frame is advertised before the next.
    public static let slot: Duration = .seconds(1)
    /// The frames of one round: UID, URL, UID, URL, TLM.
    enum Kind { case uid, url, tlm }
    static let rotation: [Kind] = [.uid, .url, .uid, .url, .tlm]

    public private(set) var namespace: [UInt8] = [0xED, 0xD1, 0xEB, 0xEA, 0xC0, 0x4E, 0x5D, 0xEF, 0xA0, 0x17]
    public private(set) var instance: [UInt8] = [0x00, 0x00, 0x00, 0x00, 0x00, 0x01]
    public private(set) var url = "https://github.com"
    /// TX power at 0 m, dBm (the spec: measured at 1 m, plus 41 dBm).
    public private(set) var txPower: Int8 = -18
    public private(set) var batteryMillivolts: UInt16 = 3000
    public private(set) var temperature: Double = 22
    public private(set) var broadcastInterval: UInt16 = 160  // 100 ms
    /// Which slot of `rotation` is advertised now.
    private var slotIndex = 0
    private var startNanoseconds: UInt64 = 0
    /// Advertising events counted up to `countedUntil` (the last interval change).
    private var eventsCounted: UInt64 = 0
    private var countedUntil: UInt64 = 0
    private weak var context: BroadcastContext?
    private var timer: TimerID?

    public init() {}

    public var profile: DeviceProfile {
        DeviceProfile(defaultName: "blemu Eddystone", advertisedServices: [], appearance: 0x0000, txPowerLevel: nil)
    }

    public func start(broadcasting context: BroadcastContext) {
        self.context = context
        startNanoseconds = context.scheduler.nowNanoseconds
        countedUntil = startNanoseconds
        scheduleNextSlot()
    }

    public func stop() {
        if let timer { context?.scheduler.cancel(timer) }
        timer = nil
    }

    /// The frame of the slot advertised now.
    public var frame: EddystoneFrame {
        switch Self.rotation[slotIndex] {
        case .uid: return .uid(txPower: txPower, namespace: namespace, instance: instance)
        case .url: return .url(txPower: txPower, url: url)
        case .tlm: return telemetry
        }
    }

    public var telemetry: EddystoneFrame {
        let now = context?.scheduler.nowNanoseconds ?? startNanoseconds
        let uptimeTenths = (now &- startNanoseconds) / 100_000_000
        return .telemetry(batteryMillivolts: batteryMillivolts, temperature: temperature,
                          advertisingCount: UInt32(truncatingIfNeeded: advertisingEvents(at: now)),
                          uptimeTenths: UInt32(truncatingIfNeeded: uptimeTenths))
    }

    /// Every value is checked when set (the URL encoded, the temperature in range), so encoding
    /// cannot fail; were it to, the beacon would advertise only its Flags rather than stop.
    public var advertisingData: [UInt8] { (try? frame.advertisingData()) ?? ADStructure.generalDiscoverableFlags }

    /// Advertising events since the start: one every interval (Vol 6, Part B, 4.4.2.2; the
    /// up to 10 ms advDelay the controller adds is not counted).
    func advertisingEvents(at now: UInt64) -> UInt64 {
        eventsCounted + (now &- countedUntil) / (UInt64(broadcastInterval) * 625_000)
    }

    public var settings: [DeviceSetting] {
        [
            .hex("namespace", "UID namespace, 20 hex digits", bytes: 10) { [weak self] bytes in
                self?.changed("namespace") { $0.namespace = bytes }
            },
            .hex("instance", "UID instance, 12 hex digits", bytes: 6) { [weak self] bytes in
                self?.changed("instance") { $0.instance = bytes }
            },
            DeviceSetting("url", "URL frame: http:// or https://, at most 17 bytes once encoded") { [weak self] text in
                let trimmed = text.trimmingWhitespace
                do { _ = try EddystoneFrame.encodeURL(trimmed) } catch {
                    return "url '\(VisibleText.make(text))' cannot be an Eddystone-URL (\(error)): give http:// or https:// and at most 17 bytes after the scheme"
                }
                self?.changed("url") { $0.url = trimmed }
                return nil
            },
            .integer("power", "TX power at 0 m, dBm, -100 to 20", in: -100...20) { [weak self] value in
                self?.changed("power") { $0.txPower = Int8(value) }
            },
            .integer("battery", "TLM battery voltage, mV, 0 (not measured) to 10000", in: 0...10000) { [weak self] value in
                self?.changed("battery") { $0.batteryMillivolts = UInt16(value) }
            },
            .number("temperature", "TLM temperature, °C, -40 to 85", in: -40...85) { [weak self] celsius in
                self?.changed("temperature") { $0.temperature = celsius }
            },
            .broadcastInterval { [weak self] units in
                guard let self else { return }
                let now = self.context?.scheduler.nowNanoseconds ?? self.countedUntil
                self.eventsCounted = self.advertisingEvents(at: now)
                self.countedUntil = now
                self.broadcastInterval = units
                self.context?.broadcastChanged()
            },
        ]
    }

    private func changed(_ what: String, _ apply: (EddystoneDevice) -> Void) {
        apply(self)
        context?.log(.stateChanged, .info, "\(what) set", [:])
        context?.broadcastChanged()
    }

    private func scheduleNextSlot() {
        timer = context?.scheduler.schedule(after: Self.slot) { [weak self] in
            guard let self else { return }
            self.timer = nil
            self.slotIndex = (self.slotIndex + 1) % Self.rotation.count
            self.context?.broadcastChanged()
            self.scheduleNextSlot()
        }
    }
}
