import BlemuBroadcast
import BlemuCore
import BlemuDevice

/// A BTHome v2 door sensor with a button (bthome.io): opening (0x11, a binary sensor: 1 open,
/// 0 closed), battery (0x01) and, when pressed, a button event (0x3A), marked trigger-based in
/// the device information (it sends when something happens, so a receiver does not mark it
/// unavailable for silence). Each change gets the next packet id; an event is in the reading
/// that reports it and gone from the next. Encrypted with `--bindkey-file`. Never connectable.
public final class BTHomeDoorDevice: BroadcastingDevice {
    public static let deviceName = "bthome-door"
    public static let summary = "BTHome v2 door sensor (open/closed, battery, button events), broadcast only; encrypted with --bindkey-file"

    public let broadcast = BTHomeBroadcast(triggerBased: true)
    public private(set) var isOpen = false
    public private(set) var battery: Int = 100
    public private(set) var broadcastInterval: UInt16 = 1600  // 1 s
    public private(set) var periodicInterval: UInt16?
    public var offersPeriodicAdvertising: Bool { true }
    /// The event of the reading advertised now, if any.
    private var event: BTHomeButtonEvent?
    private weak var context: BroadcastContext?

    public init() {}

    public var profile: DeviceProfile {
        // Generic Sensor (Assigned Numbers 2.6.3: 0x0540); no TX power in the data.
        DeviceProfile(defaultName: "blemu BTHome door", advertisedServices: [], appearance: 0x0540, txPowerLevel: nil)
    }

    public var advertisingData: [UInt8] { broadcast.advertisingData }

    public func advertisingAddressChanged() { broadcast.advertisingAddressChanged() }

    public func start(broadcasting context: BroadcastContext) {
        self.context = context
        broadcast.context = context
        broadcast.publish(reading)
    }

    /// The event names of `button`, as bthome.io writes them.
    public static let buttonEvents: [(name: String, event: BTHomeButtonEvent)] = [
        ("press", .press), ("double_press", .doublePress), ("triple_press", .triplePress), ("long_press", .longPress),
        ("long_double_press", .longDoublePress), ("long_triple_press", .longTriplePress), ("hold", .hold),
    ]

    public var settings: [DeviceSetting] {
        [
            .flag("open", "the door: 1 open, 0 closed") { [weak self] open in
                guard let self else { return }
                self.isOpen = open
                self.changed("door \(open ? "opened" : "closed")")
            },
            .integer("battery", "battery level, %, 0 to 100", in: 0...100) { [weak self] percent in
                self?.battery = percent
                self?.changed("battery set to \(percent) %")
            },
            // An event is news even when it repeats (a second press): always a new packet id.
            .choice("button", "a button event: \(Self.buttonEvents.map(\.name).joined(separator: ", "))",
                    names: Self.buttonEvents.map(\.name)) { [weak self] index in
                guard let self else { return }
                self.event = Self.buttonEvents[index].event
                self.changed("button \(Self.buttonEvents[index].name)", always: true)
            },
            .broadcastInterval { [weak self] units in
                self?.broadcastInterval = units
                self?.context?.broadcastChanged()
            },
            .periodicInterval(context: { [weak self] in self?.context }) { [weak self] units in
                self?.periodicInterval = units
                self?.context?.broadcastChanged()
            },
        ]
    }

    /// The objects of the reading now (the packet id is added when it is advertised).
    public var reading: [BTHomeObject] {
        var objects = [BTHomeObject(.battery, integer: Int64(battery)), BTHomeObject(.opening, integer: isOpen ? 1 : 0)]
        if let event { objects.append(BTHomeObject(.button, integer: Int64(event.rawValue))) }
        return objects.compactMap { $0 }
    }

    private func changed(_ message: String, always: Bool = false) {
        // Before the start (a config file's value) there is no event to tell: only the state.
        guard let context else {
            event = nil
            return
        }
        context.log(.stateChanged, .info, message, [:])
        broadcast.publish(reading, always: always)
        // The event was told in this reading; the next reports the state alone.
        event = nil
    }
}
