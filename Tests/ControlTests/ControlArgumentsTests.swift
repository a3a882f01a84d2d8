import BlemuATT
import BlemuCore
import Testing
@testable import BlemuControl

/// `blemu ctl PATH COMMAND...` words become the same commands the server decodes.
@Suite struct ControlArgumentsTests {
    private func parse(_ words: String...) throws -> ControlCommand { try ControlCommand(arguments: words) }

    private func refusal(_ words: String..., sourceLocation: SourceLocation = #_sourceLocation) -> String {
        do {
            let command = try ControlCommand(arguments: words)
            Issue.record("accepted \(words) as \(command)", sourceLocation: sourceLocation)
            return ""
        } catch {
            return error.message
        }
    }

    @Test func notifyAndExactMistakes() {
        #expect(refusal("notify", "heart-rate", "2A37") == "usage: notify DEVICE UUID HEX")
        #expect(refusal("notify", "heart-rate", "2A37", "0") == "the value '0' is not hex bytes like 0096 (two digits a byte)")
        #expect(refusal("notify", "heart-rate", "2A37", String(repeating: "00", count: 513))
                == "the value is 513 bytes long; an attribute value is at most 512 bytes (Vol 3, Part F, 3.2.9)")
        #expect(refusal("notify", "heart-rate", "zz", "00").contains("is not a UUID"))
        #expect(refusal("notify", "heart-rate", "2A37", "00", "--exact") == "notify takes no --exact; usage: notify DEVICE UUID HEX")
        #expect(refusal("set", "heart-rate", "bpm", "150", "--exact", "--exact") == "--exact given twice")
        #expect(refusal("advertise", "heart-rate", "on", "--exact").contains("advertise takes no --exact"))
        #expect(refusal("watch", "--exact").contains("watch takes no --exact"))
    }

    @Test func everyForm() throws {
        #expect(try parse("list") == .list(device: nil))
        #expect(try parse("set", "heart-rate", "bpm", "120") == .set(device: "heart-rate", key: "bpm", value: "120"))
        #expect(try parse("set", "thermostat", "outside", "-5") == .set(device: "thermostat", key: "outside", value: "-5"))
        #expect(try parse("set", "heart-rate", "bpm", "150", "--exact") == .set(device: "heart-rate", key: "bpm", value: "150", exact: true))
        #expect(try parse("set", "--exact", "heart-rate", "bpm", "150") == .set(device: "heart-rate", key: "bpm", value: "150", exact: true))
        #expect(try parse("notify", "heart-rate", "2A37", "0096")
                == .notify(device: "heart-rate", characteristic: BluetoothUUID(0x2A37), value: [0x00, 0x96]))
        #expect(try parse("notify", "heart-rate", "0x2a37", "0x0096")
                == .notify(device: "heart-rate", characteristic: BluetoothUUID(0x2A37), value: [0x00, 0x96]))
        #expect(try parse("disconnect", "heart-rate") == .disconnect(device: "heart-rate", reason: 0x13))
        #expect(try parse("disconnect", "heart-rate", "--reason", "0x15") == .disconnect(device: "heart-rate", reason: 0x15))
        #expect(try parse("disconnect", "--reason=13", "heart-rate#2") == .disconnect(device: "heart-rate#2", reason: 0x13))
        #expect(try parse("advertise", "heart-rate", "off") == .advertise(device: "heart-rate", on: false))
        #expect(try parse("advertise", "heart-rate", "on") == .advertise(device: "heart-rate", on: true))
        #expect(try parse("service", "heart-rate", "180F", "off") == .service(device: "heart-rate", service: BluetoothUUID(0x180F), present: false))
        #expect(try parse("service", "lock", "0x180a", "on") == .service(device: "lock", service: BluetoothUUID(0x180A), present: true))
        #expect(try parse("fault", "hr", "2A37", "error", "0x80", "--count", "2")
                == .fault(device: "hr", characteristic: BluetoothUUID(0x2A37), action: .error(.application(0)), count: 2))
        #expect(try parse("fault", "hr", "0x2A19", "delay", "750")
                == .fault(device: "hr", characteristic: BluetoothUUID(0x2A19), action: .delay(.milliseconds(750)), count: nil))
        #expect(try parse("fault", "hr", "2A37", "drop", "--count=3")
                == .fault(device: "hr", characteristic: BluetoothUUID(0x2A37), action: .drop, count: 3))
        #expect(try parse("pairing", "heart-rate", "confirm") == .pairing(device: "heart-rate", confirm: true))
        #expect(try parse("pairing", "heart-rate", "reject") == .pairing(device: "heart-rate", confirm: false))
        #expect(throws: ControlUsageError.self) { try parse("pairing", "heart-rate", "maybe") }
        #expect(try parse("authorize", "lock", "2A20", "allow") == .authorize(device: "lock", characteristic: BluetoothUUID(0x2A20), allow: true))
        #expect(try parse("authorize", "lock", "0x2a20", "deny") == .authorize(device: "lock", characteristic: BluetoothUUID(0x2A20), allow: false))
        #expect(throws: ControlUsageError.self) { try parse("authorize", "lock", "2A20", "maybe") }
        #expect(throws: ControlUsageError.self) { try parse("authorize", "lock", "not-a-uuid", "allow") }
        #expect(throws: ControlUsageError.self) { try parse("authorize", "lock", "allow") }
        #expect(throws: ControlUsageError.self) { try parse("authorize", "lock", "2A20", "allow", "--count", "2") }
        // One central: its address as `list` shows it, or its bonded identity.
        #expect(try parse("authorize", "lock", "2A20", "allow", "F0:F1:F2:F3:F4:F5")
                == .authorize(device: "lock", characteristic: BluetoothUUID(0x2A20), allow: true, peer: LEAddress(BluetoothAddress("F0:F1:F2:F3:F4:F5")!, isRandom: true)))
        #expect(try parse("authorize", "lock", "2A20", "deny", "f0:f1:f2:f3:f4:f5")
                == .authorize(device: "lock", characteristic: BluetoothUUID(0x2A20), allow: false, peer: LEAddress(BluetoothAddress("F0:F1:F2:F3:F4:F5")!, isRandom: true)))
        #expect(throws: ControlUsageError.self) { try parse("authorize", "lock", "2A20", "allow", "phone") }
        #expect(throws: ControlUsageError.self) { try parse("authorize", "lock", "2A20", "allow", "F0:F1:F2:F3:F4") }
        #expect(throws: ControlUsageError.self) { try parse("authorize", "lock", "2A20", "allow", "F0:F1:F2:F3:F4:F5:F6") }
        #expect(throws: ControlUsageError.self) { try parse("authorize", "lock", "2A20", "allow", "") }
        #expect(throws: ControlUsageError.self) { try parse("authorize", "lock", "2A20", "allow", "F0:F1:F2:F3:F4:F5", "F0:F1:F2:F3:F4:F6") }
        // The address type: random unless said (a public address with the same bits is another device).
        #expect(try parse("authorize", "lock", "2A20", "allow", "F0:F1:F2:F3:F4:F5", "public")
                == .authorize(device: "lock", characteristic: BluetoothUUID(0x2A20), allow: true,
                              peer: LEAddress(BluetoothAddress("F0:F1:F2:F3:F4:F5")!, isRandom: false)))
        #expect(try parse("authorize", "lock", "2A20", "allow", "F0:F1:F2:F3:F4:F5", "random")
                == .authorize(device: "lock", characteristic: BluetoothUUID(0x2A20), allow: true,
                              peer: LEAddress(BluetoothAddress("F0:F1:F2:F3:F4:F5")!, isRandom: true)))
        #expect(throws: ControlUsageError.self) { try parse("authorize", "lock", "2A20", "allow", "F0:F1:F2:F3:F4:F5", "static") }
        #expect(throws: ControlUsageError.self) { try parse("authorize", "lock", "2A20", "allow", "F0:F1:F2:F3:F4:F5", "public", "x") }
        #expect(try parse("fault", "clear") == .clearFaults(device: nil))
        #expect(try parse("fault", "clear", "hr") == .clearFaults(device: "hr"))
        // A device whose local name is "clear" can still be given a fault: three words or more.
        #expect(try parse("fault", "clear", "2A37", "drop") == .fault(device: "clear", characteristic: BluetoothUUID(0x2A37), action: .drop, count: nil))
        // `--` ends the options, so a value may start with `--`.
        #expect(try parse("set", "hr", "note", "--", "--weird") == .set(device: "hr", key: "note", value: "--weird"))
    }

    @Test func channelFaults() throws {
        #expect(try parse("fault", "echo", "channel", "0x0040", "stall") == .channelFault(device: "echo", cid: 0x0040, fault: .stallCredits))
        #expect(try parse("fault", "echo", "channel", "7F", "drop") == .channelFault(device: "echo", cid: 0x007F, fault: .dropChannel))
        // The link named: its handle (as `list` shows it, or in hex) or its central's address.
        let phone = try #require(BluetoothAddress("C1:22:33:44:55:66"))
        #expect(try parse("fault", "echo", "channel", "0x0040", "stall", "3838")
                == .channelFault(device: "echo", cid: 0x0040, fault: .stallCredits, link: .handle(3838)))
        #expect(try parse("fault", "echo", "channel", "0x0040", "stall", "0x0EFE")
                == .channelFault(device: "echo", cid: 0x0040, fault: .stallCredits, link: .handle(0x0EFE)))
        #expect(try parse("fault", "echo", "channel", "0x0040", "drop", "c1:22:33:44:55:66")
                == .channelFault(device: "echo", cid: 0x0040, fault: .dropChannel, link: .peer(phone)))
        #expect(refusal("fault", "echo", "channel", "0x0040", "drop", "3840").contains("neither a link's handle"))
        // CIDs outside the dynamic LE range (ATT's 0x0004, 0x0080), other words, options, extra words.
        for words in [["echo", "channel", "0x0004", "stall"], ["echo", "channel", "0x0080", "drop"], ["echo", "channel", "-40", "drop"],
                      ["echo", "channel", "0x0040", "close"], ["echo", "channel", "0x0040"], ["echo", "channel", "0x0040", "drop", "now"],
                      ["echo", "channel", "0x0040", "drop", "1", "2"],
                      ["echo", "channel", "0x0040", "drop", "--count", "2"]] {
            #expect(throws: ControlUsageError.self, "\(words)") { try ControlCommand(arguments: ["fault"] + words) }
        }
        for sent in [ControlCommand.channelFault(device: "echo", cid: 0x0041, fault: .stallCredits), .channelFault(device: "e", cid: 0x0040, fault: .dropChannel),
                     .channelFault(device: "e", cid: 0x0040, fault: .dropChannel, link: .handle(64)),
                     .channelFault(device: "e", cid: 0x0040, fault: .stallCredits, link: .peer(phone))] {
            #expect(ControlRequest.decode(line: Array(ControlRequest(id: 1, command: sent).json.encoded.utf8)) == .success(ControlRequest(id: 1, command: sent)))
        }
    }

    @Test func bonds() throws {
        let phone = try #require(BluetoothAddress("C1:22:33:44:55:66"))
        #expect(try parse("bonds", "lock") == .bonds(device: "lock"))
        #expect(try parse("bonds", "lock", "forget") == .forgetBonds(device: "lock", address: nil))
        #expect(try parse("bonds", "lock", "forget", "c1:22:33:44:55:66") == .forgetBonds(device: "lock", address: phone))
        #expect(refusal("bonds").contains("usage: bonds DEVICE [forget [ADDRESS]]"))
        #expect(refusal("bonds", "lock", "forget", "C1:22:33:44:55:66", "now").contains("usage: bonds DEVICE [forget [ADDRESS]]"))
        #expect(refusal("bonds", "lock", "erase").contains("bonds takes forget [ADDRESS], not 'erase'"))
        #expect(refusal("bonds", "lock", "forget", "C1:22:33:44:55").contains("is not an address"))
        #expect(refusal("bonds", "lock", "forget", "phone").contains("is not an address"))
        #expect(refusal("bonds", "lock", "--count", "1").contains("bonds takes no --count"))
        #expect(ControlCommand.usage.contains("bonds DEVICE [forget [ADDRESS]]"))
        #expect(refusal("reboot").contains("bonds"), "an unknown command lists it")
    }

    @Test func mistakesAreToldBeforeSending() {
        #expect(refusal().contains("give a command"))
        #expect(refusal("reboot").contains("unknown command 'reboot'"))
        #expect(refusal("list", "hr", "now").contains("usage: list [DEVICE|PATTERN|fleet:NAME]"))
        // A bad pattern is told before anything is sent.
        #expect(refusal("list", "Tag [0-4").contains("not closed by ]"))
        #expect(refusal("watch", "Tag*\\").contains("ends with a lone"))
        #expect(refusal("set", "hr", "bpm").contains("usage: set DEVICE KEY VALUE"))
        #expect(refusal("disconnect", "hr", "--reason", "0x16").contains("not one HCI Disconnect allows"))
        #expect(refusal("disconnect", "hr", "--reason", "zz").contains("not a hex octet"))
        #expect(refusal("disconnect", "hr", "--reason").contains("needs a value"))
        #expect(refusal("disconnect", "hr", "--count", "2").contains("takes no --count"))
        #expect(refusal("advertise", "hr", "maybe").contains("on or off"))
        #expect(refusal("service", "hr", "180F", "maybe").contains("on or off"))
        #expect(refusal("service", "hr", "battery", "off").contains("not a UUID"))
        #expect(refusal("service", "hr", "180F").contains("usage: service DEVICE UUID on|off"))
        #expect(refusal("fault", "hr", "2A37").contains("usage"))
        #expect(refusal("fault", "hr", "2A3", "drop").contains("not a UUID"))
        #expect(refusal("fault", "hr", "2A37", "error", "0").contains("not an ATT error code"))
        #expect(refusal("fault", "hr", "2A37", "error", "100").contains("not an ATT error code"))
        #expect(refusal("fault", "hr", "2A37", "delay", "0").contains("from 1 to 300000"))
        #expect(refusal("fault", "hr", "2A37", "delay", "+5").contains("milliseconds"))
        #expect(refusal("fault", "hr", "2A37", "delay", "99999999999999999999999").contains("milliseconds"))
        #expect(refusal("fault", "hr", "2A37", "drop", "--count", "0").contains("--count"))
        #expect(refusal("fault", "hr", "2A37", "drop", "--count", "1", "--count", "2").contains("twice"))
        #expect(refusal("fault", "hr", "2A37", "melt").contains("unknown fault 'melt'"))
        #expect(refusal("fault", "clear", "--count", "2").contains("takes no --count"))
        #expect(refusal("list", "--verbose").contains("unknown option"))
    }
}
