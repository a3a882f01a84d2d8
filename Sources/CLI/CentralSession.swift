import ArgumentParser
import BlemuCentral
import BlemuCore
import BlemuRunLoop
import BlemuTransport
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// One controller in the central role for a command that runs until it is done or
/// interrupted (`blemu scan`, `blemu gatt`): the run loop, the transport and a `CentralHost`.
final class CentralSession {
    let loop: RunLoop
    let link: ControllerLink
    let host: CentralHost
    let logger: Logger
    /// Why the session failed: the first failure reported before it began to finish. What
    /// happens during the stop (its own disconnections, reason 0x16) is the stop, not a
    /// failure: a Ctrl-C ends with exit status 0.
    private(set) var failure: String?
    private(set) var finishing = false
    private var wasUp = false

    /// `specText` nil: `$BLEMU_CONTROLLER`.
    init(controller specText: String?, logger: Logger) throws {
        let spec: ControllerSpec
        (spec, loop) = try controllerAndLoop(specText)
        self.logger = logger
        let link = ControllerLink(spec: spec, loop: loop)
        self.link = link
        do {
            host = try CentralHost(controller: spec.description, scheduler: loop, logger: logger) { type, packet in
                guard let packetType = H4PacketType(rawValue: type) else { return false }
                return link.send(packetType, packet)
            }
        } catch {
            throw RuntimeFailure("the central's own GATT database: \(error)")
        }
        link.onPacket = { [unowned self] type, packet in self.host.receive(packetType: type.rawValue, packet: packet) }
        link.onUp = { [unowned self] in
            self.wasUp = true
            self.host.controllerUp()
        }
        link.onDown = { [unowned self] error in
            self.host.controllerDown(reason: error.description)
            self.finish(failure: "controller lost: \(error)")
        }
        link.onOpenFailed = { [unowned self] error, _ in
            if !self.wasUp { self.finish(failure: error.description) }
        }
    }

    /// Runs until `finish`; throws the failure it was given, if any.
    func run() throws {
        do {
            try loop.handleSignals([SIGINT, SIGTERM]) { [unowned self] _ in
                if self.finishing { Glibc.exit(130) }
                self.finish()
            }
        } catch {
            throw RuntimeFailure("cannot handle signals: \(error)")
        }
        link.start()
        loop.run()
        if let failure { throw RuntimeFailure(failure) }
    }

    /// Ends the session: links closed, the controller reset, the loop stopped.
    func finish(failure: String? = nil) {
        guard !finishing else { return }
        if let failure { self.failure = failure }
        finishing = true
        host.stop { [link, loop] in
            link.stop()
            loop.stop()
        }
    }

    /// Ends the session after `seconds`.
    func finish(after seconds: Double, failure: String? = nil) {
        loop.schedule(after: .milliseconds(Int64(seconds * 1000))) { [weak self] in self?.finish(failure: failure) }
    }
}

/// The controller spec of a command that runs one controller (`--controller`, else
/// `$BLEMU_CONTROLLER`) and the run loop it runs on.
func controllerAndLoop(_ specText: String?) throws -> (ControllerSpec, RunLoop) {
    let text = specText ?? getenv("BLEMU_CONTROLLER").map { String(cString: $0) }
    guard let text, !text.isEmpty else {
        throw ValidationError("give --controller SPEC (hciN, tcp:HOST:PORT, unix:PATH, serial:DEVICE[:BAUD]) or set BLEMU_CONTROLLER")
    }
    let spec: ControllerSpec
    do { spec = try ControllerSpec(parsing: text) } catch { throw ValidationError(error.description) }
    do { return (spec, try RunLoop()) } catch { throw RuntimeFailure("cannot start the run loop: \(error)") }
}

/// The controller specs of a command that may run several (`--controller` repeated, else
/// `$BLEMU_CONTROLLER`) and the one run loop they all run on.
func controllersAndLoop(_ specTexts: [String]) throws -> ([ControllerSpec], RunLoop) {
    guard let first = specTexts.first else {
        let (spec, loop) = try controllerAndLoop(nil)
        return ([spec], loop)
    }
    let (firstSpec, loop) = try controllerAndLoop(first)
    var specs = [firstSpec]
    for text in specTexts.dropFirst() {
        do { specs.append(try ControllerSpec(parsing: text)) } catch { throw ValidationError(error.description) }
    }
    for (index, spec) in specs.enumerated() where specs[..<index].contains(where: { $0.description == spec.description }) {
        throw ValidationError("--controller \(spec) is given twice")
    }
    return (specs, loop)
}

/// SIGINT and SIGTERM begin a clean stop; a second one exits at once (130).
func stopOnSignals(_ loop: RunLoop, isStopping: @escaping () -> Bool, stop: @escaping () -> Void) throws {
    do {
        try loop.handleSignals([SIGINT, SIGTERM]) { _ in
            if isStopping() { Glibc.exit(130) }
            stop()
        }
    } catch {
        throw RuntimeFailure("cannot handle signals: \(error)")
    }
}

/// Writes one line to stdout at once (write(2), no buffering), so a pipe sees each update as
/// it happens.
func emitLine(_ line: String) { writeLine(line, to: 1) }

/// A line for the person at the terminal (pairing prompts and notes), on stderr, so stdout
/// keeps only values.
func emitNote(_ line: String) { writeLine("blemu gatt: " + line, to: 2) }

private func writeLine(_ line: String, to fd: Int32) {
    var text = line + "\n"
    text.withUTF8 { buffer in
        var offset = 0
        while offset < buffer.count {
            let n = write(fd, buffer.baseAddress! + offset, buffer.count - offset)
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { break }
            offset += n
        }
    }
}
