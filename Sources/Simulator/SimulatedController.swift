import BlemuCore
import BlemuHCI

/// The one simulated controller: the unit tests, the fuzz targets (Fuzz/) and the benchmarks
/// (Sources/BenchRig, Benchmarks/, Sources/PerfGate) all run the host against it. It answers
/// the host's commands as a Core 5.4 controller would (Vol 4, Part E, 7), takes ACL data against
/// a buffer count (4.1.1, 4.3), reassembles what the host sends into L2CAP frames, and lets its
/// user inject events and ACL data.
///
/// Two ways to give the host its events (`delivery`):
/// - `.immediate` (the scripted mode): an answer reaches the host before `output` returns, so a
///   test reads top to bottom;
/// - `.queued`: answers and completions wait until `flush()`, as a real controller's do, so
///   the host is never re-entered from inside its own `output` call (the fuzz targets, and
///   `SimulatedAir`'s two controllers).
///
/// With `onViolation` set, every ACL packet the host sends is checked: a known boundary, no
/// more data than a buffer holds, fragments that make whole L2CAP frames, and (with
/// `checksLinks`) no more packets in flight than the controller has buffers and no data on a
/// handle that is not connected.
public final class SimulatedController {
    public enum Delivery { case immediate, queued }
    public enum LinkEvent { case opened(UInt16), closed(UInt16), reset }

    public var delivery: Delivery

    // MARK: What the controller says about itself

    public var address = BluetoothAddress("06:05:04:03:02:01")!
    public var hciVersion: UInt8 = 0x0D            // 5.4
    public var manufacturer: UInt16 = 0xFFFF
    public var aclBufferCount: UInt8 = 4
    public var aclBufferSize: UInt16 = 27
    /// LE Read Buffer Size [v2] (Supported Commands octet 41 bit 5).
    public var supportsBufferSizeV2 = false
    /// Read Buffer Size (BR/EDR, Vol 4, Part E, 7.4.5): what a controller with no LE buffers shares.
    public var brEdrACLLength: UInt16 = 1021
    public var brEdrACLPackets: UInt16 = 8
    /// LE Data Packet Length Extension (LE feature bit 5).
    public var supportsDataLengthExtension = true
    /// LE 2M PHY (LE feature bit 8).
    public var supports2MPHY = false
    /// LL Privacy (LE feature bit 6): a resolving list of `resolvingListSize` entries, which
    /// refuses changes while advertising with address resolution on (Vol 4, Part E, 7.8.38).
    public var supportsLLPrivacy = false
    public var resolvingListSize: UInt8 = 4
    /// LE Extended Advertising with this many sets (0: a legacy-only controller).
    public var extendedAdvertisingSets: UInt8 = 0
    /// What LE Read Maximum Advertising Data Length reports (Vol 4, Part E, 7.8.57).
    public var maximumAdvertisingDataLength: UInt16 = 1650
    /// LE Periodic Advertising (LE feature bit 13): periodic trains on extended sets whose
    /// properties allow one (Vol 4, Part E, 7.8.61).
    public var supportsPeriodicAdvertising = false
    /// LE feature bits beyond the ones the flags above set.
    public var otherLEFeatures: UInt64 = 0
    public var advertisingTxPower: Int8 = -4
    /// The key size Read Encryption Key Size reports (nil: only a status, which the host ignores).
    public var reportedKeySize: UInt8?

    /// The LE Supported Features the controller reports (Vol 6, Part B, 4.6).
    public var leFeatures: UInt64 {
        var bits = otherLEFeatures
        if supportsDataLengthExtension { bits |= 1 << 5 }
        if supportsLLPrivacy { bits |= 1 << 6 }
        if supports2MPHY { bits |= 1 << 8 }
        if extendedAdvertisingSets > 0 { bits |= 1 << 12 }
        if supportsPeriodicAdvertising { bits |= 1 << 13 }
        return bits
    }

    // MARK: How it behaves

