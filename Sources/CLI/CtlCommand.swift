import ArgumentParser
import BlemuControl
import BlemuCore

/// `blemu ctl PATH COMMAND...`: one request to a running blemu's control socket
/// (`blemu run --control PATH`), its reply printed as one JSON line (Docs/CONTROL.md).
struct CtlCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ctl",
        abstract: "Send one command to a running blemu's control socket (blemu run --control PATH) and print the reply.",
        usage: "blemu ctl [--timeout SECONDS] PATH COMMAND...\n  blemu ctl [--timeout SECONDS] PATH --raw JSON",
        discussion: """
            Commands:
            \(ControlCommand.usage.split(separator: "\n").map { "  " + $0 }.joined(separator: "\n"))

            DEVICE is a device name (heart-rate) when one copy runs, DEVICE#N for the Nth copy, or a local name. \
            UUID is 2A37, 0x2A37 or the 128-bit form; HEX is 0x13 or 13. A fault without --count lasts until \
            `fault clear`. The reply is printed as one line of JSON; the exit status is 0 when it says "ok": true, \
            1 when it does not or no reply came. --raw sends a request line written by hand, like \
            '{"id":1,"cmd":"list"}'. See Docs/CONTROL.md.
            """)

    @Option(help: "Seconds to wait for the connection and the reply.")
    var timeout: Double = 5

    @Option(help: ArgumentHelp("Send this JSON request line as it is, instead of a COMMAND.", valueName: "JSON"))
    var raw: String?

    @Argument(help: "The control socket, as given to blemu run --control.")
    var path: String

    @Argument(parsing: .captureForPassthrough, help: ArgumentHelp("The command and its arguments (above).", valueName: "COMMAND"))
    var words: [String] = []

    /// What is sent, and how long to wait for the reply.
    private func request() throws -> (line: String, timeout: Double) {
        var words = self.words
        var raw = self.raw
        var timeout = try Self.seconds(String(self.timeout))
        // Options after PATH are captured with the command; take the leading ones back.
        while let first = words.first, first.hasPrefix("--raw") || first.hasPrefix("--timeout") {
            let (name, inline) = Self.split(first)
            words.removeFirst()
            guard let value = inline ?? (words.isEmpty ? nil : words.removeFirst()) else {
                throw ValidationError("\(name) needs a value")
            }
            switch name {
            case "--raw": raw = value
            case "--timeout": timeout = try Self.seconds(value)
            default: throw ValidationError("unknown option \(name)")
            }
        }
        if let raw {
            guard words.isEmpty else { throw ValidationError("--raw sends its JSON alone: no COMMAND with it") }
            guard !raw.utf8.contains(UInt8(ascii: "\n")) else {
                throw ValidationError("--raw takes one request line: no newline in it")
            }
            return (raw, timeout)
        }
        guard !words.isEmpty else {
            throw ValidationError("give a COMMAND or --raw JSON; commands:\n\(ControlCommand.usage.split(separator: "\n").map { "  " + $0 }.joined(separator: "\n"))")
        }
        do {
            let command = try ControlCommand(arguments: words)
            return (ControlRequest(id: 1, command: command).json.encoded, timeout)
        } catch {
            throw ValidationError(error.description)
        }
    }

    private static func split(_ word: String) -> (String, String?) {
        guard let equals = word.firstIndex(of: "=") else { return (word, nil) }
        return (String(word[..<equals]), String(word[word.index(after: equals)...]))
    }

    private static func seconds(_ text: String) throws -> Double {
        guard let value = Double(text), value > 0, value <= 3600 else {
            throw ValidationError("--timeout takes seconds, more than 0 and at most 3600, not '\(text)'")
        }
        return value
    }

    func validate() throws {
        _ = try request()
    }

    func run() throws {
        let (line, seconds) = try request()
        let reply: String
        do {
            reply = try ControlClient.exchange(path: path, line: line, timeout: .milliseconds(Int64(seconds * 1000)))
        } catch {
            throw RuntimeFailure(error.description)
        }
        print(reply)
        guard let ok = ControlClient.isOK(reply) else {
            throw RuntimeFailure("\(path): the reply is not a control reply (no \"ok\"); is this a blemu control socket?")
        }
        if !ok { throw ExitCode(1) }
    }
}
