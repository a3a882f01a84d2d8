import ArgumentParser
import BlemuControl
import BlemuCore
import BlemuDevice
import BlemuRunLoop
import BlemuStack
import BlemuTransport
import Logging

/// `blemu host`: one controller with the programmable host on it, idle until a program drives it
/// over the control socket (Docs/CONTROL.md, "The programmable host"). The CLI only parses and
/// starts; `ProgrammableHostStack` assembles, `RunSession` runs.
struct HostCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "host",
        abstract: "A host a program drives over the control socket: scan, connect, disconnect, reset (Docs/CONTROL.md).",
        discussion: "No devices and nothing on the air until asked: `blemu ctl PATH host OP [--field value ...]` "
            + "or JSON lines {\"id\":1,\"cmd\":\"host\",\"op\":\"scan\"} on the socket; `blemu ctl PATH watch host` streams its events.")

    @Option(name: .customLong("controller"), help: "Controller spec: hciN, tcp:HOST:PORT, unix:PATH, serial:DEVICE[:BAUD]. Default: $BLEMU_CONTROLLER.")
    var controller: String?

    @Option(name: .customLong("control"), help: ArgumentHelp("The control socket to serve at PATH (required: it is how the host is driven).", valueName: "PATH"))
    var controlPath: String

    @Option(name: .customLong("control-mode"), help: ArgumentHelp("Permissions of the control socket, octal (default 0600).", valueName: "MODE"))
    var controlMode: String = "0600"

    @Option(name: .customLong("state-dir"),
            help: ArgumentHelp("Where the host keeps its static random address (host-random-address; a reset makes a new one). Default: none kept, a new address each start.", valueName: "DIR"))
    var stateDirectory: String?

    @Option(help: "The Device Name the host's own GATT server gives a peer that reads it (default: blemu host).")
    var name: String = "blemu host"

    @Option(help: ArgumentHelp("Where logs go: \(LogDestination.offeredList). Default: auto."))
    var log: LogDestination?

    @Option(name: .customLong("log-level"), help: "trace, debug, info, notice, warning, error or critical. Default: info.")
    var logLevel: Logger.Level?

    @Option(name: .customLong("serve"),
            help: ArgumentHelp("What the links the host's advertisements accept are served: a device (heart-rate, thermostat, ...) or a GATT profile FILE.json, its database, values and behaviour. Default: GAP and GATT alone.", valueName: "DEVICE|FILE"))
    var serve: String?

    @Option(name: .customLong("btsnoop"), help: ArgumentHelp("Write every HCI packet, both ways, to a btsnoop capture at PATH.", valueName: "PATH"))
    var btsnoopPath: String?

    func validate() throws {
        if let serve, serve.isEmpty { throw ValidationError("--serve needs a device name or a profile FILE.json") }
        guard !controlPath.isEmpty else { throw ValidationError("--control needs a path") }
        _ = try parsedControlMode()
        if let stateDirectory, stateDirectory.isEmpty { throw ValidationError("--state-dir needs a directory") }
        if let btsnoopPath, btsnoopPath.isEmpty { throw ValidationError("--btsnoop needs a file path") }
        guard !name.isEmpty, name.utf8.count <= 248 else { throw ValidationError("--name must be 1 to 248 bytes (a GAP Device Name, Vol 3, Part C, 12.1)") }
    }

    private func parsedControlMode() throws -> UInt32 {
        guard !controlMode.isEmpty, controlMode.allSatisfy({ ("0"..."7").contains($0) }),
              let mode = UInt32(controlMode, radix: 8), mode <= 0o777 else {
            throw ValidationError("--control-mode '\(controlMode)' is not an octal permission mode like 0600 or 0660")
        }
        return mode
    }

    func run() throws {
        try LogSetup.bootstrap(destination: log ?? .auto, level: logLevel ?? .info)
        defer { LogSetup.finish() }
        let logger = Logger(label: "blemu")
        let (spec, loop) = try controllerAndLoop(controller)
        let served: Device?
        do {
            served = try serve.map(DevicePlanning.servedDevice)
        } catch {
            throw ValidationError(error.description)
        }
        let stack: ProgrammableHostStack
        do {
            stack = try ProgrammableHostStack(spec: spec, stateDirectory: stateDirectory, name: name, serving: served, loop: loop, logger: logger)
        } catch {
            throw RuntimeFailure(error.description)
        }
        var settings = RunSettings()
        settings.controlPath = controlPath
        settings.controlMode = try parsedControlMode()
        settings.capturePath = btsnoopPath
        do {
            try RunSession.run([stack], deviceNames: ["host"], settings: settings, loop: loop, logger: logger, host: stack.host)
        } catch {
            throw RuntimeFailure(error.description)
        }
    }
}
