import ArgumentParser
import BlemuTransport
import Foundation
import Testing

@testable import blemu

/// Every blemu command in a code block of README.md and Docs/*.md goes through the real argument
/// parser and its validation (`Blemu.parseAsRoot`: options, devices, settings, the control
/// command), and every `--controller` through the spec parser, so a documented command cannot
/// fail unnoticed. No controller is opened: Tests/interop/test_cli.py runs some of them for real.
@Suite struct DocumentedCommandsTests {
    /// The commands that cannot be validated offline, and why. Each must still be found in the
    /// docs (so a stale entry fails too).
    static let notValidated: [String: String] = [
        "blemu run --config bench.yaml": "reads the user's own bench.yaml, which the docs do not give whole",
        "blemu run heart-rate --controller tcp:127.0.0.1:6402 --scenario heart-rate-app.yaml --seed 42":
            "reads heart-rate-app.yaml, which CONTROL.md gives whole (ScenarioTests' DocumentedScenarioTests reads it)",
        "blemu run scale.json --controller hci0": "serves scale.json, which the dump in the line before writes from a real device",
        "blemu run scale.json --controller hci0 --name \"Scale 2\"": "serves scale.json, which the dump before writes from a real device",
        "blemu run strap.json --controller hci1": "replays strap.json, which the record in the line before writes from a real device",
        "blemu run [DEVICE...] [--config FILE] [--controller SPEC ...] [--share-controller] [--name NAME] [--address ADDR]":
            "a synopsis (REFERENCE.md), not a command",
        "blemu ctl [--timeout SECONDS] PATH COMMAND...": "a synopsis (CONTROL.md), not a command",
        "blemu ctl [--timeout SECONDS] PATH --raw JSON": "a synopsis (CONTROL.md), not a command",
        "blemu ctl [--timeout SECONDS] PATH COMMAND... blemu ctl [--timeout SECONDS] PATH --raw JSON":
            "two synopses on one line (REFERENCE.md), not a command",
        "blemu gatt --controller SPEC (--address A | --name N | --service UUID) COMMAND [--json]": "a synopsis, not a command",
        "blemu ctl [--timeout SECONDS] PATH wait EVENT...": "a synopsis (CONTROL.md), not a command",
        "blemu lint [DEVICE...] [--config FILE] [--name NAME] [--json] [--strict] blemu lint --rules [--json]":
            "two synopses on one line (REFERENCE.md), not a command",
        "blemu ctl PATH watch [DEVICE] [--kinds KIND,...] [--uuid UUID] blemu ctl [--timeout SECONDS] PATH wait EVENT...":
            "two synopses on one line (REFERENCE.md), not a command",
    ]

    @Test func everyDocumentedCommandIsAcceptedByTheArgumentParser() throws {
        let commands = try DocumentedCommands.all()
        // The docs have dozens (CONTROL.md alone twenty): finding few means the extraction broke.
        #expect(commands.count > 40, "only \(commands.count) commands found in the docs")
        var skipped = Set<String>()
        for command in commands {
            if Self.notValidated[command.text] != nil {
                skipped.insert(command.text)
                continue
            }
            #expect(throws: Never.self, "\(command.location): `\(command.text)`") { try Self.validate(command.arguments) }
        }
        #expect(skipped == Set(Self.notValidated.keys), "listed as not validated but not in the docs any more")
    }

    /// DEPLOYMENT.md's `blemu@bench`: /etc/blemu/bench.conf put into the unit's ExecStart, as
    /// systemd expands it (variables split on spaces, %i the instance), with BLEMU_CONTROLLER as
    /// the --controller it stands for. The bench's file is the first in the doc (the fleet's
    /// instances come later), so the first value of each variable is its.
    @Test func theDeploymentBenchUnitIsAValidCommandLine() throws {
        let deployment = try DocumentedCommands.read("Docs/DEPLOYMENT.md")
        var conf: [String: String] = [:]
        for line in deployment.split(separator: "\n") where line.hasPrefix("BLEMU_") {
            let parts = line.split(separator: "=", maxSplits: 1).map(String.init)
            if parts.count == 2, conf[parts[0]] == nil { conf[parts[0]] = parts[1] }
        }
        let controller = try #require(conf["BLEMU_CONTROLLER"])
        let devices = try #require(conf["BLEMU_DEVICES"])
        let options = try #require(conf["BLEMU_OPTIONS"])
        let unit = try DocumentedCommands.read("Docs/systemd/blemu@.service")
        let execStart = try #require(unit.split(separator: "\n").first { $0.hasPrefix("ExecStart=") })
        var arguments: [String] = []
        for word in execStart.dropFirst("ExecStart=".count).split(separator: " ").dropFirst() {
            switch word {
            case "$BLEMU_DEVICES": arguments += devices.split(separator: " ").map(String.init)
            case "$BLEMU_OPTIONS": arguments += options.split(separator: " ").map(String.init)
            default: arguments.append(word.replacingOccurrences(of: "%i", with: "bench"))
            }
        }
        #expect(arguments.contains("--pin") && arguments.contains("lock"), "the bench has a lock and a PIN: \(arguments)")
        try Self.validate(arguments + ["--controller", controller])
    }

