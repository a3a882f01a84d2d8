import ArgumentParser
import Foundation
import Testing

@testable import blemu

/// `blemu run`'s command line through the real parser: what --pin reaches, and that every
/// refusal is a bad command line (exit status 64) found before run() touches a file.
@Suite struct RunCommandLineTests {
    static let controller = ["--controller", "tcp:127.0.0.1:6402"]

    static func parseRun(_ arguments: [String]) throws -> RunCommand {
        try #require(try Blemu.parseAsRoot(["run"] + arguments) as? RunCommand)
    }

    /// The exit status blemu ends with for a command line `arguments`, and the message.
    static func refusal(_ arguments: [String]) -> (status: Int32, message: String)? {
        do {
            _ = try Blemu.parseAsRoot(["run"] + arguments)
            return nil
        } catch {
            return (Blemu.exitCode(for: error).rawValue, Blemu.message(for: error))
        }
    }

    /// `control:`, `log:`, `btsnoop:`, `state_dir:`, … in --config stand in for their options
    /// where the command line gives none; an option given wins over the file.
    @Test func aConfigFilesRunSettingsApplyUnlessAnOptionGivesThem() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("blemu-cli-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let config = directory.appendingPathComponent("site.yaml").path
        try """
            control: ctl.sock
            control_mode: "0660"
            log: stderr
            log_level: debug
            btsnoop: hci.snoop
            btsnoop_max: 1M
            state_dir: state
            devices:
              - device: heart-rate
            """.write(toFile: config, atomically: true, encoding: .utf8)
        let fromFile = try Self.parseRun(["--config", config] + Self.controller)
        #expect(fromFile.controlPath == directory.path + "/ctl.sock")
        #expect(fromFile.controlMode == "0660")
        #expect(fromFile.log == .stderr)
        #expect(fromFile.logLevel == .debug)
        #expect(fromFile.btsnoopPath == directory.path + "/hci.snoop")
        #expect(fromFile.btsnoopMax == "1M")
        #expect(fromFile.stateDirectory == directory.path + "/state")
        let given = try Self.parseRun(["--config", config, "--control", "/tmp/other.sock", "--log", "journal", "--log-level", "error",
                                       "--state-dir", "/tmp/state", "--btsnoop", "/tmp/x.snoop", "--control-mode", "0600"] + Self.controller)
        #expect(given.controlPath == "/tmp/other.sock")
        #expect(given.controlMode == "0600")
        #expect(given.log == .journal)
        #expect(given.logLevel == .error)
        #expect(given.stateDirectory == "/tmp/state")
        #expect(given.btsnoopPath == "/tmp/x.snoop")
        // Without --config nothing changes: the defaults stay the options' own.
        let bare = try Self.parseRun(["heart-rate"] + Self.controller)
        #expect(bare.controlPath == nil && bare.log == nil && bare.logLevel == nil && bare.stateDirectory == nil)
        // A size the capture cannot take is a bad command line naming the key.
        try "btsnoop: hci.snoop\nbtsnoop_max: 1\ndevices:\n  - device: heart-rate\n".write(toFile: config, atomically: true, encoding: .utf8)
        let refused = try #require(Self.refusal(["--config", config] + Self.controller))
        #expect(refused.status == 64)
        #expect(refused.message.contains("btsnoop_max"), "\(refused.message)")
    }

    /// `--replay once|loop` sets how a profile's recorded notifications play, over the file's
    /// `replay`; anything else, or no profile to play, is a bad command line.
    @Test func replayReachesTheProfilesAndOnlyThem() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("blemu-cli-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let profile = directory.appendingPathComponent("twin.json").path
        try #"{"format":"blemu-gatt-profile","version":1,"name":"Twin","replay":"loop","services":[{"uuid":"180F","characteristics":[{"uuid":"2A19","properties":["read"],"value":"50"}]}]}"#
            .write(toFile: profile, atomically: true, encoding: .utf8)
        let plans = try Self.parseRun([profile, "heart-rate", "--replay", "once"] + Self.controller).devicePlans()
        #expect(plans.map { $0.profile?.replay } == ["once", nil])
        #expect(try Self.parseRun([profile] + Self.controller).devicePlans().first?.profile?.replay == "loop")
        let twice = try #require(Self.refusal([profile, "--replay", "twice"] + Self.controller))
        #expect(twice.status == 64 && twice.message.contains("--replay is loop or once"), "\(twice.message)")
        let noProfile = try #require(Self.refusal(["heart-rate", "--replay", "once"] + Self.controller))
        #expect(noProfile.status == 64 && noProfile.message.contains("for a recorded device"), "\(noProfile.message)")
    }

