import BlemuCore
import BlemuHCI
import BlemuL2CAP
import BlemuSMP

/// A controller for the fuzz targets: it answers the host's commands the way a Core 5.4
/// controller would, takes its ACL data against a real buffer count, and checks what the host
/// sends. Unlike the test suite's scripted controller it answers *later*, as a real one does:
/// answers and completions wait in a queue until the harness calls `flush()`, so the host is
/// never re-entered from inside its own `output` call.
///
/// Checks on every packet the host sends (a violation aborts the run, see `fuzzFailure`):
/// - ACL: a known packet boundary (first non-flushable or continuing), no more data than the
///   controller's buffer size, fragments that reassemble into whole L2CAP frames;
/// - frames: only on the fixed channels, ATT PDUs no longer than the bearer's MTU allows and of
///   a kind a server sends, LE signalling commands that decode;
/// - when `truthful` (the harness, not the fuzz input, speaks for the controller): never more
///   packets in flight than the controller has buffers, and no data on a handle that is not
///   connected.
public final class FuzzController {
    public struct Options {
        public var answerCommands = true
        public var autoComplete = true
        public var supportsDataLengthExtension = true
        public var supportsBufferSizeV2 = false
        public var aclBufferCount: UInt8 = 4
        public var aclBufferSize: UInt16 = 27
        /// A command answered with Command Disallowed (0x0C) instead of success.
        public var failingOpcode: UInt16?
        public var advertisingTxPower: Int8 = -4
        public init() {}
    }

    public var options: Options
    /// Whether the harness alone produces events, so the controller's view of buffers and
    /// links is the truth the host must respect.
    public let truthful: Bool
    /// Where events for the host go (the Peripheral's `receive`).
    public var deliver: (UInt8, ArraySlice<UInt8>) -> Void = { _, _ in }
    /// What the host believes the ACL buffer size is (used when the controller is not truthful).
    public var hostACLMaxLength: () -> Int = { 27 }

    private var events: [[UInt8]] = []
    private var eventHead = 0
    public private(set) var openHandles: Set<UInt16> = []
    /// Whether the controller advertises (connectable): only then can a central connect.
    public private(set) var isAdvertising = false
    /// Set by the harness while the peripheral stops (see `output`).
    public var stopping = false
    /// Links a Reset sent while stopping took away from under the host (see `output`).
    private var forgottenAtStop: Set<UInt16> = []
    private var inFlight: [UInt16: Int] = [:]
    private var partial: [UInt16: [UInt8]] = [:]
    /// The longest ATT PDU the peripheral may send on a link: 23 until it answered an Exchange MTU.
    private var attLimit: [UInt16: Int] = [:]
    /// `BLEMU_FUZZ_TRACE=1`: print the L2CAP frames both ways.
    let trace = fuzzEnvironmentFlag("BLEMU_FUZZ_TRACE")
    public private(set) var commandsSeen = 0
    public private(set) var aclPacketsSeen = 0
    public private(set) var framesSeen = 0

    public init(options: Options, truthful: Bool) {
        self.options = options
        self.truthful = truthful
    }

    // MARK: From the host