    /// Opcodes to answer with this status instead of success.
    public var failures: [UInt16: UInt8] = [:]
    /// When false, the controller takes commands and neither answers nor acts on them.
    public var answersCommands = true
    /// When false, ACL packets are taken but not completed until `completePackets`.
    public var autoComplete = true
    /// Num_HCI_Command_Packets in every answer (0: a controller that stops taking commands).
    public var commandCredits: UInt8 = 1
    /// Disconnect ends in Disconnection Complete for a connected handle (otherwise the test
    /// sends it with `disconnect(handle:reason:)`).
    public var completesDisconnects = false
    /// A controller whose transport is gone takes nothing and answers nothing.
    public var isGone = false
    /// Whether the commands, ACL packets and frames the host sends are kept (`commands`,
    /// `aclOut`, `frames`). Off for the fuzz targets and the benchmarks.
    public var recordsTraffic = true
    /// Whether the host must respect the controller's own view of links and buffers (see the
    /// type's comment); off when something else (a fuzz input) speaks for the controller.
    public var checksLinks = false
    /// A broken rule of the host's (see the type's comment).
    public var onViolation: ((String) -> Void)?
    /// What the host believes the ACL buffer size is, for the size check without `checksLinks`.
    public var hostACLMaxLength: (() -> Int)?
    /// Every whole L2CAP frame the host sent: handle, CID, payload.
    public var onFrame: ((UInt16, UInt16, ArraySlice<UInt8>) -> Void)?
    /// Links opened and closed as the host learns of them, and resets.
    public var onLinkEvent: ((LinkEvent) -> Void)?
    /// Set while the host stops: a Reset then takes links away under it, and what it still
    /// sends on them is dropped, as a real controller would, not flagged.
    public var isStopping = false

    // MARK: Where its packets go

    /// The host the events and ACL data go to (unless `deliver` is set).
    public weak var host: HCIHost?
    /// Where H4 packets for the host go (type, packet), instead of `host`.
    public var deliver: ((UInt8, ArraySlice<UInt8>) -> Void)?
    /// ACL data the host sent on a handle: `SimulatedAir` takes it over the air.
    var onACL: ((UInt16, ACLPacket.Boundary, ArraySlice<UInt8>) -> Void)?
    /// A command the air answers (creating a connection, disconnecting): true when it did.
    var airAnswers: ((HCICommand) -> Bool)?

    // MARK: What it saw

    public var commands: [HCICommand] = []
    public var aclOut: [ACLPacket] = []
    /// A whole L2CAP frame the host sent.
    public struct Frame {
        public let handle: UInt16
        public let cid: UInt16
        public let payload: [UInt8]
    }
    /// Structs, not tuples: each tuple type a process instantiates grows the Swift runtime's
    /// tuple metadata cache, which the debug build's generic code looks up on the measured
    /// request paths (the perf gate counted the difference).
    public var frames: [Frame] = []
    /// Handles connected as far as the host knows.
    public internal(set) var openHandles: Set<UInt16> = []
    /// The resolving list's entries: Peer_Identity_Address_Type and Peer_Identity_Address.
    public internal(set) var resolvingList: [[UInt8]] = []
    public internal(set) var addressResolution = false
    /// Legacy advertising is on (LE Set Advertising Enable; a connection ends it, Vol 6, Part B, 4.4.2.4).
    public internal(set) var legacyAdvertising = false
    /// The random address the host set (LE Set Random Address, 7.8.4).
    public internal(set) var randomAddress: BluetoothAddress?
    /// The advertising data last set (LE Set Advertising Data, 7.8.7).
    public internal(set) var advertisingData: [UInt8] = []

    private struct Packet {
        let type: UInt8
        let bytes: [UInt8]
    }
    private var queue: [Packet] = []
    private var queueHead = 0
    /// Packets taken and not yet completed, per handle.
    var uncompleted: [UInt16: UInt16] = [:]
    /// Packets taken whose completion has not reached the host yet, per handle.
    var inFlight: [UInt16: Int] = [:]
    private var partial: [UInt16: [UInt8]] = [:]
    /// Sets that ended (LE Advertising Set Terminated), with the count of commands then: an
    /// enable recorded before it no longer holds (`enabledSets`).
    var endedSets: [UInt8: Int] = [:]
    /// Links a Reset sent while stopping took away from under the host.
    var forgottenAtStop: Set<UInt16> = []

    public init(delivery: Delivery = .immediate) {
        self.delivery = delivery
    }

    // MARK: From the host

    /// The host's H4 output: a command (0x01) or ACL data (0x02).
    public func output(_ type: UInt8, _ packet: ArraySlice<UInt8>) -> Bool {
        guard !isGone else { return false }
        switch type {
        case 0x01:
            var r = ByteReader(packet)
            guard let opcode = try? r.u16(), let length = try? r.u8(), let parameters = try? r.bytes(Int(length)),
                  r.isAtEnd else {
                violation("the host sent a malformed command packet \(Array(packet))")
                return true
            }
            let command = HCICommand(opcode: opcode, parameters: Array(parameters))
            if recordsTraffic { commands.append(command) }
            if opcode == HCIOpcode.reset && !isStopping {
                // A Reset outside a stop is a restart (hardware error): the host drops what it
                // was sending and starts every PDU afresh, whether or not the controller got to
                // process the command.
                partial.removeAll()
            }
            guard answersCommands else { return true }
            if airAnswers?(command) == true { return true }
            answer(command)
        case 0x02:
            guard let acl = try? ACLPacket(packet: packet) else {
                violation("the host sent a malformed ACL packet \(Array(packet))")
                return true
            }
            take(acl)
        default:
            violation("the host sent an H4 packet of type \(type)")
        }
        return true
    }

