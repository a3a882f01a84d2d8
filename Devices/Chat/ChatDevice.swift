import BlemuATT
import BlemuCore
import BlemuGATT
import BlemuHost
import DequeModule
import Logging

/// `chat`: a chat room's host, in the plain protocol of the Core Bluetooth chat app it comes
/// from — one service with one message characteristic (write, notify); one write, or one
/// notification, of UTF-8 text is one message.
///
/// | characteristic | format | access |
/// |---|---|---|
/// | Message `890aa912-…` | UTF-8 text, at most ATT_MTU - 3 bytes a write or notification | write, notify |
///
/// Members are the centrals subscribed to Message. What one writes goes to every other member
/// as `NAME: text` (its name: `central-` and the last four hex digits of its address, e.g.
/// `central-AA01`) and to the host's own `onMessage` (printed by `blemu chat`); the host's
/// lines (`send`) go to every member; joins and leaves are announced (`* NAME joined`). A text longer than a member's ATT_MTU - 3 goes
/// as several notifications, cut between characters. Each member has its own bounded queue:
/// one that cannot keep up waits for "ready to update subscribers" without slowing the others,
/// and if its queue overflows, the oldest lines give way to one line saying how many it missed.
public final class ChatDevice: Device {
    public static let deviceName = "chat"
    public static let summary = "chat room host: Chat 9f37e282-…, the seed app's plain protocol (one write or notification of UTF-8 text is one message)"

    public static let serviceUUID = BluetoothUUID("9f37e282-60b6-42b1-a02f-7341da5e2eba")!
    public static let messageUUID = BluetoothUUID("890aa912-c414-440d-88a2-c7f66179589b")!
    /// Lines waiting for one member, at most.
    public static let memberQueueLimit = 256

    public let message: Characteristic
    public let services: [Service]
    public var profile: DeviceProfile {
        DeviceProfile(defaultName: "blemu Chat", advertisedServices: [Self.serviceUUID], appearance: 0x0080)   // generic computer
    }

    /// A line for the host: who sent it (`nil`: an announcement) and the text.
    public var onMessage: ((String?, String) -> Void)?
    /// The host's own name in what members see.
    public var hostName = "host"

    private weak var context: DeviceContext?
    private struct Member {
        let peer: ATTPeer
        let name: String
        /// Lines waiting, each as the notifications it takes (cut to the member's ATT_MTU).
        var queue: Deque<Deque<[UInt8]>> = []
        var missed = 0
    }
    private var members: [UInt16: Member] = [:]

    public init() {
        let box = WeakBox<ChatDevice>()
        let message = Characteristic(Self.messageUUID, properties: [.write, .notify],
                                 validateWrite: { request in
                                     // Vol 3, Part G, 4.9.3: a value the device cannot take is refused.
                                     String(validating: request.value, as: UTF8.self) == nil ? .valueNotAllowed : nil
                                 },
                                 onWrite: { request in
                                     box.value?.received(request)
                                     return nil
                                 })
        self.message = message
        services = [Service(Self.serviceUUID) { message }]
        box.value = self
    }

    public func start(context: DeviceContext) { self.context = context }

    public func stop() { members.removeAll() }

    // MARK: Members

    /// The name a central goes by: the last two octets of its address.
    static func name(of peer: ATTPeer) -> String {
        let text = peer.address.description
        return "central-" + text.suffix(5).replacingColons
    }

    public func subscriptionChanged(_ characteristic: Characteristic, peer: ATTPeer, notify: Bool, indicate: Bool) {
        guard characteristic === message else { return }
        let handle = peer.connectionHandle
        if notify, members[handle] == nil {
            let member = Member(peer: peer, name: Self.name(of: peer))
            members[handle] = member
            announce("* \(member.name) joined", except: handle)
        } else if !notify, let member = members.removeValue(forKey: handle) {
            announce("* \(member.name) left", except: nil)
        }
    }

    public func peerDisconnected(_ peer: ATTPeer) {
        // The stack ends the link's subscriptions first (subscriptionChanged); this is for safety.
        if let member = members.removeValue(forKey: peer.connectionHandle) {
            announce("* \(member.name) left", except: nil)
        }
    }

    /// The names of the members now.
    public var memberNames: [String] { members.values.map(\.name).sorted() }

    // MARK: Messages

    private func received(_ request: WriteRequest) {
        // The validator let only UTF-8 through.
        let text = String(decoding: request.value, as: UTF8.self)
        guard !text.isEmpty else { return }
        let sender = members[request.peer.connectionHandle]?.name ?? Self.name(of: request.peer)
        onMessage?(sender, text)
        deliver("\(sender): \(text)", except: request.peer.connectionHandle)
    }

    /// The host's own line, to every member.
    public func send(_ text: String) {
        guard !text.isEmpty else { return }
        deliver("\(hostName): \(text)", except: nil)
    }

    private func announce(_ text: String, except handle: UInt16?) {
        onMessage?(nil, text)
        deliver(text, except: handle)
    }

    private func deliver(_ text: String, except handle: UInt16?) {
        guard let context else { return }
        for key in members.keys.sorted() where key != handle {
            guard var member = members[key] else { continue }
            if member.queue.count >= Self.memberQueueLimit {
                // Never a silent drop: the member is told how many lines it missed.
                member.queue.removeFirst()
                member.missed += 1
            }
            member.queue.append(Deque(Self.parts(of: text, limit: context.attMTU(of: member.peer) - 3)))
            members[key] = member
        }
        flush()
    }

    /// Sends what each member's queue holds, in order, until its link is full; a member whose
    /// link is full waits for `peripheralIsReady` without holding up the others.
    private func flush() {
        guard let context else { return }
        for key in members.keys.sorted() {
            guard var member = members[key] else { continue }
            if member.missed > 0 {
                let note = Array("* you missed \(member.missed) line(s): too slow".utf8.prefix(context.attMTU(of: member.peer) - 3))
                if context.notify(message, value: note, to: member.peer) { member.missed = 0 }
            }
            sending: while member.missed == 0, var line = member.queue.first {
                while let part = line.first {
                    guard context.notify(message, value: part, to: member.peer) else {
                        member.queue[0] = line
                        break sending
                    }
                    line.removeFirst()
                }
                member.queue.removeFirst()
            }
            members[key] = member
        }
    }

    /// UTF-8 pieces of at most `limit` bytes (20 at least, ATT's default), never cutting a character.
    public static func parts(of text: String, limit: Int) -> [[UInt8]] {
        let limit = max(20, limit)
        var parts: [[UInt8]] = []
        var current: [UInt8] = []
        for character in text {
            let bytes = Array(String(character).utf8)
            if current.count + bytes.count > limit, !current.isEmpty {
                parts.append(current)
                current = []
            }
            current += bytes.prefix(limit)
        }
        if !current.isEmpty { parts.append(current) }
        return parts
    }

    public func peripheralIsReady() { flush() }
}

/// A weak reference a characteristic's handler can hold before the device exists.
final class WeakBox<T: AnyObject> {
    weak var value: T?
}

extension Substring {
    var replacingColons: String { String(filter { $0 != ":" }) }
}
