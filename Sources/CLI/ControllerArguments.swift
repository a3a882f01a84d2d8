import ArgumentParser
import BlemuCore
import BlemuRunLoop
import BlemuStack
import BlemuTransport
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// The controller spec of a command that runs one controller (`--controller`, else
/// `$BLEMU_CONTROLLER`) and the run loop it runs on.
func controllerAndLoop(_ specText: String?) throws -> (ControllerSpec, RunLoop) {
    let text = specText ?? getenv("BLEMU_CONTROLLER").map { String(cString: $0) }
    guard let text, !text.isEmpty else {
        throw ValidationError("give --controller SPEC (hciN, tcp:HOST:PORT, netsim[:INSTANCE], unix:PATH, serial:DEVICE[:BAUD]) or set BLEMU_CONTROLLER")
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

/// Writes one line to stdout at once (write(2), no buffering), so a pipe sees each update as
/// it happens.
func emitLine(_ line: String) { writeLine(line, to: 1) }

/// A line for the person at the terminal (pairing prompts and notes), on stderr, so stdout
/// keeps only values.
func emitNote(_ line: String) { writeLine("blemu gatt: " + line, to: 2) }

/// A line on stderr, as it is given.
func emitStderr(_ line: String) { writeLine(line, to: 2) }

/// A prompt on stderr, without a newline (`blemu gatt ... shell` at a terminal).
func emitPrompt(_ prompt: String) { writeText(prompt, to: 2) }

private func writeLine(_ line: String, to fd: Int32) { writeText(line + "\n", to: fd) }

private func writeText(_ text: String, to fd: Int32) {
    var text = text
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

extension CentralSession {
    /// A session on `--controller` (nil: `$BLEMU_CONTROLLER`) with a run loop of its own.
    convenience init(controller specText: String?, logger: Logger) throws {
        let (spec, loop) = try controllerAndLoop(specText)
        try self.init(spec: spec, loop: loop, logger: logger)
    }
}
