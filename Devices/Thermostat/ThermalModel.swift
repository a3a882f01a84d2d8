import BlemuCore
#if canImport(Glibc)
import Glibc
#endif

/// What the thermostat is told to do (the Mode characteristic, uint8).
public enum ThermostatMode: UInt8, Sendable, CaseIterable {
    case off = 0, heat = 1, cool = 2, auto = 3
    public var name: String { ["off", "heat", "cool", "auto"][Int(rawValue)] }
}

/// What the plant is doing (the Heating State characteristic, uint8).
public enum HeatingState: UInt8, Sendable {
    case idle = 0, heating = 1, cooling = 2
    public var name: String { ["idle", "heating", "cooling"][Int(rawValue)] }
}

/// The air around a thermostat in a house with forced-air heating and cooling, and the
/// thermostat's controller. Time moves only in `advance`, which solves the model exactly
/// (piecewise exponentials between switchings), so the state after an hour is the same
/// whether it was read once or every second.
///
/// - The room loses heat to the outside with a time constant of 12 hours (about 1 °C an hour
///   when 12 °C warmer than outside); the heating adds 10 °C an hour and the cooling removes
///   8, so a cold room warms at 8–9 °C an hour: 0.1 °C every 40 seconds or so.
/// - The controller switches with hysteresis: in heat mode it starts 0.3 °C below the target
///   and stops 0.3 °C above (cool mode mirrors it); in auto the heating band sits 0.5 °C
///   below the target and the cooling band 0.5 °C above, so the two never chase each other.
///   A few cycles an hour result, as from a real furnace.
/// - Moisture follows the weather: the water vapour pressure wanders around the level the
///   humidity was set at (±8 %, a new seeded target every hour, approached over 2 hours), and
///   the relative humidity follows the room temperature: heating the room dries the air.
public struct ThermalModel: Sendable {
    public static let lossTimeConstant: Double = 12 * 3600
    public static let heatingPerHour = 10.0
    public static let coolingPerHour = 8.0
    public static let hysteresis = 0.3
    public static let autoOffset = 0.5
    public static let moistureTimeConstant: Double = 2 * 3600
    public static let moistureWander = 0.08

    /// Room temperature, °C.
    public private(set) var room: Double
    /// Outside temperature, °C.
    public var outside: Double
    /// Target temperature, °C.
    public private(set) var target: Double
    public private(set) var mode: ThermostatMode
    public private(set) var state: HeatingState = .idle
    /// Water vapour pressure in the room, hPa.
    public private(set) var vapour: Double
    /// Seconds of model time since it was made.
    public private(set) var elapsed: Double = 0
    /// The vapour pressure the humidity was set to; the hourly targets wander around it.
    private var vapourLevel: Double
    /// Set with `holdRoom`: the room stays at this temperature (the controller still switches
    /// on it) until the room is set again.
    public private(set) var isRoomHeld = false
    /// Set with `holdHumidity`: the relative humidity stays at this percentage, whatever the
    /// weather and the room temperature do, until the humidity is set again.
    public private(set) var heldHumidity: Double?
    private let seed: UInt64

    public init(room: Double = 19, outside: Double = 8, humidity: Double = 45, target: Double = 21,
                mode: ThermostatMode = .heat, seed: UInt64 = 0x5448) {
        self.room = room
        self.outside = outside
        self.target = target
        self.mode = mode
        self.seed = seed
        vapourLevel = humidity / 100 * Self.saturationVapourPressure(room)
        vapour = vapourLevel
        control()
    }

    /// Relative humidity, percent: the vapour pressure over the saturation pressure at the room
    /// temperature (at most 100: beyond it water condenses).
    public var humidity: Double { min(100, max(0, 100 * vapour / Self.saturationVapourPressure(room))) }

    /// Saturation vapour pressure over water, hPa (the Magnus formula with the WMO's
    /// coefficients, good from -45 to 60 °C).
    public static func saturationVapourPressure(_ celsius: Double) -> Double {
        6.112 * exp(17.62 * celsius / (243.12 + celsius))
    }

    // MARK: Settings and controls

    public mutating func setRoom(_ celsius: Double) {
        room = celsius
        isRoomHeld = false
        keepHeldHumidity()
        control()
    }

    /// Puts the room at `celsius` and keeps it there until it is set again (`--exact`).
    public mutating func holdRoom(_ celsius: Double) {
        setRoom(celsius)
        isRoomHeld = true
    }

    /// Sets the relative humidity at the present room temperature; the moisture then wanders around it.
    public mutating func setHumidity(_ percent: Double) {
        vapourLevel = max(0, min(100, percent)) / 100 * Self.saturationVapourPressure(room)
        vapour = vapourLevel
        heldHumidity = nil
    }

