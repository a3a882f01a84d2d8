import BlemuATT
import BlemuCore
import BlemuDevice
import BlemuGATT
import BlemuHost

/// A device with a characteristic for every length rule, whose handlers trust the device API
/// the way a real device's do: the API promises a write handler never sees a value its
/// declaration rules out (`length:`), and a read handler of a fixed-length value never sees an
/// offset past its end. So the handlers index their values without checking — `value[0]` for
/// `.fixed(1)`, `value[3]` for `.fixed(4)`, a store at `offset ..< offset + count` into a buffer
/// of the declared size — and any trap in them is a bug in the stack, not in the device.
///
/// Handlers reach the device's state through `Storage`, never through the characteristics, so
/// there is no reference cycle (LeakSanitizer runs on every input).
/// Oracle: the value a write handler is given is one its declaration allows — a fixed-length
/// value whole (offset 0, exactly its length), a variable one within its maximum from its offset
/// (`ValueLength.refusal(offset:count:)`, Vol 3, Part F, 3.4.6.3). Checked first in every
/// handler, so a broken promise is reported as such, not as whatever trap the handler hits.
func expectAllowed(_ request: WriteRequest, _ rule: ValueLength, _ name: String) {
    fuzzCheck(rule.refusal(offset: request.offset, count: request.value.count) == nil,
              "the \(name) handler (\(rule)) was given \(request.value.count) bytes at offset \(request.offset)")
}

public final class LengthRulesDevice: Device {
    public static let deviceName = "fuzz-length-rules"
    public static let summary = "fuzz target device: one characteristic per length rule"

    public static func uuid(_ n: UInt8) -> BluetoothUUID {
        BluetoothUUID(high: 0xF0220000_0000_4000, low: 0x8000_0000_0000_0000 | UInt64(n))
    }

    /// The values, each in a buffer of its declared size.
    public final class Storage {
        public var one: [UInt8] = [0x01]
        public var four: [UInt8] = [0, 0, 0, 0]
        public var forty = [UInt8](repeating: 0x40, count: 40)
        public var zero: [UInt8] = []
        /// `.variable(max: 20)`: a 20-byte buffer and the length in use.
        public var twenty = [UInt8](repeating: 0x20, count: 20)
        public var twentyCount = 5
        /// The default rule (512 bytes at most), long enough to need Read Blob at any MTU below 301.
        public var big = (0..<512).map { UInt8(truncatingIfNeeded: $0) }
        public var bigCount = 300
        public var writes = 0
        public init() {}

        /// Every value back to its first state (a target that keeps one device across inputs).
        public func reset() {
            let first = Storage()
            (one, four, forty, zero, twenty, twentyCount) = (first.one, first.four, first.forty, first.zero, first.twenty, first.twentyCount)
            (big, bigCount, writes) = (first.big, first.bigCount, first.writes)
        }
    }

    public let storage = Storage()
    /// How a handler sends an update: notify or indicate `characteristic` with `value`. The
    /// Peripheral targets route it through the DeviceContext, the ATT server target to the server.
    public var update: (Characteristic, [UInt8], Bool) -> Void = { _, _, _ in }

    public let one: Characteristic
    public let four: Characteristic
    public let forty: Characteristic
    public let zero: Characteristic
    public let twenty: Characteristic
    public let big: Characteristic
    public let refusing: Characteristic
    public let encrypted: Characteristic
    public let cached: Characteristic
    public let notifyOnly: Characteristic
    public let authorized: Characteristic
    public let included: Service

    public var profile: DeviceProfile {
        DeviceProfile(defaultName: "Fuzz", advertisedServices: [Self.uuid(0), BluetoothUUID(0x180F)], appearance: 0)
    }

    private weak var context: DeviceContext?

