import BlemuCore
import BlemuDevice
import BlemuDevices
import BlemuHCI
import BlemuHost
import BlemuSimulator

/// What one input decides about the simulated controller (see `controllerOptions`).
public struct ControllerOptions: Hashable {
    public var answerCommands = true
    public var autoComplete = true
    public var supportsDataLengthExtension = true
    public var supportsBufferSizeV2 = false
    public var aclBufferCount: UInt8 = 4
    public var aclBufferSize: UInt16 = 27
    /// A command answered with Command Disallowed (0x0C) instead of success, from the start of
    /// the input on (initialization, which every input starts after, is always answered).
    public var failingOpcode: UInt16?
    public init() {}
}

/// The whole stack in process: a Peripheral running a device against the simulated controller
/// (queued: it answers *later*, as a real one does, so the host is never re-entered from inside
/// its own `output` call), on a clock that moves only when told.
///
/// One stack per process and per shape (device and controller options), reset between inputs:
/// `take` hands out a ready rig, `end` closes its links and keeps it for the next input when it
/// is back where it started (ready, advertising, no link, nothing queued), or tears it down as
/// blemu ends (a clean stop, then the transport goes away; LeakSanitizer then checks what is
/// left) when the input stopped it or left it elsewhere. Building the stack and initializing
/// the controller cost most of an input before (and their coverage made libFuzzer's per-input
/// bookkeeping slow). What a device remembers carries over between inputs, so for reproducing
/// and minimizing a failure `BLEMU_FUZZ_FRESH=1` builds a new rig for every input, as the
/// regression replay of `scripts/fuzz` does. Every packet the host sends is checked: the ACL
/// rules by the controller, what is on the fixed channels by `FrameChecks`. When `truthful`
/// (the harness, not the fuzz input, speaks for the controller), the host must also respect
/// the controller's buffers and links.
public final class PeripheralRig {
    public let scheduler = ManualScheduler()
    public let controller: SimulatedController
    public let peripheral: Peripheral
    public let device: Device
    public let central = BluetoothAddress("F0:F1:F2:F3:F4:F5")!
    public private(set) var stopped = false
    private let frames: FrameChecks

    private struct Shape: Hashable {
        var device: UInt8
        var options: ControllerOptions
        var truthful: Bool
    }
    /// Rigs kept between inputs, at most one per shape and `poolLimit` in all.
    nonisolated(unsafe) private static var pool: [Shape: PeripheralRig] = [:]
    /// The kept shapes, the longest unused first: a new shape takes the place of the first once
    /// the pool is full. `controllerOptions` makes 16 shapes per device (it made 2,592, and most
    /// inputs of a long run built a new stack), so the pool holds them all.
    nonisolated(unsafe) private static var poolOrder: [Shape] = []
    private static let poolLimit = 64
    /// `BLEMU_FUZZ_FRESH=1`: a new rig for every input.
    public static let freshPerInput = fuzzEnvironmentFlag("BLEMU_FUZZ_FRESH")
    private var shape: Shape?

    /// A ready rig for one input: the kept one of this shape, or a new one. `deviceKind` names
    /// what `device` builds.
    public static func take(deviceKind: UInt8, options: ControllerOptions, truthful: Bool,
                            device: () -> Device) -> PeripheralRig {
        // Whether the controller answers commands, completes packets and fails a command is set
        // per input, so rigs that differ only there are one shape.
        var initialized = options
        initialized.answerCommands = true
        initialized.autoComplete = true
        initialized.failingOpcode = nil
        let shape = Shape(device: deviceKind, options: initialized, truthful: truthful)
        let rig: PeripheralRig
        if !freshPerInput, let kept = pool.removeValue(forKey: shape) {
            poolOrder.removeAll { $0 == shape }
            kept.controller.answersCommands = options.answerCommands
            kept.controller.autoComplete = truthful && options.autoComplete
            rig = kept
        } else {
            rig = PeripheralRig(device: device(), options: options, truthful: truthful)
            rig.shape = shape
        }
        if let failing = options.failingOpcode { rig.controller.failures = [failing: HCIStatus.commandDisallowed] }
        return rig
    }

    /// The end of an input: the rig goes back to the pool, or is torn down (`finish`).
    public func end() {
        guard !Self.freshPerInput, !stopped, let shape, Self.pool[shape] == nil else {
            finish()
            return
        }
        // The central and the controller end every link; the host advertises again.
        controller.failures = [:]
        controller.answersCommands = true
        controller.autoComplete = shape.truthful
        for handle in controller.openHandles.sorted() {
            controller.disconnect(handle: handle, reason: 0x13)
            controller.flush()
        }
        // Past every per-link deadline, so what the links left behind runs and goes.
        advance(milliseconds: 65_000)
        if peripheral.hci.isReady && peripheral.connectionCount == 0 && controller.openHandles.isEmpty
            && controller.isQuiet && controller.isAdvertising {
            if Self.pool.count >= Self.poolLimit, !Self.poolOrder.isEmpty {
                Self.pool.removeValue(forKey: Self.poolOrder.removeFirst())?.finish()
            }
            Self.pool[shape] = self
            Self.poolOrder.append(shape)
        } else {
            finish()
        }
    }

