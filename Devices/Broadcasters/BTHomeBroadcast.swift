import BlemuBroadcast
import BlemuCore
import BlemuCrypto
import BlemuDevice

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

    /// The address advertised from changed (privacy): an encrypted reading is sealed again
    /// under it with a new counter (bthome.io/encryption: the nonce is the MAC, the UUID, the
    /// device information and the counter, so the old sealing does not open under the new
    /// address). The same reading keeps its packet id: a receiver that knows both addresses
    /// as one device records it once. The host reads the new data itself
    /// (`BroadcastingDevice.advertisingAddressChanged`); nothing else is told.
    func advertisingAddressChanged() {
        guard let encryption, let context, let objects,
              let id = BTHomeObject(.packetID, integer: Int64(packetID)) else { return }
        let counter: UInt32
        do {
            counter = try encryption.counters.take()
        } catch {
            // No counter that is sure never to have been used: nothing that could repeat a
            // nonce is sent; the old sealing stays (receivers fail its MIC until a counter is).
            context.log(.stateChanged, .error, "\(error.description); the reading is not sealed again for the new address", [:])
            return
        }
        let sealing = BTHomeEncryption(key: encryption.key, address: context.advertisingAddress, counter: counter)
        advertisingData = BTHome.advertisingData(BTHomePacket(triggerBased: triggerBased, objects: [id] + objects),
                                                 encryption: sealing)
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

    /// A periodic advertising train beside the advertising, carrying the same data (Vol 6,
    /// Part B, 4.4.2.12): `off` (or 0), or its interval in milliseconds, 7.5 to 81918.75 (Vol 4,
    /// Part E, 7.8.61: 0x0006 to 0xFFFF units of 1.25 ms), rounded to the unit. Refused on a
    /// controller that cannot send one; before the start (a configuration file) the host
    /// reports that when it starts.
    static func periodicInterval(context: @escaping () -> BroadcastContext?, apply: @escaping (UInt16?) -> Void) -> DeviceSetting {
        DeviceSetting("periodic", "periodic advertising train with the same data: off, or its interval, ms, 7.5 to 81918.75") { text in
            let wanted = text.trimmingWhitespace.lowercased()
            if wanted == "off" || wanted == "0" {
                apply(nil)
                return nil
            }
            guard let milliseconds = Double(wanted), milliseconds.isFinite, (7.5...81918.75).contains(milliseconds) else {
                return "periodic takes off or an interval in ms from 7.5 to 81918.75, not '\(VisibleText.make(text))'"
            }
            if let reason = context()?.periodicAdvertisingUnsupportedReason { return "periodic: \(reason)" }
            apply(UInt16(max(6, min(0xFFFF, (milliseconds / 1.25).rounded()))))
            return nil
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