    public init() {
        let s = storage
        one = Characteristic(Self.uuid(1), properties: [.read, .write, .writeWithoutResponse], length: .fixed(1),
                             onRead: { _, value in value.append(contentsOf: s.one); return nil },
                             onWrite: { request in
                                 expectAllowed(request, .fixed(1), "one")
                                 // A one-byte value: the byte is the value.
                                 s.one[0] = request.value[0]
                                 s.writes += 1
                                 return nil
                             })
        four = Characteristic(Self.uuid(4), properties: [.read, .write, .writeWithoutResponse, .notify, .indicate],
                              length: .fixed(4), descriptors: [.userDescription("four bytes"),
                                                                .presentationFormat(format: 0x08, unit: 0x2700)],
                              onRead: { _, value in value.append(contentsOf: s.four); return nil },
                              onWrite: nil)
        forty = Characteristic(Self.uuid(40), properties: [.read, .write], length: .fixed(40),
                               onRead: { _, value in value.append(contentsOf: s.forty); return nil },
                               onWrite: { request in
                                   expectAllowed(request, .fixed(40), "forty")
                                   fuzzCheck(request.withResponse, "a Write Command reached a characteristic without writeWithoutResponse")
                                   _ = request.value[39]
                                   for (i, byte) in request.value.enumerated() { s.forty[request.offset + i] = byte }
                                   s.writes += 1
                                   return nil
                               })
        zero = Characteristic(Self.uuid(0x30), properties: [.read, .write], length: .fixed(0),
                              onRead: { _, value in value.append(contentsOf: s.zero); return nil },
                              onWrite: { request in
                                  expectAllowed(request, .fixed(0), "zero")
                                  for (i, byte) in request.value.enumerated() { s.zero[request.offset + i] = byte }
                                  return nil
                              })
        twenty = Characteristic(Self.uuid(20), properties: [.read, .write, .writeWithoutResponse], length: .variable(max: 20),
                                onRead: { _, value in
                                    value.append(contentsOf: s.twenty[0..<s.twentyCount])
                                    return nil
                                },
                                onWrite: { request in
                                    expectAllowed(request, .variable(max: 20), "twenty")
                                    // The value goes in at its offset, in the 20-byte buffer the declaration allows.
                                    if !request.value.isEmpty { _ = request.value[request.value.count - 1] }
                                    for (i, byte) in request.value.enumerated() { s.twenty[request.offset + i] = byte }
                                    s.twentyCount = request.offset == 0 ? request.value.count
                                        : max(s.twentyCount, request.offset + request.value.count)
                                    s.writes += 1
                                    return nil
                                })
        big = Characteristic(Self.uuid(0x51), properties: [.read, .write, .notify],
                             onRead: { _, value in
                                 value.append(contentsOf: s.big[0..<s.bigCount])
                                 return nil
                             },
                             onWrite: { request in
                                 expectAllowed(request, .variable(max: 512), "big")
                                 for (i, byte) in request.value.enumerated() { s.big[request.offset + i] = byte }
                                 s.bigCount = request.offset + request.value.count
                                 s.writes += 1
                                 return nil
                             })
        // A device that refuses some values itself (application errors 0x80 and 0x81).
        refusing = Characteristic(Self.uuid(0x80), properties: [.read, .write], length: .variable(max: 8),
                                  onRead: { _, value in
                                      if s.writes % 3 == 2 { return .application(0x01) }
                                      value.append(UInt8(s.writes & 0xFF))
                                      return nil
                                  },
                                  onWrite: { request in
                                      expectAllowed(request, .variable(max: 8), "refusing")
                                      return request.value.first == 0xEE ? .application(0x00) : nil
                                  })
        // No link the input can reach is encrypted: a pairing needs confirm values it cannot
        // compute, and an Encryption Change the host gave no key for does not count (Vol 6,
        // Part B, 5.1.3.1; Fuzz/Regressions/l2cap). These handlers must never run.
        encrypted = Characteristic(Self.uuid(0xE0), properties: [.read, .write],
                                   permissions: [.readEncryptionRequired, .writeEncryptionRequired],
                                   onRead: { _, _ in fuzzFailure("an encryption-required value was read on an unencrypted link") },
                                   onWrite: { _ in fuzzFailure("an encryption-required value was written on an unencrypted link") })
        cached = Characteristic(0x2A29, properties: [.read], cachedValue: Array("a cached value longer than one MTU".utf8))
        notifyOnly = Characteristic(0x2A19, properties: [.notify])
        // Authorization is never given (no `authorize`, nobody answers yes): these handlers must
        // never run. Last in the database, so the handles of the rest stay as the seeds know them.
        authorized = Characteristic(Self.uuid(0xA0), properties: [.read, .write, .writeWithoutResponse],
                                    permissions: [.readAuthorizationRequired, .writeAuthorizationRequired],
                                    onRead: { _, _ in fuzzFailure("an authorization-required value was read without authorization") },
                                    validateWrite: { _ in fuzzFailure("an authorization-required value was checked without authorization") },
                                    onWrite: { _ in fuzzFailure("an authorization-required value was written without authorization") })
        included = Service(Self.uuid(0x90), primary: false) {
            Characteristic(0x2A24, properties: [.read], cachedValue: Array("secondary".utf8))
        }
        // `four` sends updates from inside its own write handler: the server is building a
        // response then.
        four.onWrite = { [weak self, unowned four] request in
            expectAllowed(request, .fixed(4), "four")
            let v = UInt32(request.value[0]) | UInt32(request.value[1]) << 8 | UInt32(request.value[2]) << 16
                | UInt32(request.value[3]) << 24
            for (i, byte) in request.value.enumerated() { s.four[request.offset + i] = byte }
            s.writes += 1
            if v & 0xFF == 0xA5 { self?.update(four, Array(s.big[0..<s.bigCount]), false) }
            if v & 0xFF == 0xA6 { self?.update(four, s.four, true) }
            return nil
        }
    }

    public var services: [Service] {
        [
            included,
            Service(Self.uuid(0), includes: [included]) {
                one
                four
                forty
                zero
                twenty
                big
                refusing
                encrypted
            },
            Service(0x180F) {
                cached
                notifyOnly
                authorized
            },
        ]
    }

    public func start(context: DeviceContext) {
        self.context = context
        update = { [weak context] characteristic, value, indicate in
            if indicate {
                context?.indicate(characteristic, value: value, to: nil)
            } else {
                context?.notify(characteristic, value: value)
            }
        }
    }

    public func subscriptionChanged(_ characteristic: Characteristic, peer: ATTPeer, notify: Bool, indicate: Bool) {
        // Subscribing to the battery level sends it at once, as Battery Service devices do.
        if characteristic === notifyOnly && notify { context?.notify(notifyOnly, value: [100]) }
    }
}
