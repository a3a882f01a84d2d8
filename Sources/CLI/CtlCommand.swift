import ArgumentParser
import BlemuControl
import BlemuCore

#if canImport(Glibc)
import Glibc
#endif

/// `blemu ctl PATH COMMAND...`: one request to a running blemu's control socket
/// (`blemu run --control PATH`), its reply printed as one JSON line (Docs/CONTROL.md).
struct CtlCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ctl",
        abstract: "Send one command to a running blemu's control socket (blemu run --control PATH) and print the reply.",
        usage: "blemu ctl [--timeout SECONDS] PATH COMMAND...\n  blemu ctl [--timeout SECONDS] PATH --raw JSON\n  blemu ctl PATH watch [DEVICE] [--kinds KIND,...] [--uuid UUID]\n  blemu ctl [--timeout SECONDS] PATH wait EVENT...",
        discussion: """
            Commands:
            \(ControlCommand.usage.split(separator: "\n").map { "  " + $0 }.joined(separator: "\n"))

            DEVICE is a device name (heart-rate) when one copy runs, DEVICE#N for the Nth copy, or a local name. \
            UUID is 2A37, 0x2A37 or the 128-bit form; HEX is 0x13 or 13. A fault without --count lasts until \
            `fault clear`. The reply is printed as one line of JSON; the exit status is 0 when it says "ok": true, \
            1 when it does not or no reply came. --raw sends a request line written by hand, like \
            '{"id":1,"cmd":"list"}'.

            `watch` prints the devices' events as they happen, one JSON line each, until blemu stops or \
            you interrupt it. `\(EventWait.usage)` waits for one event that happens from now on, prints \
            it and exits 0, or exits 1 after --timeout seconds (30 unless given) without it. See Docs/CONTROL.md.
            """)

    @Option(help: "Seconds to wait for the connection and the reply (wait: for the event, 30 unless given).")
    var timeout: Double?

    @Option(help: ArgumentHelp("Send this JSON request line as it is, instead of a COMMAND.", valueName: "JSON"))
    var raw: String?

    @Argument(help: "The control socket, as given to blemu run --control.")
    var path: String

    @Argument(parsing: .captureForPassthrough, help: ArgumentHelp("The command and its arguments (above).", valueName: "COMMAND"))
    var words: [String] = []

    /// What `ctl` does: one request and its reply, a stream of events, or a wait for one.
    enum Action {
        case exchange
        case watch
        case wait(EventWait)
    }

    /// What is sent, how long to wait, and what to do with what comes back.
    private func request() throws -> (line: String, timeout: Double, action: Action) {
        var words = self.words
        var raw = self.raw
        var timeout = try self.timeout.map { try Self.seconds(String($0)) }
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
            return (raw, timeout ?? 5, .exchange)
        }
        if words.first == "wait" {
            var rest = Array(words.dropFirst())
            // --timeout may also come after the event (`wait subscribed 2A37 --timeout 10`).
            if let index = rest.firstIndex(where: { $0 == "--timeout" || $0.hasPrefix("--timeout=") }) {
                let (_, inline) = Self.split(rest[index])
                let value = inline ?? (index + 1 < rest.count ? rest[index + 1] : nil)
                guard let value else { throw ValidationError("--timeout needs a value") }
                timeout = try Self.seconds(value)
                rest.removeSubrange(index..<(inline == nil ? index + 2 : index + 1))
            }
            do {
                let wait = try EventWait(arguments: rest)
                return (EventWaitProgress(wait).request, timeout ?? 30, .wait(wait))
            } catch {
                throw ValidationError(error.description)
            }
        }
        guard !words.isEmpty else {
            throw ValidationError("give a COMMAND or --raw JSON; commands:\n\(ControlCommand.usage.split(separator: "\n").map { "  " + $0 }.joined(separator: "\n"))")
        }
        do {
            let command = try ControlCommand(arguments: words)
            if case .watch = command { return (ControlRequest(id: 1, command: command).json.encoded, timeout ?? 5, .watch) }
            return (ControlRequest(id: 1, command: command).json.encoded, timeout ?? 5, .exchange)
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
        let (line, seconds, action) = try request()
        switch action {
        case .exchange: break
        case .watch: return try watch(line, connectTimeout: seconds)
        case .wait(let wait): return try self.wait(for: wait, seconds: seconds)
        }
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

    /// `watch`: the reply, then every event line, printed as it comes.
    private func watch(_ line: String, connectTimeout seconds: Double) throws {
        var refused = false
        do {
            _ = try ControlClient.stream(path: path, line: line, connectTimeout: .milliseconds(Int64(seconds * 1000)), wait: nil) { text in
                Self.writeLine(text)
                if ControlClient.isOK(text) == false { refused = true }
                return !refused
            }
        } catch {
            throw RuntimeFailure(error.description)
        }
        if refused { throw ExitCode(1) }
    }

    /// `wait`: 0 with the event's line printed when it comes, 1 when the time is up first.
    private func wait(for wait: EventWait, seconds: Double) throws {
        let outcome: ControlClient.WaitOutcome
        do {
            outcome = try ControlClient.wait(for: wait, path: path, timeout: .milliseconds(Int64(seconds * 1000)))
        } catch {
            throw RuntimeFailure(error.description)
        }
        switch outcome {
        case .refused(let reply):
            print(reply)
            throw ExitCode(1)
        case .timedOut:
            throw RuntimeFailure("no \(wait) within \(Self.format(seconds)) s")
        case .happened(let line):
            print(line)
        }
    }

    /// One line straight to standard output (no stdio buffer), so a pipe sees each event as it comes.
    private static func writeLine(_ text: String) {
        let bytes = Array((text + "\n").utf8)
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes { Glibc.write(STDOUT_FILENO, $0.baseAddress, $0.count) }
            if written < 0 && errno == EINTR { continue }
            guard written > 0 else { return }
            offset += written
        }
    }

    private static func format(_ seconds: Double) -> String {
        seconds == seconds.rounded() ? String(Int(seconds)) : String(seconds)
    }
}
