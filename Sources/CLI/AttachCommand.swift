import ArgumentParser
import BlemuAttach
import BlemuCore
import BlemuRunLoop
import BlemuTransport

#if canImport(Glibc)
import Glibc
#endif

/// `blemu attach`: gives this machine's kernel an adapter on a controller's radio (`AttachBridge`);
/// this only parses and prints.
struct AttachCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "attach",
        abstract: "Give this machine's kernel a Bluetooth adapter (hciN) on a controller's radio: /dev/vhci bridged to --controller.",
        discussion: """
            The controller is a new one on a virtual radio (tcp:HOST:PORT for rootcanal, netsim[:N] for the Android \
            Emulator, unix:PATH), so BlueZ, bleak and browsers on this machine see blemu's devices on that radio. \
            Prints `blemu attach: hciN up` when the adapter is registered. When the controller goes away the adapter \
            is removed, and a new one comes up when the controller is back; Ctrl-C or SIGTERM removes it and exits. \
            Needs /dev/vhci (`sudo modprobe hci_vhci`) and root (or write access to /dev/vhci).
            """)

    @Option(name: .customLong("controller"), help: "Controller spec: tcp:HOST:PORT, netsim[:INSTANCE], unix:PATH, serial:DEVICE[:BAUD]. Default: $BLEMU_CONTROLLER.")
    var controller: String?

    @Option(name: .customLong("vhci"), help: ArgumentHelp("The kernel's virtual HCI device.", valueName: "PATH"))
    var vhciPath = VirtualHCIDevice.defaultPath

    func run() throws {
        let (spec, loop) = try controllerAndLoop(controller)
        if case .hci = spec {
            throw ValidationError("--controller \(spec) is already an adapter of this kernel: attach bridges to a controller on another radio (tcp:HOST:PORT, netsim, unix:PATH)")
        }
        if let problem = VirtualHCIDevice.accessProblem(path: vhciPath) {
            throw RuntimeFailure(problem.description)
        }
        let path = vhciPath
        let bridge = AttachBridge(controller: spec, loop: loop) { () throws(TransportError) -> VirtualHCIDevice in
            try VirtualHCIDevice.open(path: path, loop: loop)
        }
        var failure: String?
        bridge.onEvent = { event in
            switch event {
            case .adapterUp(let name):
                emitLine("blemu attach: \(name) up (controller \(spec))")
            case .adapterRemoved(let name, let reason):
                emitLine("blemu attach: \(name) removed: \(reason)")
            case .waitingForController(let reason):
                emitStderr("blemu attach: waiting for the controller: \(reason)")
            case .answeredForController(let opcode, let name, let why):
                emitStderr("blemu attach: answered \(name) (0x\(hex(opcode))) for the controller: \(why)")
            }
        }
        bridge.onEnded = { reason in
            failure = reason
            loop.stop()
        }
        do {
            try loop.handleSignals([SIGINT, SIGTERM]) { _ in
                bridge.stop()
                loop.stop()
            }
        } catch {
            throw RuntimeFailure("cannot handle SIGINT and SIGTERM: \(error)")
        }
        bridge.start()
        loop.run()
        if let failure { throw RuntimeFailure(failure) }
    }

    private func hex(_ value: UInt16) -> String {
        let digits = String(value, radix: 16)
        return String(repeating: "0", count: max(0, 4 - digits.count)) + digits
    }
}
