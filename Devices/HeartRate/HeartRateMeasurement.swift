import BlemuCore
import BlemuGATT

/// The Heart Rate Measurement characteristic value (HRS 1.0, 3.1.1; GSS "Heart Rate Measurement").
///
/// Flags (octet 0): bit 0 value format (0 = uint8, 1 = uint16); bits 1–2 sensor contact
/// (0b10 supported, not detected; 0b11 supported and detected; 0b00 not supported); bit 3 Energy
/// Expended present (uint16, kJ); bit 4 RR-Interval present (uint16 each, 1/1024 s).
public struct HeartRateMeasurement: Equatable, Sendable {
    public enum SensorContact: UInt8, Sendable {
        case notSupported = 0b00
        case notDetected = 0b10
        case detected = 0b11
    }

    public var heartRate: UInt16
    public var forceUInt16: Bool
    public var sensorContact: SensorContact
    public var energyExpended: UInt16?
    /// RR intervals in units of 1/1024 s, oldest first.
    public var rrIntervals: [UInt16]

    public init(heartRate: UInt16, forceUInt16: Bool = false, sensorContact: SensorContact = .detected,
                energyExpended: UInt16? = nil, rrIntervals: [UInt16] = []) {
        self.heartRate = heartRate
        self.forceUInt16 = forceUInt16
        self.sensorContact = sensorContact
        self.energyExpended = energyExpended
        self.rrIntervals = rrIntervals
    }

    public var usesUInt16: Bool { forceUInt16 || heartRate > 255 }

    /// Encodes at most `maxLength` octets (ATT_MTU - 3 for a notification). RR intervals that do
    /// not fit are dropped oldest first, as HRS 3.1.1.5 describes.
    public func encode(maxLength: Int = 20) -> [UInt8] {
        var buffer = ValueBuffer(capacity: maxLength + 1)
        encode(into: &buffer, maxLength: maxLength)
        return Array(buffer.bytes)
    }

    /// Encodes into a buffer the stack reuses (`DeviceContext.notify(_:encode:)`): no allocation.
    public func encode(into out: inout ValueBuffer, maxLength: Int = 20) {
        var flags: UInt8 = usesUInt16 ? 0x01 : 0x00
        flags |= sensorContact.rawValue << 1
        if energyExpended != nil { flags |= 0x08 }
        let fixed = 1 + (usesUInt16 ? 2 : 1) + (energyExpended != nil ? 2 : 0)
        let room = max(0, (maxLength - fixed) / 2)
        let rr = rrIntervals.suffix(room)
        if !rr.isEmpty { flags |= 0x10 }
        out.append(flags)
        if usesUInt16 { out.appendLE(heartRate) } else { out.append(UInt8(heartRate)) }
        if let energyExpended { out.appendLE(energyExpended) }
        for interval in rr { out.appendLE(interval) }
    }

    /// Decodes a measurement (used by tests and by blemu's own central).
    public init(decoding bytes: ArraySlice<UInt8>) throws(DecodeError) {
        var r = ByteReader(bytes)
        let flags = try r.u8()
        forceUInt16 = flags & 0x01 != 0
        heartRate = forceUInt16 ? try r.u16() : UInt16(try r.u8())
        sensorContact = SensorContact(rawValue: (flags >> 1) & 0x03) ?? .notSupported
        energyExpended = flags & 0x08 != 0 ? try r.u16() : nil
        var rr: [UInt16] = []
        if flags & 0x10 != 0 {
            guard r.remaining % 2 == 0 else { throw DecodeError(.lengthMismatch, "odd RR-Interval bytes") }
            while !r.isAtEnd { rr.append(try r.u16()) }
        }
        try r.expectEnd("Heart Rate Measurement")
        rrIntervals = rr
    }
}