    /// CHAT.md's `blemu-chat@kitchen`: /etc/blemu/chat-kitchen.conf put into the chat unit's
    /// ExecStart as systemd expands it, BLEMU_CONTROLLER as the --controller it stands for.
    @Test func theChatServiceUnitIsAValidCommandLine() throws {
        let chat = try DocumentedCommands.read("Docs/CHAT.md")
        var conf: [String: String] = [:]
        for line in chat.split(separator: "\n") where line.hasPrefix("BLEMU_") {
            let parts = line.split(separator: "=", maxSplits: 1).map(String.init)
            if parts.count == 2, conf[parts[0]] == nil { conf[parts[0]] = parts[1] }
        }
        let controller = try #require(conf["BLEMU_CONTROLLER"])
        let options = try #require(conf["BLEMU_CHAT_OPTIONS"])
        let unit = try DocumentedCommands.read("Docs/systemd/blemu-chat@.service")
        let execStart = try #require(unit.split(separator: "\n").first { $0.hasPrefix("ExecStart=") })
        var arguments: [String] = []
        for word in execStart.dropFirst("ExecStart=".count).split(separator: " ").dropFirst() {
            if word == "$BLEMU_CHAT_OPTIONS" {
                arguments += options.split(separator: " ").map(String.init)
            } else {
                arguments.append(word.replacingOccurrences(of: "%i", with: "kitchen"))
            }
        }
        #expect(arguments.first == "chat" && arguments.contains("--room"), "\(arguments)")
        // The instance's directory is the state directory: no --state-dir to override it.
        #expect(!arguments.contains("--state-dir"))
        #expect(unit.contains("\nStateDirectory=blemu/chat-%i\n") && unit.contains("\nStandardInput=null\n"))
        try Self.validate(arguments + ["--controller", controller])
    }

    /// The parser's own validation, then each --controller spec (blemu gatt, scan and chat parse
    /// theirs when they start).
    static func validate(_ arguments: [String]) throws {
        _ = try Blemu.parseAsRoot(arguments)
        for (index, word) in arguments.enumerated() where word == "--controller" && index + 1 < arguments.count {
            _ = try ControllerSpec(parsing: arguments[index + 1])
        }
    }
}

/// A blemu command found in the docs: its text as written (one line, continuations joined) and
/// its arguments after `blemu`, as the shell would pass them.
struct DocumentedCommand {
    var location: String
    var text: String
    var arguments: [String]
}

enum DocumentedCommands {
    static let root: String = {
        "\(#filePath)".split(separator: "/", omittingEmptySubsequences: false).dropLast(3).joined(separator: "/")
    }()

    static func read(_ relativePath: String) throws -> String {
        try String(contentsOfFile: root + "/" + relativePath, encoding: .utf8)
    }

    static let subcommands: Set<String> = ["run", "devices", "ctl", "scan", "gatt", "chat", "bonds", "bench", "lint", "attach"]
    /// Shell variables the examples use, and a value for each.
    static let variables = ["$SOCK": "/tmp/blemu-test.sock"]

    static func all() throws -> [DocumentedCommand] {
        let docs = try FileManager.default.contentsOfDirectory(atPath: root + "/Docs").filter { $0.hasSuffix(".md") }.sorted()
        var commands: [DocumentedCommand] = []
        for file in ["README.md"] + docs.map({ "Docs/" + $0 }) {
            commands += try commandsInCodeBlocks(of: file)
        }
        return commands
    }

    static func commandsInCodeBlocks(of file: String) throws -> [DocumentedCommand] {
        let lines = try read(file).split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        var commands: [DocumentedCommand] = []
        var inBlock = false
        var index = 0
        while index < lines.count {
            let line = lines[index]
            let number = index + 1
            index += 1
            if line.trimmingCharacters(in: .whitespaces).hasPrefix("```") {
                inBlock.toggle()
                continue
            }
            guard inBlock else { continue }
            var joined = line
            while joined.hasSuffix("\\"), index < lines.count {
                joined = String(joined.dropLast()) + " " + lines[index].trimmingCharacters(in: .whitespaces)
                index += 1
            }
            let words = shellWords(joined)
            guard let start = words.firstIndex(where: { $0 == "blemu" || $0.hasSuffix("/blemu") }),
                  start + 1 < words.count, subcommands.contains(words[start + 1]) else { continue }
            var arguments = Array(words[(start + 1)...])
            if let end = arguments.firstIndex(where: isShellOperator) { arguments.removeSubrange(end...) }
            arguments = arguments.map { word in variables.reduce(word) { $0.replacingOccurrences(of: $1.key, with: $1.value) } }
            // The words as written, operators and all (a synopsis's `|` too), quoted where needed.
            let text = (["blemu"] + words[(start + 1)...].map { $0.contains(" ") ? "\"\($0)\"" : $0 }).joined(separator: " ")
            commands.append(DocumentedCommand(location: "\(file):\(number)", text: text, arguments: arguments))
        }
        return commands
    }

    private static func isShellOperator(_ word: String) -> Bool {
        ["|", "||", "&&", "&", ";"].contains(word) || word.hasPrefix(">") || word.hasPrefix("<") || word.hasPrefix("2>")
    }

    /// Words as a POSIX shell splits them: quotes, backslashes, `#` comments, `;` ending a word.
    static func shellWords(_ line: String) -> [String] {
        var words: [String] = []
        var current = ""
        var inWord = false
        var quote: Character?
        var iterator = line.makeIterator()
        while let character = iterator.next() {
            if let open = quote {
                if character == open { quote = nil } else { current.append(character) }
                continue
            }
            switch character {
            case "'", "\"":
                quote = character
                inWord = true
            case "\\":
                if let next = iterator.next() { current.append(next) }
                inWord = true
            case " ", "\t":
                if inWord { words.append(current) }
                current = ""
                inWord = false
            case "#" where !inWord:
                return words
            case ";":
                if inWord { words.append(current) }
                words.append(";")
                current = ""
                inWord = false
            default:
                current.append(character)
                inWord = true
            }
        }
        if inWord { words.append(current) }
        return words
    }
}