    private func take(_ acl: ACLPacket) {
        if recordsTraffic { aclOut.append(ACLPacket(handle: acl.handle, boundary: acl.boundary, data: Array(acl.data)[...])) }
        if onViolation != nil {
            let limit = checksLinks ? Int(aclBufferSize) : hostACLMaxLength?() ?? Int(aclBufferSize)
            check(acl.data.count <= max(limit, 27), "ACL packet of \(acl.data.count) bytes for buffers of \(limit)")
        }
        if checksLinks && !openHandles.contains(acl.handle) {
            // A controller drops data for a handle it does not know.
            if !forgottenAtStop.contains(acl.handle) { violation("ACL data sent on handle \(acl.handle), which is not connected") }
            return
        }
        inFlight[acl.handle, default: 0] += 1
        if checksLinks {
            let total = inFlight.values.reduce(0, +)
            check(total <= Int(max(aclBufferCount, 1)), "\(total) ACL packets in flight for \(aclBufferCount) controller buffers")
        }
        reassemble(acl)
        onACL?(acl.handle, acl.boundary, acl.data)
        uncompleted[acl.handle, default: 0] += 1
        if autoComplete { completePackets() }
    }

    /// Joins the fragments of a PDU (Vol 3, Part A, 7.2.1) and reports each whole frame.
    private func reassemble(_ acl: ACLPacket) {
        var current: [UInt8]
        switch acl.boundary {
        case .firstNonFlushable, .firstFlushable:
            if acl.boundary == .firstFlushable {
                violation("host-to-controller ACL packet with boundary \(acl.boundary) (LE uses 00 and 01)")
            }
            check(partial[acl.handle, default: []].isEmpty,
                  "a new L2CAP PDU started on handle \(acl.handle) before the last one was complete")
            current = Array(acl.data)
        case .continuing:
            guard let started = partial[acl.handle], !started.isEmpty else {
                violation("continuing ACL fragment with no PDU started on handle \(acl.handle)")
                return
            }
            current = started + acl.data
        default:
            violation("host-to-controller ACL packet with boundary \(acl.boundary) (LE uses 00 and 01)")
            return
        }
        if current.count >= 4 {
            let length = Int(current[0]) | Int(current[1]) << 8
            check(current.count <= length + 4, "L2CAP fragments carry \(current.count - 4) bytes for a \(length)-byte PDU")
            if current.count >= length + 4 {
                let cid = UInt16(current[2]) | UInt16(current[3]) << 8
                if recordsTraffic { frames.append(Frame(handle: acl.handle, cid: cid, payload: Array(current[4..<(length + 4)]))) }
                onFrame?(acl.handle, cid, current[4..<(length + 4)])
                current = []
            }
        }
        partial[acl.handle] = current
    }

    // MARK: To the host

    /// An event to the host: now, or queued until `flush()`.
    public func event(_ code: UInt8, _ parameters: [UInt8]) {
        send(0x04, [code, UInt8(truncatingIfNeeded: parameters.count)] + parameters)
    }

    private func send(_ type: UInt8, _ bytes: [UInt8]) {
        switch delivery {
        case .immediate: hand(type, bytes)
        case .queued: queue.append(Packet(type: type, bytes: bytes))
        }
    }

    private func hand(_ type: UInt8, _ bytes: [UInt8]) {
        if type == 0x04 { note(bytes[...]) }
        if let deliver {
            deliver(type, bytes[...])
        } else if type == 0x04 {
            host?.receiveEvent(bytes[...])
        } else {
            host?.receiveACL(bytes[...])
        }
    }

    /// Whether packets wait for `flush()`.
    public var isQuiet: Bool { queueHead >= queue.count }

    /// Delivers every queued packet, and what they cause, until the controller is quiet.
    public func flush() {
        var delivered = 0
        while queueHead < queue.count {
            let packet = queue[queueHead]
            let type = packet.type, bytes = packet.bytes
            queueHead += 1
            if queueHead > 4096 {
                queue.removeFirst(queueHead)
                queueHead = 0
            }
            delivered += 1
            check(delivered < 200_000, "the host and controller exchanged 200000 packets without settling")
            if delivered >= 200_000 { return }
            if type == 0x04 && bytes.count == 7 && bytes[0] == 0x13 {
                // A completion for a packet of a link that closed since is never sent (4.3).
                let handle = UInt16(bytes[3]) | UInt16(bytes[4]) << 8
                guard let count = inFlight[handle], count > 0 else { continue }
                inFlight[handle] = count - 1
            }
            hand(type, bytes)
        }
        queue.removeAll(keepingCapacity: true)
        queueHead = 0
    }