    /// Builds the stack and lets it initialize the controller and start advertising.
    public init(device: Device, options: ControllerOptions, truthful: Bool) {
        self.device = device
        let controller = SimulatedController(delivery: .queued)
        controller.aclBufferCount = options.aclBufferCount
        controller.aclBufferSize = options.aclBufferSize
        controller.supportsDataLengthExtension = options.supportsDataLengthExtension
        controller.supportsBufferSizeV2 = options.supportsBufferSizeV2
        // Without the truth, the fuzz input completes packets and closes links.
        controller.autoComplete = truthful && options.autoComplete
        controller.completesDisconnects = truthful
        controller.checksLinks = truthful
        controller.recordsTraffic = false
        controller.onViolation = { fuzzFailure($0) }
        let frames = FrameChecks(truthful: truthful)
        self.frames = frames
        controller.onFrame = { frames.check(handle: $0, cid: $1, $2) }
        controller.onLinkEvent = { frames.linkEvent($0) }
        self.controller = controller
        do {
            peripheral = try Peripheral(device: device, configuration: PeripheralConfiguration(name: "Fuzz", controller: "fuzz"),
                                        scheduler: scheduler, logger: fuzzLogger(),
                                        output: { controller.output($0, $1) })
        } catch {
            fuzzFailure("the fuzz device's database does not build: \(error)")
        }
        let peripheral = self.peripheral
        controller.deliver = { [unowned peripheral] type, packet in peripheral.receive(packetType: type, packet: packet) }
        controller.hostACLMaxLength = { [unowned peripheral] in peripheral.hci.info.aclMaxLength }
        // Initialization is always answered, so every input starts from the ready state.
        peripheral.controllerUp()
        controller.flush()
        fuzzCheck(peripheral.hci.isReady, "the host did not become ready against a controller that answers everything")
        controller.answersCommands = options.answerCommands
    }

    /// How many attributes the device's GATT database has, for typed PDUs that name handles.
    public var attributeCount: Int { peripheral.database.attributes.count }

    /// One ACL packet from the central, delivered after what is queued (and what that causes).
    public func sendACL(handle: UInt16, boundary: ACLPacket.Boundary, data: ArraySlice<UInt8>) {
        if frames.trace { writeStandardError("> handle \(handle) \(boundary): \(hex(Array(data)))\n") }
        controller.sendACL(handle: handle, boundary: boundary, data: data)
    }

    /// Moves the clock, then lets the controller answer what the timers sent.
    public func advance(milliseconds: UInt64) {
        scheduler.advance(by: .milliseconds(Int64(milliseconds)))
        controller.flush()
    }

    /// A long jump of the clock (l2cap's 65 s and 10 minutes): the run loop stalls for all but
    /// the last `jumpTail` (`ManualScheduler.stall`: each timer due meanwhile fires once, at the
    /// new time, as the run loop does when it wakes late), then the tail passes timer by timer,
    /// so a chain of timers within it (a command's 3 s timeout, the 10 s reassembly) still runs
    /// its course. Tick by tick, a subscribed heart-rate device's 1 s tick sent a notification
    /// through the whole stack each second: 600 in a 10-minute jump, a fifth of `l2cap`'s time.
    public func jump(milliseconds: UInt64) {
        if milliseconds > Self.jumpTail {
            scheduler.stall(for: .milliseconds(Int64(milliseconds - Self.jumpTail)))
            controller.flush()
        }
        advance(milliseconds: min(milliseconds, Self.jumpTail))
    }

    /// What of a long jump passes timer by timer: past the 10 s reassembly timeout.
    public static let jumpTail: UInt64 = 11_000

    public func stop() {
        guard !stopped else { return }
        stopped = true
        controller.isStopping = true
        peripheral.stop { }
        controller.flush()
    }

    /// Ends the run as blemu's life ends: a clean stop, the clock past every deadline, then the
    /// transport goes away. LeakSanitizer then looks at what is left: nothing may be.
    public func finish() {
        stop()
        scheduler.advance(by: .seconds(5))
        controller.flush()
        // Links the controller never closed end with the transport (a Peripheral and its
        // PeripheralHost hold each other while a link is open).
        peripheral.controllerDown(reason: "end of the fuzz input")
        scheduler.advance(by: .seconds(60))
        controller.flush()
    }
}

/// Options for the controller from one byte of the input.
public func controllerOptions(_ flags: UInt8, _ sizes: UInt8) -> ControllerOptions {
    var o = ControllerOptions()
    o.answerCommands = flags & 0x01 == 0
    o.autoComplete = flags & 0x02 == 0
    o.supportsDataLengthExtension = flags & 0x04 == 0
    o.supportsBufferSizeV2 = flags & 0x08 != 0
    // Four buffer pools: one buffer of 27 bytes (the LE minimum), four of 27, two of 64, eight
    // of 251. With the two feature bits that is 16 controller shapes, each a stack kept between
    // inputs (`PeripheralRig`); sizes and counts in between reached no other code.
    let buffers: [(size: UInt16, count: UInt8)] = [(27, 1), (27, 4), (64, 2), (251, 8)]
    (o.aclBufferSize, o.aclBufferCount) = buffers[Int(sizes & 0x03)]
    if flags & 0x10 != 0 {
        // One command answered with Command Disallowed (from the input's start, after
        // initialization: re-advertising, Disconnect, Set Data Length, the parameter reply, ...).
        let failing: [UInt16] = [HCIOpcode.leSetAdvertisingEnable, HCIOpcode.leSetAdvertisingParameters,
                                 HCIOpcode.leSetDataLength, HCIOpcode.disconnect,
                                 HCIOpcode.leRemoteConnectionParameterRequestReply, HCIOpcode.leSetRandomAddress,
                                 HCIOpcode.leReadAdvertisingChannelTxPower, HCIOpcode.leSetAdvertisingData]
        o.failingOpcode = failing[Int(flags >> 5)]
    }
    return o
}