    public func output(_ type: UInt8, _ packet: ArraySlice<UInt8>) -> Bool {
        switch type {
        case 0x01:
            commandsSeen += 1
            var r = ByteReader(packet)
            guard let opcode = try? r.u16(), let length = try? r.u8(), let parameters = try? r.bytes(Int(length)),
                  r.isAtEnd else {
                fuzzFailure("the host sent a malformed command packet \(Array(packet))")
            }
            if opcode == HCIOpcode.reset && !stopping {
                // A Reset outside a stop is a restart (hardware error): the host drops what it
                // was sending and starts every PDU afresh, whether or not this controller got
                // to process the command.
                partial.removeAll()
            }
            // A controller that does not answer does not act on commands either.
            guard options.answerCommands else { return true }
            if opcode == HCIOpcode.reset {
                // A reset controller forgets its links and the packets it held (Vol 4, Part E, 7.3.2).
                // A clean stop ends with a Reset even when links did not close in time; the stack
                // is finished then and may still hold them (blemu exits right after), so what
                // it sends on them is dropped here, as a real controller would, not flagged.
                if stopping { forgottenAtStop.formUnion(openHandles) }
                attLimit.removeAll()
                isAdvertising = false
                if truthful {
                    openHandles.removeAll()
                    inFlight.removeAll()
                }
            }
            if opcode == HCIOpcode.leSetAdvertisingEnable, options.failingOpcode != opcode, let enable = parameters.first {
                isAdvertising = enable == 1
            }
            answer(opcode, Array(parameters))
        case 0x02:
            aclPacketsSeen += 1
            guard let acl = try? ACLPacket(packet: packet) else {
                fuzzFailure("the host sent a malformed ACL packet \(Array(packet))")
            }
            checkACL(acl)
        default:
            fuzzFailure("the host sent an H4 packet of type \(type)")
        }
        return true
    }

    private func checkACL(_ acl: ACLPacket) {
        let limit = truthful ? Int(options.aclBufferSize) : hostACLMaxLength()
        fuzzCheck(acl.data.count <= max(limit, 27), "ACL packet of \(acl.data.count) bytes for buffers of \(limit)")
        if truthful {
            if !openHandles.contains(acl.handle) && forgottenAtStop.contains(acl.handle) { return }
            fuzzCheck(openHandles.contains(acl.handle), "ACL data sent on handle \(acl.handle), which is not connected")
            inFlight[acl.handle, default: 0] += 1
            let total = inFlight.values.reduce(0, +)
            fuzzCheck(total <= Int(max(options.aclBufferCount, 1)),
                      "\(total) ACL packets in flight for \(options.aclBufferCount) controller buffers")
        }
        switch acl.boundary {
        case .firstNonFlushable:
            fuzzCheck(partial[acl.handle, default: []].isEmpty,
                      "a new L2CAP PDU started on handle \(acl.handle) before the last one was complete")
            partial[acl.handle] = Array(acl.data)
        case .continuing:
            fuzzCheck(!(partial[acl.handle, default: []].isEmpty), "continuing ACL fragment with no PDU started on handle \(acl.handle)")
            partial[acl.handle, default: []] += acl.data
        default:
            fuzzFailure("host-to-controller ACL packet with boundary \(acl.boundary) (LE uses 00 and 01)")
        }
        let current = partial[acl.handle, default: []]
        if current.count >= 4 {
            let length = Int(current[0]) | Int(current[1]) << 8
            fuzzCheck(current.count <= length + 4, "L2CAP fragments carry \(current.count - 4) bytes for a \(length)-byte PDU")
            if current.count == length + 4 {
                partial[acl.handle] = []
                checkFrame(handle: acl.handle, cid: UInt16(current[2]) | UInt16(current[3]) << 8, current[4...])
            }
        }
        if truthful && options.autoComplete {
            queue(completion: acl.handle)
        }
    }

