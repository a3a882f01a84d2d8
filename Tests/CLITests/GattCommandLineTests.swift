import ArgumentParser
import BlemuCentral
import BlemuCore
@testable import BlemuGATTClient
import BlemuGATTText
import Testing

@testable import blemu

/// `blemu gatt shell` and its lines' commands through the real parser; `scan --table`'s refusals.
@Suite struct GattCommandLineTests {
    static func refusal(_ command: String, _ arguments: [String]) -> Int32? {
        do {
            _ = try Blemu.parseAsRoot([command, "--controller", "tcp:127.0.0.1:6402"] + arguments)
            return nil
        } catch {
            return Blemu.exitCode(for: error).rawValue
        }
    }

    @Test func shellParsesAndTakesNoArgumentsOrPerCommandOptions() throws {
        let command = try #require(try Blemu.parseAsRoot(["gatt", "--controller", "tcp:127.0.0.1:6402", "--name", "HR", "shell", "--json"])
                                   as? GattCommand)
        #expect(try command.action() == .shell)
        #expect(Self.refusal("gatt", ["--name", "HR", "shell", "2A19"]) == 64)
        #expect(Self.refusal("gatt", ["--name", "HR", "shell", "--count", "3"]) == 64)
        #expect(Self.refusal("gatt", ["--name", "HR", "shell", "--text", "hi"]) == 64)
        #expect(Self.refusal("gatt", ["--name", "HR", "shell", "--profile"]) == 64)
    }

    @Test func recordTakesADurationAndNothingElse() throws {
        let command = try #require(try Blemu.parseAsRoot(["gatt", "--controller", "tcp:127.0.0.1:6402", "--name", "HR", "record", "--duration", "4"])
                                   as? GattCommand)
        #expect(try command.action() == .record(4))
        let plain = try #require(try Blemu.parseAsRoot(["gatt", "--controller", "tcp:127.0.0.1:6402", "--name", "HR", "record"]) as? GattCommand)
        #expect(try plain.action() == .record(10))
        #expect(Self.refusal("gatt", ["--name", "HR", "record", "2A37"]) == 64)
        #expect(Self.refusal("gatt", ["--name", "HR", "record", "--duration", "0"]) == 64)
        #expect(Self.refusal("gatt", ["--name", "HR", "record", "--duration", "3601"]) == 64)
        #expect(Self.refusal("gatt", ["--name", "HR", "dump", "--duration", "4"]) == 64)
        // Not a shell line: a recording is a whole run.
        #expect(throws: (any Error).self) { try GattCommand.action(command: "record", arguments: [], text: nil, inShell: true) }
    }

    @Test func aShellLinesCommandsAreTheCommandLinesAndUnsubscribe() throws {
        let uuid = CharacteristicReference.uuid(BluetoothUUID(0x2A19))
        #expect(try GattCommand.action(command: "read", arguments: ["2A19"], text: nil, inShell: true) == .read([uuid]))
        #expect(try GattCommand.action(command: "write", arguments: ["2A19", "0aff"], text: nil, inShell: true) == .write(uuid, [0x0A, 0xFF]))
        #expect(try GattCommand.action(command: "write", arguments: ["2A19"], text: "a b", inShell: true) == .write(uuid, Array("a b".utf8)))
        #expect(try GattCommand.action(command: "write", arguments: ["2A19", "01", "2A39", "0203"], text: nil, inShell: true)
                == .writes([.init(target: uuid, value: [0x01]), .init(target: .uuid(BluetoothUUID(0x2A39)), value: [0x02, 0x03])]))
        #expect(throws: ValidationError.self) { try GattCommand.action(command: "write", arguments: ["2A19", "01", "2A39"], text: nil, inShell: true) }
        #expect(throws: ValidationError.self) { try GattCommand.action(command: "write", arguments: ["2A19", "01", "2A19", "02"], text: nil, inShell: true) }
        #expect(try GattCommand.action(command: "unsubscribe", arguments: ["2A19"], text: nil, inShell: true) == .unsubscribe(uuid))
        // Not on the command line, and nothing else new there.
        #expect(throws: ValidationError.self) { try GattCommand.action(command: "unsubscribe", arguments: ["2A19"], text: nil) }
        #expect(throws: ValidationError.self) { try GattCommand.action(command: "read", arguments: ["2A19", "x"], text: nil, inShell: true) }
        #expect(throws: ValidationError.self) { try GattCommand.action(command: "read", arguments: ["2A1"], text: nil, inShell: true) }
        #expect(throws: ValidationError.self) { try GattCommand.action(command: "write", arguments: ["2A19", "zz"], text: nil, inShell: true) }
        #expect(throws: ValidationError.self) { try GattCommand.action(command: "shell", arguments: [], text: nil, inShell: true) }
    }

    /// A characteristic is named by UUID, by a value handle (`0x0014`: a 16-bit UUID the
    /// peripheral has wins) or by the name `dump` shows, in any case and spacing; a shell line
    /// keeps a quoted name of several words as one.
    @Test func aCharacteristicIsNamedByUUIDHandleOrName() throws {
        func characteristic(_ uuid: UInt16, _ valueHandle: UInt16) -> RemoteCharacteristic {
            RemoteCharacteristic(characteristic: DiscoveredCharacteristic(uuid: BluetoothUUID(uuid), properties: [.read],
                                                                          declarationHandle: valueHandle - 1, valueHandle: valueHandle,
                                                                          endHandle: valueHandle), descriptors: [])
        }
        let services = [RemoteService(service: DiscoveredService(uuid: BluetoothUUID(0x180F), handles: 0x0010...0x0016),
                                      includes: [], characteristics: [characteristic(0x2A19, 0x0012), characteristic(0x2A00, 0x0014)])]
        func resolved(_ text: String) -> UInt16? {
            guard let reference = CharacteristicReference(text), case .success(let found) = reference.resolve(in: services) else { return nil }
            return found.valueHandle
        }
        #expect(resolved("2A19") == 0x0012 && resolved("0x2A19") == 0x0012)
        #expect(resolved("0x0014") == 0x0014 && resolved("0x14") == 0x0014)
        #expect(resolved("Battery Level") == 0x0012 && resolved("battery-level") == 0x0012 && resolved("BATTERY_LEVEL") == 0x0012)
        #expect(resolved("device-name") == 0x0014)
        #expect(resolved("0x0013") == nil && resolved("heart-rate-measurement") == nil)
        guard case .failure(let why)? = CharacteristicReference("0x0099")?.resolve(in: services) else { Issue.record("0x0099 resolved"); return }
        #expect(why.description.hasPrefix("has no characteristic 0x0099"))
        #expect(try GattCommand.action(command: "read", arguments: GattShell.words(#"read "Battery Level" 0x0014"#).dropFirst().map { $0 },
                                       text: nil, inShell: true) == .read([.name("battery-level"), .number(0x0014)]))
        #expect(GattShell.words("  write\t2A19   01 ") == ["write", "2A19", "01"])
        #expect(GattShell.words(#"read """#) == ["read", ""])
    }

    /// `read UUID UUID...` (the reads spread over the bearers) and `--eatt auto|off|require`.
    @Test func readTakesSeveralUUIDsAndEATTItsMode() throws {
        let command = try #require(try Blemu.parseAsRoot(["gatt", "--controller", "tcp:127.0.0.1:6402", "--name", "HR",
                                                          "read", "2A00", "2A38", "--eatt", "require"]) as? GattCommand)
        #expect(try command.action() == .read([.uuid(BluetoothUUID(0x2A00)), .uuid(BluetoothUUID(0x2A38))]))
        #expect(command.eatt == .require)
        let plain = try #require(try Blemu.parseAsRoot(["gatt", "--controller", "tcp:127.0.0.1:6402", "--name", "HR", "dump"]) as? GattCommand)
        #expect(plain.eatt == .auto)
        #expect(Self.refusal("gatt", ["--name", "HR", "dump", "--eatt", "sometimes"]) == 64)
        #expect(Self.refusal("gatt", ["--name", "HR", "read"]) == 64)
    }

    @Test func theScanTableIsNotForScripts() {
        #expect(Self.refusal("scan", ["--table"]) == nil)
        #expect(Self.refusal("scan", ["--table", "--json"]) == 64)
        #expect(Self.refusal("scan", ["--table", "--periodic"]) == 64)
        #expect(Self.refusal("scan", ["--table", "--watch", "54:48:E6:8F:80:A5"]) == 64)
    }
}
