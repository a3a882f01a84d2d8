import BlemuCore
import BlemuGATT
import BlemuDevice

/// The value a notifying characteristic last sent, so a device notifies only when what a
/// central would read has changed, however often its model ticks.
public final class NotifiedValue {
    public let characteristic: Characteristic
    /// What subscribers were last told (or, after `baseline`, could have read).
    public private(set) var lastSent: [UInt8]?

    public init(_ characteristic: Characteristic) {
        self.characteristic = characteristic
    }

    /// Notifies `value` to every subscriber if it differs from the last one sent; true when
    /// it did. Without a context (before start) it only remembers the value.
    @discardableResult
    public func update(_ value: [UInt8], context: DeviceContext?) -> Bool {
        guard value != lastSent else { return false }
        lastSent = value
        context?.notify(characteristic, value: value)
        return context != nil
    }

    /// Takes `value` as known without sending it (a new listener reads first), or forgets
    /// the last value with nil, so the next `update` sends whatever it gets.
    public func baseline(_ value: [UInt8]?) { lastSent = value }
}

/// A measured quantity reported in steps — the sensor's resolution — that notifies when it
/// moves to another step: 0.1 °C for a room temperature, 1 % for a battery. What a central
/// reads and what it is notified are the same stepped bytes, so "notify when the value
/// changes" and "notify on a step that matters" are one rule.
public final class SteppedValue {
    public let step: Double
    private let encode: (Double) -> [UInt8]
    public let notified: NotifiedValue

    /// - Parameter encode: the characteristic's format, given a value already on a step.
    public init(_ characteristic: Characteristic, step: Double, encode: @escaping (Double) -> [UInt8]) {
        precondition(step > 0, "a step must be positive")
        self.step = step
        self.encode = encode
        notified = NotifiedValue(characteristic)
    }

    public var characteristic: Characteristic { notified.characteristic }

    /// `value` on the nearest step.
    public func stepped(_ value: Double) -> Double { (value / step).rounded() * step }

    /// The characteristic's bytes for `value`, on the nearest step.
    public func bytes(_ value: Double) -> [UInt8] { encode(stepped(value)) }

    /// Notifies when `value` lands on another step than the one last sent.
    @discardableResult
    public func update(_ value: Double, context: DeviceContext?) -> Bool {
        notified.update(bytes(value), context: context)
    }

    public func baseline(_ value: Double) { notified.baseline(bytes(value)) }
}
