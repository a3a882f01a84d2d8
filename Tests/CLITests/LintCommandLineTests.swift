import ArgumentParser
import BlemuCore
import BlemuLint
import Foundation
import Testing

@testable import blemu

/// `blemu lint` through the real parser: the exit status with and without --strict, and the
/// shape of --json.
@Suite struct LintCommandLineTests {
    /// A recorded device whose advertising data is a name alone: no Flags, no service.
    static let unflaggedProfile = """
        {"format": "blemu-gatt-profile", "version": 1, "name": "Bare", "advertisedServices": ["180F"],
         "advertisingData": "050942617265",
         "services": [{"uuid": "180F", "characteristics": [{"uuid": "2A19", "properties": ["read"], "value": "5a"}]}]}
        """

    /// The exit status `blemu lint arguments` ends with (0 when run() returns).
    static func status(_ arguments: [String]) throws -> Int32 {
        var command = try Blemu.parseAsRoot(["lint"] + arguments)
        do {
            try command.run()
            return 0
        } catch {
            return Blemu.exitCode(for: error).rawValue
        }
    }

    /// A temporary folder with the profile; remove it when done.
    static func profileFile() throws -> (path: String, folder: URL) {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("blemu-lint-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let path = folder.appendingPathComponent("bare.json").path
        try unflaggedProfile.write(toFile: path, atomically: true, encoding: .utf8)
        return (path, folder)
    }

    @Test func aFailedRuleExitsWithOneOnlyWithStrict() throws {
        let (path, folder) = try Self.profileFile()
        defer { try? FileManager.default.removeItem(at: folder) }
        #expect(try Self.status([path]) == 0)
        #expect(try Self.status([path, "--strict"]) == 1)
        #expect(try Self.status([path, "--json", "--strict"]) == 1)
        // The built-in devices pass: --strict changes nothing.
        #expect(try Self.status(["heart-rate", "ibeacon", "--strict"]) == 0)
    }

    @Test func jsonHasEachDeviceItsAdvertisementsAndTheRulesTheyFail() throws {
        let (path, folder) = try Self.profileFile()
        defer { try? FileManager.default.removeItem(at: folder) }
        let command = try #require(try Blemu.parseAsRoot(["lint", "heart-rate", path, "--json"]) as? LintCommand)
        let json = LintCommand.json(try command.checks())
        guard case .array(let devices)? = json["devices"] else {
            Issue.record("no devices array: \(json.encoded)")
            return
        }
        #expect(devices.count == 2)
        #expect(json["failed"]?.encoded == "1")
        let heart = devices[0], bare = devices[1]
        #expect(heart["device"]?.encoded == "\"heart-rate\"")
        guard case .array(let advertisements)? = heart["advertisements"], let first = advertisements.first else {
            Issue.record("no advertisements: \(heart.encoded)")
            return
        }
        for key in ["connectable", "pdus", "interval", "advertising_data", "scan_response"] {
            #expect(first[key] != nil, "advertisement without \(key): \(first.encoded)")
        }
        #expect(heart["findings"]?.encoded == "[]")
        guard case .array(let findings)? = bare["findings"] else {
            Issue.record("no findings: \(bare.encoded)")
            return
        }
        let rules = findings.compactMap { finding -> String? in
            guard case .string(let rule)? = finding["rule"] else { return nil }
            #expect(finding["severity"] != nil && finding["message"] != nil && finding["source"] != nil)
            return rule
        }
        #expect(rules.contains("flags") && rules.contains("primary-service"))
    }

    @Test func rulesListsEveryRuleAndTakesNoDevices() throws {
        #expect(try Self.status(["--rules"]) == 0)
        #expect(LintCommand.text(rules: AdvertisingLint.rules).count == AdvertisingLint.rules.count)
        #expect(throws: (any Error).self) { try Blemu.parseAsRoot(["lint", "--rules", "heart-rate"]) }
    }
}