    /// Keeps the controller's view of the links in step with an event the host is about to
    /// get (from the controller, or from a fuzz input speaking for it).
    public func note(_ event: ArraySlice<UInt8>) {
        // Only Disconnection Complete and LE Meta events (7.7.5, 7.7.65) change a link; the rest,
        // Number Of Completed Packets above all, are not decoded.
        guard let code = event.first, code == 0x05 || code == 0x3E else { return }
        // Read with the host's own decoder: an event the host drops as malformed (a fuzz input's
        // Connection Complete one byte short, say) changes nothing here either, or the two would
        // disagree about which link a handle names.
        guard let decoded = try? HCIEvent(packet: event) else { return }
        switch decoded {
        case let .disconnectionComplete(status, handle, _) where status == HCIStatus.success:
            // The controller flushes what it held for the link (7.7.5).
            openHandles.remove(handle)
            inFlight[handle] = nil
            uncompleted[handle] = nil
            partial[handle] = nil
            onLinkEvent?(.closed(handle))
        case .leConnectionComplete(let complete) where complete.status == HCIStatus.success:
            let handle = complete.handle
            openHandles.insert(handle)
            forgottenAtStop.remove(handle)
            // Legacy advertising ends with the connection it made (Vol 6, Part B, 4.4.2.4).
            if complete.role == 0x01 { legacyAdvertising = false }
            // A fresh link starts with no PDU under way. A fuzz input speaking for the controller
            // may "reopen" a handle under the host's feet mid-PDU: whatever the new link's role,
            // the host ends its old link there (Vol 4, Part E, 5.3.1; its queue, the rest of a
            // PDU too, is dropped), so a new PDU starts fresh.
            partial[handle] = []
            onLinkEvent?(.opened(handle))
        default:
            break
        }
    }

    /// Number Of Completed Packets (7.7.19) for everything taken and not completed: one event
    /// for all handles when immediate, one per packet when queued (so a link that closes in
    /// between gets none).
    public func completePackets() {
        guard !uncompleted.isEmpty else { return }
        let entries = uncompleted.sorted { $0.key < $1.key }
        uncompleted.removeAll()
        switch delivery {
        case .immediate:
            var p: [UInt8] = [UInt8(entries.count)]
            for (handle, count) in entries {
                p.appendLE(handle)
                p.appendLE(count)
                inFlight[handle] = max(0, inFlight[handle, default: 0] - Int(count))
            }
            event(0x13, p)
        case .queued:
            for (handle, count) in entries where count > 0 {
                for _ in 0..<count { event(0x13, [1] + le(handle) + [1, 0]) }
            }
        }
    }

    /// One ACL packet from the peer: now when immediate; after what is queued, and what it
    /// causes, when queued.
    public func sendACL(handle: UInt16, boundary: ACLPacket.Boundary, data: ArraySlice<UInt8>) {
        var packet: [UInt8] = []
        ACLPacket(handle: handle, boundary: boundary, data: data).encode(into: &packet)
        switch delivery {
        case .immediate:
            hand(0x02, packet)
        case .queued:
            flush()
            queue.append(Packet(type: 0x02, bytes: packet))
            flush()
        }
    }

    /// Sends an L2CAP frame on `cid` as one ACL packet from the peer.
    public func sendL2CAP(handle: UInt16, cid: UInt16, _ payload: [UInt8]) {
        var frame: [UInt8] = []
        frame.appendLE(UInt16(payload.count))
        frame.appendLE(cid)
        frame += payload
        sendACL(handle: handle, boundary: .firstFlushable, data: frame[...])
    }

    /// ACL data from the air, queued for the host like an event (`SimulatedAir`).
    func receiveFromAir(handle: UInt16, boundary: ACLPacket.Boundary, data: ArraySlice<UInt8>) {
        var packet: [UInt8] = []
        ACLPacket(handle: handle, boundary: boundary, data: data).encode(into: &packet)
        send(0x02, packet)
    }

    /// Everything the host sent on `cid` of a link since the last call, reassembled.
    public func takeL2CAP(handle: UInt16, cid: UInt16) -> [[UInt8]] {
        let taken = frames.filter { $0.handle == handle && $0.cid == cid }.map(\.payload)
        frames.removeAll { $0.handle == handle && $0.cid == cid }
        return taken
    }

    private func check(_ condition: @autoclosure () -> Bool, _ message: @autoclosure () -> String) {
        guard let onViolation, !condition() else { return }
        onViolation(message())
    }

    private func violation(_ message: String) { onViolation?(message) }
}