    private func checkFrame(handle: UInt16, cid: UInt16, _ payload: ArraySlice<UInt8>) {
        framesSeen += 1
        if trace { writeStandardError("< handle \(handle) cid \(cid): \(hex(Array(payload)))\n") }
        switch cid {
        case L2CAPChannel.att:
            guard let opcode = payload.first else { fuzzFailure("empty ATT PDU sent") }
            // When the fuzz input speaks for the controller it can reopen a handle under a
            // link's feet, so only the protocol's ceiling is certain then.
            let limit = truthful ? attLimit[handle] ?? 23 : 517
            fuzzCheck(payload.count <= limit, "ATT PDU \(opcode) of \(payload.count) bytes on a bearer allowing \(limit)")
            // What a server sends: Error Response, responses, notifications and indications.
            let serverOpcodes: Set<UInt8> = [0x01, 0x03, 0x05, 0x07, 0x09, 0x0B, 0x0D, 0x0F, 0x11, 0x13, 0x17, 0x19,
                                             0x1B, 0x1D, 0x21, 0x23]
            fuzzCheck(serverOpcodes.contains(opcode), "the server sent ATT opcode \(opcode), which is not a server PDU")
            if opcode == 0x03 { attLimit[handle] = 517 }
        case L2CAPChannel.leSignaling:
            guard let command = try? SignalingCommand(frame: payload) else {
                fuzzFailure("the host sent a malformed LE signalling frame \(Array(payload))")
            }
            fuzzCheck(command.identifier != 0, "the host sent a signalling command with identifier 0")
        case L2CAPChannel.securityManager:
            // The pairing responder's PDUs only (Vol 3, Part H, 3.3): well formed, never an initiator's.
            guard let command = try? SMPCommand(pdu: payload) else {
                fuzzFailure("the host sent a malformed SMP PDU \(Array(payload))")
            }
            fuzzCheck(command.code != .pairingRequest && command.code != .keypressNotification,
                      "the host sent SMP code \(command.code.rawValue), which a responder never sends")
        default:
            fuzzFailure("the host sent an L2CAP frame on channel \(cid), not a fixed channel")
        }
    }

    // MARK: Answers (Vol 4, Part E, 7)

    private func answer(_ opcode: UInt16, _ parameters: [UInt8]) {
        let status: UInt8 = options.failingOpcode == opcode ? 0x0C : 0x00
        var returned: [UInt8] = [status]
        switch opcode {
        case HCIOpcode.readLocalVersion:
            returned += [0x0D, 0x00, 0x00, 0x0D, 0xFF, 0xFF, 0x00, 0x00]
        case HCIOpcode.readBDAddr:
            returned += [0x01, 0x02, 0x03, 0x04, 0x05, 0x06]
        case HCIOpcode.readLocalSupportedCommands:
            var bits = [UInt8](repeating: 0xFF, count: 64)
            if !options.supportsBufferSizeV2 { bits[41] &= ~0x20 }
            returned += bits
        case HCIOpcode.readLocalSupportedFeatures:
            returned += [UInt8](repeating: 0, count: 8)
        case HCIOpcode.leReadLocalSupportedFeatures:
            returned += [options.supportsDataLengthExtension ? 0x20 : 0x00, 0, 0, 0, 0, 0, 0, 0]
        case HCIOpcode.leReadAdvertisingChannelTxPower:
            returned.append(UInt8(bitPattern: options.advertisingTxPower))
        case HCIOpcode.leReadBufferSize:
            returned.appendLE(options.aclBufferSize)
            returned.append(options.aclBufferCount)
        case HCIOpcode.leReadBufferSizeV2:
            returned.appendLE(options.aclBufferSize)
            returned.append(options.aclBufferCount)
            returned += [0, 0, 0]
        case HCIOpcode.readBufferSize:
            returned.appendLE(options.aclBufferSize)
            returned.append(0)
            returned.appendLE(UInt16(options.aclBufferCount))
            returned.appendLE(UInt16(0))
        case HCIOpcode.leSetDataLength, HCIOpcode.leRemoteConnectionParameterRequestReply,
             HCIOpcode.leRemoteConnectionParameterRequestNegativeReply:
            returned += parameters.prefix(2)
        case HCIOpcode.disconnect:
            // Command Status, then Disconnection Complete when the link existed (7.1.6).
            queue(event: 0x0F, [status, 1] + le(opcode))
            let handle = parameters.count >= 2 ? (UInt16(parameters[0]) | UInt16(parameters[1]) << 8) & 0x0FFF : 0xFFFF
            if status == 0, truthful, openHandles.contains(handle) {
                queue(event: 0x05, [0x00] + le(handle) + [0x16])
            }
            return
        default:
            break
        }
        queue(event: 0x0E, [1] + le(opcode) + returned)
    }

    private func le(_ v: UInt16) -> [UInt8] { [UInt8(v & 0xFF), UInt8(v >> 8)] }

    // MARK: To the host