    /// A profile with a key its format does not define (a misspelt permission would serve the
    /// value unprotected) is a bad command line (64) naming the file and the key's path.
    @Test func aProfileWithAnUnknownKeyIsABadCommandLineWithItsPath() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("blemu-cli-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let profile = directory.appendingPathComponent("lock.json").path
        try #"{"format":"blemu-gatt-profile","version":1,"name":"Lock","services":[{"uuid":"180F","characteristics":[{"uuid":"2A19","properties":["read"],"value":"50","permisions":["read-encrypted"]}]}]}"#
            .write(toFile: profile, atomically: true, encoding: .utf8)
        let refused = try #require(Self.refusal([profile] + Self.controller))
        #expect(refused.status == 64)
        #expect(refused.message.contains("\(profile): services[0].characteristics[0].permisions: unknown key (did you mean permissions?"),
                "\(refused.message)")
    }

    /// A scenario file that is not one is a bad command line (64) told with FILE:LINE, before
    /// run(). A mistake in a step is told by run() before any controller opens, together with
    /// the steps' checks against the devices (every mistake in one run: interop
    /// test_every_mistake_is_told_before_anything_starts_values_checked_against_the_device).
    @Test func aScenarioWithAMistakeIsABadCommandLineWithItsLine() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("blemu-cli-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("app.yaml").path
        try "device: heart-rate\nsteps: nope\n".write(toFile: path, atomically: true, encoding: .utf8)
        let refused = try #require(Self.refusal(["heart-rate", "--scenario", path] + Self.controller))
        #expect(refused.status == 64)
        #expect(refused.message.contains("\(path):2: steps: expected a list"), "\(refused.message)")
        // A step's mistake is kept for run(), with its line.
        try "steps:\n  - wait: connected\n  - wait: bonded\n".write(toFile: path, atomically: true, encoding: .utf8)
        #expect(Self.refusal(["heart-rate", "--scenario", path] + Self.controller) == nil, "told by run(), with the device checks")
        try "steps:\n  - wait: connected\n".write(toFile: path, atomically: true, encoding: .utf8)
        #expect(Self.refusal(["heart-rate", "--scenario", path] + Self.controller) == nil)
        // A device's `scenario:` in --config too, with its own file and line.
        let config = directory.appendingPathComponent("bench.yaml").path
        try "devices:\n  - device: heart-rate\n    scenario: bad.yaml\n".write(toFile: config, atomically: true, encoding: .utf8)
        let bad = directory.appendingPathComponent("bad.yaml").path
        try "steps: []\n".write(toFile: bad, atomically: true, encoding: .utf8)
        let refusedByConfig = try #require(Self.refusal(["--config", config] + Self.controller))
        #expect(refusedByConfig.status == 64)
        #expect(refusedByConfig.message.contains("\(bad):1: steps: the list is empty"), "\(refusedByConfig.message)")
    }

    @Test func seedGivesEachDeviceItsOwnSeedTheSameEveryTime() throws {
        let plans = try Self.parseRun(["heart-rate", "heart-rate", "--seed", "42"] + Self.controller).devicePlans()
        let again = try Self.parseRun(["heart-rate", "heart-rate", "--seed", "42"] + Self.controller).devicePlans()
        #expect(plans.map(\.seed) == again.map(\.seed))
        #expect(plans[0].seed != nil && plans[0].seed != plans[1].seed)
        #expect(try Self.parseRun(["heart-rate"] + Self.controller).devicePlans()[0].seed == nil)
        #expect(Self.refusal(["heart-rate", "--seed", "-1"] + Self.controller)?.status == 64)
    }

    @Test func pinWithSeveralDevicesReachesTheLockOnly() throws {
        let command = try Self.parseRun(["heart-rate", "thermostat", "lock", "--pin", "2468"] + Self.controller)
        let plans = try command.devicePlans()
        #expect(plans.map(\.device) == ["heart-rate", "thermostat", "lock"])
        #expect(plans[0].settings.isEmpty && plans[1].settings.isEmpty)
        #expect(plans[2].settings.map(\.key) == ["pin"])
        #expect(plans[2].settings.map(\.value) == ["2468"])
    }

    @Test func pinReachesEveryLock() throws {
        let plans = try Self.parseRun(["lock", "heart-rate", "lock", "--pin", "13579"] + Self.controller).devicePlans()
        #expect(plans.map { $0.settings.map(\.value) } == [["13579"], [], ["13579"]])
    }

    @Test func pinWithNoDeviceThatTakesOneIsABadCommandLine() throws {
        let refused = try #require(Self.refusal(["heart-rate", "thermostat", "--pin", "2468"] + Self.controller))
        #expect(refused.status == 64)
        #expect(refused.message.contains("--pin") && refused.message.contains("lock"), "\(refused.message)")
    }

    /// --bindkey-file reaches the BTHome devices only; a run without one, a missing file or one
    /// that holds no key is a bad command line (64), found before anything starts.
    @Test func bindkeyFileReachesTheBTHomeDevicesAndABadOneIsABadCommandLine() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("blemu-cli-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let good = directory.appendingPathComponent("good.key").path
        try "231d39c1d7cc1ab1aee224cd096db932\n".write(toFile: good, atomically: true, encoding: .utf8)
        let bad = directory.appendingPathComponent("bad.key").path
        try "not a key".write(toFile: bad, atomically: true, encoding: .utf8)

        let plans = try Self.parseRun(["bthome-thermometer", "heart-rate", "bthome-door", "--bindkey-file", good] + Self.controller).devicePlans()
        #expect(plans.map(\.bindkeyFile) == [good, nil, good])
        for (arguments, fragment) in [(["heart-rate", "--bindkey-file", good], "encrypts"),
                                      (["bthome-door", "--bindkey-file", bad], "32 hex digits"),
                                      (["bthome-door", "--bindkey-file", directory.appendingPathComponent("none").path], "cannot read")] {
            let refused = try #require(Self.refusal(arguments + Self.controller))
            #expect(refused.status == 64)
            #expect(refused.message.contains("--bindkey-file") && refused.message.contains(fragment), "\(refused.message)")
            // The key's text never reaches the message.
            #expect(!refused.message.contains("not a key"))
        }
    }

    /// `--passkey DEVICE=DIGITS` is one device's; bare `--passkey DIGITS` every device's (the
    /// contract); a malformed one, or one for a device that does not run, is a bad command line.
    @Test func aPasskeyNamedForADeviceReachesThatDeviceAlone() throws {
        let named = try Self.parseRun(["lock", "thermostat", "--passkey", "lock=123456"] + Self.controller).devicePlans()
        #expect(named.map(\.passkey) == ["123456", nil])
        let both = try Self.parseRun(["lock", "thermostat", "--passkey", "lock=123456", "--passkey", "thermostat=654321"]
                                     + Self.controller).devicePlans()
        #expect(both.map(\.passkey) == ["123456", "654321"])
        let bare = try Self.parseRun(["lock", "thermostat", "--passkey", "123456"] + Self.controller).devicePlans()
        #expect(bare.map(\.passkey) == ["123456", "123456"])
        for (arguments, fragment) in [(["thermostat", "--passkey", "lock=123456"], "no such device runs (thermostat)"),
                                      (["lock", "--passkey", "lock=1234"], "a passkey is 6 digits"),
                                      (["lock", "--passkey", "12345x"], "--passkey must be 6 digits")] {
            let refused = try #require(Self.refusal(arguments + Self.controller))
            #expect(refused.status == 64)
            #expect(refused.message.contains(fragment), "\(refused.message)")
        }
    }

    @Test func aBadPINIsABadCommandLine() throws {
        let refused = try #require(Self.refusal(["lock", "--pin", "24x8"] + Self.controller))
        #expect(refused.status == 64)
    }

    /// A file's `pin:` for a device that takes none was refused in run(), after the passkey of a
    /// lock before it had been written: now validation refuses it (64), and run() never starts.
    @Test func aSettingRefusedByItsDeviceIsABadCommandLine() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("blemu-cli-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let config = directory.appendingPathComponent("bench.yaml").path
        try """
            controller: tcp:127.0.0.1:6402
            devices:
              - device: lock
              - device: heart-rate
                pin: "2468"
            """.write(toFile: config, atomically: true, encoding: .utf8)
        let refused = try #require(Self.refusal(["--config", config]))
        #expect(refused.status == 64)
        #expect(refused.message.contains("heart-rate"), "\(refused.message)")
    }

    /// A config entry's `bindkey_file:` is the file's folder's when relative, reaches its own
    /// BTHome device, and is refused (64) for a device that does not encrypt.
    @Test func aConfigEntrysBindkeyFileIsRelativeToTheFileAndOnlyForBTHome() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("blemu-cli-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        try "231d39c1d7cc1ab1aee224cd096db932".write(toFile: directory.appendingPathComponent("door.key").path,
                                                     atomically: true, encoding: .utf8)
        let good = directory.appendingPathComponent("good.yaml").path
        try """
            controller: tcp:127.0.0.1:6402
            devices:
              - device: bthome-door
                bindkey_file: door.key
              - device: bthome-thermometer
            """.write(toFile: good, atomically: true, encoding: .utf8)
        let plans = try Self.parseRun(["--config", good]).devicePlans()
        #expect(plans.map(\.bindkeyFile) == [directory.appendingPathComponent("door.key").path, nil])

        let bad = directory.appendingPathComponent("bad.yaml").path
        try """
            controller: tcp:127.0.0.1:6402
            devices:
              - device: heart-rate
                bindkey_file: door.key
            """.write(toFile: bad, atomically: true, encoding: .utf8)
        let refused = try #require(Self.refusal(["--config", bad]))
        #expect(refused.status == 64)
        #expect(refused.message.contains("bindkey_file") && refused.message.contains("does not encrypt"), "\(refused.message)")
    }
}
