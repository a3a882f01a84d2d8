import BlemuBroadcast
import BlemuCore
import BlemuCrypto
import BlemuHost

/// What the two BTHome devices share: their advertising data built from a reading, the packet
/// id (bthome.io/format: object 0x00, "increased on each new reading", so a receiver drops a
/// repeat), and the encryption with the bindkey and a counter that never repeats
/// (`BTHomeCounterStore` in the state directory).
public final class BTHomeBroadcast {
    /// The sensor sends when something happens, not at a regular interval (the door).
    let triggerBased: Bool
    /// The bindkey and the counter store, when the device was given `--bindkey-file`.
    public private(set) var encryption: (key: AESCCMKey, counters: BTHomeCounterStore)?
    /// The packet id of the reading advertised now.
    public private(set) var packetID: UInt8 = 0
    /// The advertising data of the reading advertised now (empty until the first).
    public private(set) var advertisingData: [UInt8] = []
    /// The objects of the reading advertised now, without the packet id.
    private var objects: [BTHomeObject]?
    weak var context: BroadcastContext?

    init(triggerBased: Bool) {
        self.triggerBased = triggerBased
    }

    public var isEncrypted: Bool { encryption != nil }

    /// Encrypts from now on; the counter comes from `counters`. Before the device starts.
    public func encrypt(key: AESCCMKey, counters: BTHomeCounterStore) {
        encryption = (key, counters)
        objects = nil
    }

    /// A reading: when its objects differ from the one advertised (or `always`, an event), it
    /// gets the next packet id and becomes the advertising data, and the host hears of it. The
    /// same reading again changes nothing: no counter is taken, no command sent. Returns whether
    /// the advertising data changed.
    @discardableResult
    func publish(_ reading: [BTHomeObject], always: Bool = false) -> Bool {
        guard always || reading != objects else { return false }
        var encryptionNow: BTHomeEncryption?
        if let encryption {
            // The nonce begins with the address advertised from; without it nothing is sent.
            guard let context else { return false }
            do {
                encryptionNow = BTHomeEncryption(key: encryption.key, address: context.advertisingAddress,
                                                 counter: try encryption.counters.take())
            } catch {
                // No counter that is sure never to have been used: the old reading stays.
                context.log(.stateChanged, .error, "\(error.description); the advertisement keeps the last reading", [:])
                return false
            }
        }
        let nextID = packetID &+ 1
        guard let id = BTHomeObject(.packetID, integer: Int64(nextID)) else { return false }
        // The objects are a device's own, a handful of fixed-size ones: always far below the
        // 254 bytes of one AD structure, so BTHome's size precondition cannot be reached.
        advertisingData = BTHome.advertisingData(BTHomePacket(triggerBased: triggerBased, objects: [id] + reading),
                                                 encryption: encryptionNow)
        packetID = nextID
        objects = reading
        context?.broadcastChanged()
        return true
    }
}

extension DeviceSetting {
    /// The advertising interval of a broadcaster, in milliseconds: 20 to 10240 (Vol 4, Part E,
    /// 7.8.5: 0x0020 to 0x4000 units of 0.625 ms), rounded to the unit.
    static func broadcastInterval(apply: @escaping (UInt16) -> Void) -> DeviceSetting {
        .number("interval", "advertising interval, ms, 20 to 10240", in: 20...10240) { milliseconds in
            apply(UInt16(max(0x20, min(0x4000, (milliseconds / 0.625).rounded()))))
        }
    }

    /// A hex string of exactly `bytes` bytes (`-` and `:` allowed between digits, as UUIDs are written).
    static func hex(_ key: String, _ summary: String, bytes count: Int, apply: @escaping ([UInt8]) -> Void) -> DeviceSetting {
        DeviceSetting(key, summary) { text in
            guard let bytes = Hex.parse(text.trimmingWhitespace), bytes.count == count else {
                return "\(key) takes \(count) bytes as \(2 * count) hex digits, not '\(VisibleText.make(text))'"
            }
            apply(bytes)
            return nil
        }
    }
}
