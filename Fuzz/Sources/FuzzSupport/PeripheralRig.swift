import BlemuCore
import BlemuDevices
import BlemuHCI
import BlemuHost

/// The whole stack in process: a Peripheral running a device against a `FuzzController`, on a
/// clock that moves only when told. Built anew for every input, so an input alone decides
/// what happens.
public final class PeripheralRig {
    public let scheduler = ManualScheduler()
    public let controller: FuzzController
    public let peripheral: Peripheral
    public let device: Device
    public let central = BluetoothAddress("F0:F1:F2:F3:F4:F5")!
    public private(set) var stopped = false

    /// Builds the stack and lets it initialize the controller and start advertising.
    public init(device: Device, options: FuzzController.Options, truthful: Bool) {
        self.device = device
        var setup = options
        // Initialization is always answered, so every input starts from the ready state.
        setup.answerCommands = true
        let controller = FuzzController(options: setup, truthful: truthful)
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
        peripheral.controllerUp()
        controller.flush()
        fuzzCheck(peripheral.hci.isReady, "the host did not become ready against a controller that answers everything")
        controller.options.answerCommands = options.answerCommands
    }

    /// Moves the clock, then lets the controller answer what the timers sent.
    public func advance(milliseconds: UInt64) {
        scheduler.advance(by: .milliseconds(Int64(milliseconds)))
        controller.flush()
    }

    public func stop() {
        guard !stopped else { return }
        stopped = true
        controller.stopping = true
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
public func controllerOptions(_ flags: UInt8, _ sizes: UInt8) -> FuzzController.Options {
    var o = FuzzController.Options()
    o.answerCommands = flags & 0x01 == 0
    o.autoComplete = flags & 0x02 == 0
    o.supportsDataLengthExtension = flags & 0x04 == 0
    o.supportsBufferSizeV2 = flags & 0x08 != 0
    // 27 bytes (the LE minimum) or a few larger sizes; 1 to 8 buffers.
    let bufferSizes: [UInt16] = [27, 27, 64, 251]
    o.aclBufferSize = bufferSizes[Int(sizes & 0x03)]
    o.aclBufferCount = UInt8((sizes >> 2) & 0x07) + 1
    if flags & 0x10 != 0 {
        // One command answered with Command Disallowed.
        let failing: [UInt16] = [HCIOpcode.leSetAdvertisingEnable, HCIOpcode.leSetAdvertisingParameters,
                                 HCIOpcode.leSetDataLength, HCIOpcode.disconnect,
                                 HCIOpcode.leRemoteConnectionParameterRequestReply, HCIOpcode.leSetRandomAddress,
                                 HCIOpcode.leReadAdvertisingChannelTxPower, HCIOpcode.leSetAdvertisingData]
        o.failingOpcode = failing[Int(flags >> 5)]
    }
    return o
}