    public func queue(event code: UInt8, _ parameters: [UInt8]) {
        events.append([code, UInt8(truncatingIfNeeded: parameters.count)] + parameters)
    }

    private func queue(completion handle: UInt16) {
        events.append([0x13, 5, 1] + le(handle) + [1, 0])
    }

    /// Delivers every queued event, and the answers they cause, until the controller is quiet.
    public func flush() {
        var delivered = 0
        while eventHead < events.count {
            let event = events[eventHead]
            eventHead += 1
            if eventHead > 4096 {
                events.removeFirst(eventHead)
                eventHead = 0
            }
            delivered += 1
            fuzzCheck(delivered < 200_000, "the host and controller exchanged 200000 events without settling")
            if event[0] == 0x13 && event.count == 7 && truthful {
                // A completion for a packet of a link that closed since is never sent (4.3).
                let handle = UInt16(event[3]) | UInt16(event[4]) << 8
                guard let count = inFlight[handle], count > 0 else { continue }
                inFlight[handle] = count - 1
            }
            noteDelivered(event[...])
            deliver(0x04, event[...])
        }
    }

    /// Keeps the controller's view of the links in step with an event the host is about to
    /// get (from the queue, or from the fuzz input in the H4 target).
    public func noteDelivered(_ event: ArraySlice<UInt8>) {
        guard event.count >= 2 else { return }
        let e = Array(event)
        switch e[0] {
        case 0x05 where e.count == 6 && e[2] == 0:
            // The controller flushes what it held for the link (Vol 4, Part E, 7.7.5).
            let handle = (UInt16(e[3]) | UInt16(e[4]) << 8) & 0x0FFF
            openHandles.remove(handle)
            inFlight[handle] = nil
            partial[handle] = nil
            attLimit[handle] = nil
        case 0x3E where truthful && e.count >= 7 && (e[2] == 0x01 || e[2] == 0x0A) && e[3] == 0:
            let handle = (UInt16(e[4]) | UInt16(e[5]) << 8) & 0x0FFF
            openHandles.insert(handle)
            forgottenAtStop.remove(handle)
            // Legacy advertising ends with the connection it made (Vol 6, Part B, 4.4.2.4).
            if e.count > 6 && e[6] == 0x01 { isAdvertising = false }
            attLimit[handle] = 23
            partial[handle] = []
        default:
            break
        }
    }

    /// Number Of Completed Packets for everything in flight (when `autoComplete` is off).
    public func completeAll() {
        // One event per packet, so the bookkeeping in flush() stays simple.
        for (handle, count) in inFlight.sorted(by: { $0.key < $1.key }) where count > 0 {
            for _ in 0..<count { queue(completion: handle) }
        }
    }

    // MARK: A scripted central

    /// LE Connection Complete (7.7.65.1) for `handle`, peripheral role unless `central`.
    public func connect(handle: UInt16, peer: BluetoothAddress, interval: UInt16 = 24, central: Bool = false) {
        var p: [UInt8] = [0x01, 0x00]
        p.appendLE(handle)
        p += [central ? 0x00 : 0x01, 0x01] + peer.littleEndianBytes
        p.appendLE(interval)
        p.appendLE(UInt16(0))
        p.appendLE(UInt16(400))
        p.append(0x00)
        queue(event: 0x3E, p)
    }

    public func disconnect(handle: UInt16, reason: UInt8) {
        var p: [UInt8] = [0x00]
        p.appendLE(handle)
        p.append(reason)
        queue(event: 0x05, p)
    }

    /// One ACL packet from the central, delivered now (after what is queued).
    public func sendACL(handle: UInt16, boundary: ACLPacket.Boundary, data: ArraySlice<UInt8>) {
        flush()
        if trace { writeStandardError("> handle \(handle) \(boundary): \(hex(Array(data)))\n") }
        var packet: [UInt8] = []
        ACLPacket(handle: handle, boundary: boundary, data: data).encode(into: &packet)
        deliver(0x02, packet[...])
        flush()
    }
}