    /// Sets the relative humidity and keeps it there until it is set again (`--exact`).
    public mutating func holdHumidity(_ percent: Double) {
        setHumidity(percent)
        heldHumidity = max(0, min(100, percent))
    }

    private mutating func keepHeldHumidity() {
        if let heldHumidity { vapour = heldHumidity / 100 * Self.saturationVapourPressure(room) }
    }

    public mutating func setTarget(_ celsius: Double) {
        target = celsius
        control()
    }

    public mutating func setMode(_ newMode: ThermostatMode) {
        mode = newMode
        control()
    }

    // MARK: Time

    /// Moves time forward by `seconds`.
    public mutating func advance(seconds: Double) {
        var left = max(0, seconds)
        while left > 0 {
            let equilibrium = self.equilibrium
            var step = left
            var switchAt: Double?
            for threshold in switchingThresholds where !isRoomHeld {
                if let t = crossingTime(to: threshold, equilibrium: equilibrium), t <= step {
                    step = t
                    switchAt = threshold
                }
            }
            let toNextHour = 3600 - elapsed.truncatingRemainder(dividingBy: 3600)
            if toNextHour < step {
                step = toNextHour
                switchAt = nil
            }
            let vapourTarget = self.vapourTarget(hour: Int(elapsed / 3600))
            if !isRoomHeld {
                room = equilibrium + (room - equilibrium) * exp(-step / Self.lossTimeConstant)
                // Land exactly on the threshold, so the controller sees it crossed.
                if let switchAt { room = switchAt }
            }
            vapour = vapourTarget + (vapour - vapourTarget) * exp(-step / Self.moistureTimeConstant)
            keepHeldHumidity()
            elapsed += step
            left -= step
            control()
        }
    }

    /// The controller: switches only at the edges of its band.
    private mutating func control() {
        let band = self.band
        switch state {
        case .heating:
            if band.heatOff.map({ room >= $0 }) ?? true { state = .idle }
        case .cooling:
            if band.coolOff.map({ room <= $0 }) ?? true { state = .idle }
        case .idle:
            break
        }
        if state == .idle {
            if let on = band.heatOn, room <= on {
                state = .heating
            } else if let on = band.coolOn, room >= on {
                state = .cooling
            }
        }
    }

    struct Band {
        var heatOn, heatOff, coolOn, coolOff: Double?
    }

    /// Where the controller switches, for the present mode and target.
    var band: Band {
        let h = Self.hysteresis
        switch mode {
        case .off:
            return Band()
        case .heat:
            return Band(heatOn: target - h, heatOff: target + h)
        case .cool:
            return Band(coolOn: target + h, coolOff: target - h)
        case .auto:
            let d = Self.autoOffset
            return Band(heatOn: target - d - h, heatOff: target - d + h, coolOn: target + d + h, coolOff: target + d - h)
        }
    }

    /// The temperatures at which the present state would change.
    private var switchingThresholds: [Double] {
        let band = self.band
        switch state {
        case .heating: return band.heatOff.map { [$0] } ?? []
        case .cooling: return band.coolOff.map { [$0] } ?? []
        case .idle: return [band.heatOn, band.coolOn].compactMap { $0 }
        }
    }

    /// °C per second the plant adds.
    private var plantRate: Double {
        switch state {
        case .idle: return 0
        case .heating: return Self.heatingPerHour / 3600
        case .cooling: return -Self.coolingPerHour / 3600
        }
    }

    /// Where the room would settle in the present state: dT/dt = (outside - T)/τ + plant.
    private var equilibrium: Double { outside + plantRate * Self.lossTimeConstant }

    /// Seconds until the room reaches `threshold` on its way to `equilibrium`, or nil if it never does.
    private func crossingTime(to threshold: Double, equilibrium: Double) -> Double? {
        let distance = room - equilibrium
        guard distance != 0 else { return nil }
        let ratio = (threshold - equilibrium) / distance
        guard ratio > 0, ratio <= 1 else { return nil }
        return -Self.lossTimeConstant * log(ratio)
    }

    /// The vapour pressure the room's moisture heads for during `hour`: the set level, moved
    /// by up to ±8 % by that hour's weather (seeded, so a run can be replayed).
    private func vapourTarget(hour: Int) -> Double {
        var random = SeededRandom(seed: seed &+ UInt64(truncatingIfNeeded: hour) &* 0x9E37_79B9_7F4A_7C15)
        return vapourLevel * (1 + Self.moistureWander * random.signedUnit())
    }
}
