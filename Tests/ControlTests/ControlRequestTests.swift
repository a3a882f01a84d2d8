import BlemuATT
import BlemuCore
import BlemuGATT
import Testing
@testable import BlemuControl

/// Every request line decodes to one command or one error naming what is wrong; never a trap.
@Suite struct ControlRequestTests {
    private func decode(_ text: String) -> Result<ControlRequest, ControlRequestError> {
        ControlRequest.decode(line: Array(text.utf8))
    }

    private func command(_ text: String) -> ControlCommand? {
        if case .success(let request) = decode(text) { return request.command }
        return nil
    }

    /// The error, which must carry `id` (nil when the line had no usable id).
    private func error(_ text: String, id: Int64? = 1, sourceLocation: SourceLocation = #_sourceLocation) -> String {
        switch decode(text) {
        case .success(let request):
            Issue.record("accepted \(text) as \(request)", sourceLocation: sourceLocation)
            return ""
        case .failure(let error):
            #expect(error.id == id, "id of the error for \(text)", sourceLocation: sourceLocation)
            return error.message
        }
    }

    // MARK: Every command

    @Test func list() {
        #expect(decode(#"{"id":1,"cmd":"list"}"#) == .success(ControlRequest(id: 1, command: .list(device: nil))))
        #expect(decode(#"  { "cmd" : "list" , "id" : 42 }  "#) == .success(ControlRequest(id: 42, command: .list(device: nil))))
    }

    @Test func set() {
        #expect(command(#"{"id":1,"cmd":"set","device":"heart-rate","key":"bpm","value":"120"}"#)
                == .set(device: "heart-rate", key: "bpm", value: "120"))
        // Numbers and booleans are passed to the device as JSON writes them.
        #expect(command(#"{"id":1,"cmd":"set","device":"thermostat","key":"room","value":21.5}"#)
                == .set(device: "thermostat", key: "room", value: "21.5"))
        #expect(command(#"{"id":1,"cmd":"set","device":"lock","key":"jammed","value":1}"#)
                == .set(device: "lock", key: "jammed", value: "1"))
        #expect(command(#"{"id":1,"cmd":"set","device":"lock","key":"jammed","value":true}"#)
                == .set(device: "lock", key: "jammed", value: "true"))
        #expect(command(#"{"id":1,"cmd":"set","device":"t","key":"outside","value":-5}"#)
                == .set(device: "t", key: "outside", value: "-5"))
    }

    /// `--exact` in JSON: `"exact": true`.
    @Test func setExact() {
        #expect(command(#"{"id":1,"cmd":"set","device":"heart-rate","key":"bpm","value":"150","exact":true}"#)
                == .set(device: "heart-rate", key: "bpm", value: "150", exact: true))
        #expect(command(#"{"id":1,"cmd":"set","device":"heart-rate","key":"bpm","value":"150","exact":false}"#)
                == .set(device: "heart-rate", key: "bpm", value: "150"))
        #expect(error(#"{"id":1,"cmd":"set","device":"heart-rate","key":"bpm","value":"150","exact":"yes"}"#)
                .contains("\"exact\" must be true or false"))
    }

    /// `notify`: the bytes in hex, 1 to 512 of them (an attribute value's maximum, Vol 3,
    /// Part F, 3.2.9), longer than a `set` value's 256-byte string.
    @Test func notify() {
        #expect(command(#"{"id":1,"cmd":"notify","device":"heart-rate","uuid":"2A37","value":"0096"}"#)
                == .notify(device: "heart-rate", characteristic: BluetoothUUID(0x2A37), value: [0x00, 0x96]))
        let full = String(repeating: "ab", count: 512)
        #expect(command(#"{"id":1,"cmd":"notify","device":"hr","uuid":"2a37","value":"\#(full)"}"#)
                == .notify(device: "hr", characteristic: BluetoothUUID(0x2A37), value: [UInt8](repeating: 0xAB, count: 512)))
        #expect(error(#"{"id":1,"cmd":"notify","device":"hr","uuid":"2a37","value":"\#(full)00"}"#)
                == "\"value\" is 513 bytes long; an attribute value is at most 512 bytes (Vol 3, Part F, 3.2.9)")
        #expect(error(#"{"id":1,"cmd":"notify","device":"hr","uuid":"2a37","value":"\#(String(repeating: "0", count: 5000))"}"#)
                .contains("is 5000 characters long"))
        #expect(error(#"{"id":1,"cmd":"notify","device":"hr","uuid":"2a37","value":"0"}"#).contains("is not hex bytes"))
        #expect(error(#"{"id":1,"cmd":"notify","device":"hr","uuid":"2a37","value":""}"#).contains("is not hex bytes"))
        #expect(error(#"{"id":1,"cmd":"notify","device":"hr","uuid":"2a37","value":150}"#).contains("must be a string of hex digits"))
        #expect(error(#"{"id":1,"cmd":"notify","device":"hr","uuid":"2a37"}"#).contains("missing \"value\""))
        #expect(error(#"{"id":1,"cmd":"notify","device":"hr","uuid":"nope","value":"00"}"#).contains("is not a UUID"))
        #expect(error(#"{"id":1,"cmd":"notify","device":"hr","uuid":"2a37","value":"00","count":1}"#).contains("notify takes no 'count'"))
    }

    @Test func disconnect() {
        #expect(command(#"{"id":1,"cmd":"disconnect","device":"heart-rate"}"#) == .disconnect(device: "heart-rate", reason: 0x13))
        #expect(command(#"{"id":1,"cmd":"disconnect","device":"heart-rate","reason":"0x15"}"#) == .disconnect(device: "heart-rate", reason: 0x15))
        #expect(command(#"{"id":1,"cmd":"disconnect","device":"heart-rate","reason":"3b"}"#) == .disconnect(device: "heart-rate", reason: 0x3B))
        #expect(command(#"{"id":1,"cmd":"disconnect","device":"heart-rate","reason":5}"#) == .disconnect(device: "heart-rate", reason: 0x05))
        #expect(command(#"{"id":1,"cmd":"disconnect","device":"heart-rate","reason":null}"#) == .disconnect(device: "heart-rate", reason: 0x13))
        #expect(error(#"{"id":1,"cmd":"disconnect","device":"heart-rate","reason":"0x16"}"#).contains("not one HCI Disconnect allows"))
        #expect(error(#"{"id":1,"cmd":"disconnect","device":"heart-rate","reason":22}"#).contains("0x16"))
        #expect(error(#"{"id":1,"cmd":"disconnect","device":"heart-rate","reason":256}"#).contains("\"reason\" must be an octet"))
        #expect(error(#"{"id":1,"cmd":"disconnect","device":"heart-rate","reason":"0x113"}"#).contains("not a hex octet"))
        #expect(error(#"{"id":1,"cmd":"disconnect","device":"heart-rate","reason":"+13"}"#).contains("not a hex octet"))
    }

    @Test func service() {
        #expect(command(#"{"id":1,"cmd":"service","device":"heart-rate","uuid":"180F","on":false}"#)
                == .service(device: "heart-rate", service: BluetoothUUID(0x180F), present: false))
        #expect(error(#"{"id":1,"cmd":"service","device":"heart-rate","uuid":"battery","on":false}"#).contains("not a UUID"))
        #expect(error(#"{"id":1,"cmd":"service","device":"heart-rate","uuid":"180F"}"#).contains("missing \"on\""))
        let request = ControlRequest(id: 9, command: .service(device: "lock", service: BluetoothUUID(0x180A), present: true))
        #expect(ControlRequest.decode(line: Array(request.json.encoded.utf8)) == .success(request))
    }

    @Test func pairing() {
        #expect(command(#"{"id":1,"cmd":"pairing","device":"heart-rate","answer":"confirm"}"#) == .pairing(device: "heart-rate", confirm: true))
        #expect(command(#"{"id":1,"cmd":"pairing","device":"lock","answer":"reject"}"#) == .pairing(device: "lock", confirm: false))
        #expect(error(#"{"id":1,"cmd":"pairing","device":"lock"}"#).contains("missing \"answer\""))
        #expect(error(#"{"id":1,"cmd":"pairing","device":"lock","answer":"yes"}"#).contains("not confirm or reject"))
        #expect(error(#"{"id":1,"cmd":"pairing","device":"lock","answer":"confirm","value":123456}"#).contains("takes no"))
    }

    @Test func authorize() {
        #expect(command(#"{"id":1,"cmd":"authorize","device":"lock","uuid":"2A20","answer":"allow"}"#)
                == .authorize(device: "lock", characteristic: BluetoothUUID(0x2A20), allow: true))
        #expect(command(#"{"id":1,"cmd":"authorize","device":"lock","uuid":"0x2a20","answer":"deny"}"#)
                == .authorize(device: "lock", characteristic: BluetoothUUID(0x2A20), allow: false))
        #expect(error(#"{"id":1,"cmd":"authorize","device":"lock","uuid":"2A20"}"#).contains("missing \"answer\""))
        #expect(error(#"{"id":1,"cmd":"authorize","device":"lock","answer":"allow"}"#).contains("missing \"uuid\""))
        #expect(error(#"{"id":1,"cmd":"authorize","device":"lock","uuid":"2A20","answer":"yes"}"#).contains("not allow or deny"))
        #expect(error(#"{"id":1,"cmd":"authorize","device":"lock","uuid":"2A2","answer":"allow"}"#).contains("not a UUID"))
        #expect(error(#"{"id":1,"cmd":"authorize","device":"lock","uuid":"2A20","answer":true}"#).contains("must be a string"))
        // The peer's address type travels with it: random unless "peer_random" is false.
        #expect(command(#"{"id":1,"cmd":"authorize","device":"lock","uuid":"2A20","answer":"allow","peer":"F0:F1:F2:F3:F4:F5","peer_random":false}"#)
                == .authorize(device: "lock", characteristic: BluetoothUUID(0x2A20), allow: true,
                              peer: LEAddress(BluetoothAddress("F0:F1:F2:F3:F4:F5")!, isRandom: false)))
        #expect(command(#"{"id":1,"cmd":"authorize","device":"lock","uuid":"2A20","answer":"allow","peer":"F0:F1:F2:F3:F4:F5"}"#)
                == .authorize(device: "lock", characteristic: BluetoothUUID(0x2A20), allow: true,
                              peer: LEAddress(BluetoothAddress("F0:F1:F2:F3:F4:F5")!, isRandom: true)))
        #expect(error(#"{"id":1,"cmd":"authorize","device":"lock","uuid":"2A20","answer":"allow","peer_random":false}"#)
                    .contains("goes with \"peer\""))
        #expect(error(#"{"id":1,"cmd":"authorize","device":"lock","uuid":"2A20","answer":"allow","peer":"F0:F1:F2:F3:F4:F5","peer_random":"no"}"#)
                    .contains("true or false"))
        // What blemu ctl sends for a public peer decodes to the same command.
        let sent = ControlCommand.authorize(device: "lock", characteristic: BluetoothUUID(0x2A20), allow: false,
                                            peer: LEAddress(BluetoothAddress("F0:F1:F2:F3:F4:F5")!, isRandom: false))
        #expect(command(ControlRequest(id: 3, command: sent).json.encoded) == sent)
        #expect(error(#"{"id":1,"cmd":"authorize","device":"lock","uuid":"2A20","answer":"allow","count":1}"#).contains("takes no"))
        #expect(command(#"{"id":1,"cmd":"authorize","device":"lock","uuid":"2A20","answer":"deny","peer":"F0:F1:F2:F3:F4:F5"}"#)
                == .authorize(device: "lock", characteristic: BluetoothUUID(0x2A20), allow: false, peer: LEAddress(BluetoothAddress("F0:F1:F2:F3:F4:F5")!, isRandom: true)))
        #expect(error(#"{"id":1,"cmd":"authorize","device":"lock","uuid":"2A20","answer":"allow","peer":"phone"}"#)
                    .contains("\"peer\" 'phone' is not an address"))
        #expect(error(#"{"id":1,"cmd":"authorize","device":"lock","uuid":"2A20","answer":"allow","peer":7}"#).contains("must be a string"))
        #expect(error(#"{"id":1,"cmd":"authorize","device":"lock","uuid":"2A20","answer":"allow","peer":"F0:F1:F2:F3:F4:F5:F6"}"#)
                    .contains("not an address"))
    }

    @Test func bonds() throws {
        let phone = try #require(BluetoothAddress("C1:22:33:44:55:66"))
        #expect(command(#"{"id":1,"cmd":"bonds","device":"lock"}"#) == .bonds(device: "lock"))
        #expect(command(#"{"id":1,"cmd":"bonds","device":"lock","action":"list"}"#) == .bonds(device: "lock"))
        #expect(command(#"{"id":1,"cmd":"bonds","device":"lock","action":"list","address":null}"#) == .bonds(device: "lock"))
        #expect(command(#"{"id":1,"cmd":"bonds","device":"lock","action":"forget"}"#) == .forgetBonds(device: "lock", address: nil))
        #expect(command(#"{"id":1,"cmd":"bonds","device":"lock","action":"forget","address":"C1:22:33:44:55:66"}"#)
                == .forgetBonds(device: "lock", address: phone))
        #expect(error(#"{"id":1,"cmd":"bonds"}"#).contains("missing \"device\""))
        #expect(error(#"{"id":1,"cmd":"bonds","device":"lock","action":"erase"}"#).contains("not list or forget"))
        #expect(error(#"{"id":1,"cmd":"bonds","device":"lock","action":"forget","address":"C1:22"}"#).contains("not an address"))
        #expect(error(#"{"id":1,"cmd":"bonds","device":"lock","action":"forget","address":7}"#).contains("must be a string"))
        #expect(error(#"{"id":1,"cmd":"bonds","device":"lock","address":"C1:22:33:44:55:66"}"#).contains("goes with \"action\":\"forget\""))
        #expect(error(#"{"id":1,"cmd":"bonds","device":"lock","action":"forget","count":1}"#).contains("takes no"))
        #expect(ControlCommand.bonds(device: "lock").isReadOnly && !ControlCommand.forgetBonds(device: "lock", address: nil).isReadOnly)
    }

    @Test func advertise() {
        #expect(command(#"{"id":1,"cmd":"advertise","device":"heart-rate","on":false}"#) == .advertise(device: "heart-rate", on: false))
        #expect(command(#"{"id":1,"cmd":"advertise","device":"heart-rate","on":true}"#) == .advertise(device: "heart-rate", on: true))
        #expect(error(#"{"id":1,"cmd":"advertise","device":"heart-rate"}"#).contains("missing \"on\""))
        #expect(error(#"{"id":1,"cmd":"advertise","device":"heart-rate","on":"off"}"#).contains("must be true or false"))
        #expect(error(#"{"id":1,"cmd":"advertise","device":"heart-rate","on":1}"#).contains("must be true or false"))
    }

    @Test func faults() {
        let hrm = BluetoothUUID(0x2A37)
        #expect(command(#"{"id":1,"cmd":"fault","device":"hr","uuid":"2A37","action":"error","error":"0x0E","count":2}"#)
                == .fault(device: "hr", characteristic: hrm, action: .error(.unlikelyError), count: 2))
        #expect(command(#"{"id":1,"cmd":"fault","device":"hr","uuid":"0x2a37","action":"error","error":128}"#)
                == .fault(device: "hr", characteristic: hrm, action: .error(.application(0)), count: nil))
        #expect(command(#"{"id":1,"cmd":"fault","device":"hr","uuid":"00002a37-0000-1000-8000-00805f9b34fb","action":"delay","ms":500}"#)
                == .fault(device: "hr", characteristic: hrm, action: .delay(.milliseconds(500)), count: nil))
        #expect(command(#"{"id":1,"cmd":"fault","device":"hr","uuid":"2A37","action":"drop","count":3}"#)
                == .fault(device: "hr", characteristic: hrm, action: .drop, count: 3))
        let custom = BluetoothUUID("7d3c0002-9a5e-4d1a-8f6e-5c1b2d3e4f50")!
        #expect(command(#"{"id":1,"cmd":"fault","device":"hr","uuid":"7D3C0002-9A5E-4D1A-8F6E-5C1B2D3E4F50","action":"drop"}"#)
                == .fault(device: "hr", characteristic: custom, action: .drop, count: nil))
        #expect(command(#"{"id":1,"cmd":"fault","action":"clear"}"#) == .clearFaults(device: nil))
        #expect(command(#"{"id":1,"cmd":"fault","action":"clear","device":"hr"}"#) == .clearFaults(device: "hr"))
    }

    @Test func faultMistakes() {
        #expect(error(#"{"id":1,"cmd":"fault","device":"hr","uuid":"2A37","action":"error"}"#).contains("missing \"error\""))
        #expect(error(#"{"id":1,"cmd":"fault","device":"hr","uuid":"2A37","action":"error","error":0}"#).contains("0x00 is not an ATT error"))
        #expect(error(#"{"id":1,"cmd":"fault","device":"hr","uuid":"2A37","action":"delay"}"#).contains("missing \"ms\""))
        #expect(error(#"{"id":1,"cmd":"fault","device":"hr","uuid":"2A37","action":"delay","ms":0}"#).contains("from 1 to 300000"))
        #expect(error(#"{"id":1,"cmd":"fault","device":"hr","uuid":"2A37","action":"delay","ms":1.5}"#).contains("not 1.5"))
        #expect(error(#"{"id":1,"cmd":"fault","device":"hr","uuid":"2A37","action":"delay","ms":"500"}"#).contains("whole number"))
        #expect(error(#"{"id":1,"cmd":"fault","device":"hr","uuid":"2A37","action":"drop","count":0}"#).contains("\"count\""))
        #expect(error(#"{"id":1,"cmd":"fault","device":"hr","uuid":"2A37","action":"drop","count":-1}"#).contains("\"count\""))
        #expect(error(#"{"id":1,"cmd":"fault","device":"hr","uuid":"2A37","action":"explode"}"#).contains("unknown fault action"))
        #expect(error(#"{"id":1,"cmd":"fault","device":"hr","action":"drop"}"#).contains("missing \"uuid\""))
        #expect(error(#"{"id":1,"cmd":"fault","device":"hr","uuid":"2A3","action":"drop"}"#).contains("is not a UUID"))
        #expect(error(#"{"id":1,"cmd":"fault","device":"hr","uuid":"+A37","action":"drop"}"#).contains("is not a UUID"))
        #expect(error(#"{"id":1,"cmd":"fault","device":"hr","uuid":"２A37","action":"drop"}"#).contains("is not a UUID"))
        #expect(error(#"{"id":1,"cmd":"fault","device":"hr","uuid":"0000-2a37-0000-1000-8000-00805f9b34fb","action":"drop"}"#).contains("is not a UUID"))
        #expect(error(#"{"id":1,"cmd":"fault","uuid":"2A37","action":"drop"}"#).contains("missing \"device\""))
        #expect(error(#"{"id":1,"cmd":"fault","device":"hr","uuid":"2A37"}"#).contains("missing \"action\""))
        // Clearing takes no UUID: a misspelt request must not clear more than meant.
        #expect(error(#"{"id":1,"cmd":"fault","action":"clear","uuid":"2A37"}"#).contains("takes no 'uuid'"))
    }

    @Test func channelFaults() {
        #expect(command(#"{"id":1,"cmd":"fault","device":"echo","action":"stall-credits","cid":"0x0040"}"#)
                == .channelFault(device: "echo", cid: 0x0040, fault: .stallCredits))
        #expect(command(#"{"id":1,"cmd":"fault","device":"echo","action":"drop-channel","cid":"0x007f"}"#)
                == .channelFault(device: "echo", cid: 0x007F, fault: .dropChannel))
        #expect(command(#"{"id":1,"cmd":"fault","device":"echo","action":"drop-channel","cid":"0x0040","handle":64}"#)
                == .channelFault(device: "echo", cid: 0x0040, fault: .dropChannel, link: .handle(64)))
        #expect(command(#"{"id":1,"cmd":"fault","device":"echo","action":"stall-credits","cid":"0x0040","peer":"C1:22:33:44:55:66"}"#)
                == .channelFault(device: "echo", cid: 0x0040, fault: .stallCredits, link: .peer(BluetoothAddress("C1:22:33:44:55:66")!)))
        #expect(error(#"{"id":1,"cmd":"fault","device":"echo","action":"drop-channel","cid":"0x0040","handle":64,"peer":"C1:22:33:44:55:66"}"#)
                .contains("not both"))
        #expect(error(#"{"id":1,"cmd":"fault","device":"echo","action":"drop-channel","cid":"0x0040","handle":3840}"#).contains("\"handle\""))
        #expect(error(#"{"id":1,"cmd":"fault","device":"echo","action":"drop-channel","cid":"0x0040","peer":"phone"}"#).contains("not an address"))
        #expect(error(#"{"id":1,"cmd":"fault","device":"echo","action":"drop-channel"}"#).contains("missing \"cid\""))
        #expect(error(#"{"id":1,"cmd":"fault","device":"echo","action":"drop-channel","cid":"0x0004"}"#).contains("not a dynamic LE CID"))
        #expect(error(#"{"id":1,"cmd":"fault","device":"echo","action":"drop-channel","cid":"0x10040"}"#).contains("not a dynamic LE CID"))
        #expect(error(#"{"id":1,"cmd":"fault","device":"echo","action":"drop-channel","cid":64}"#).contains("must be a string"))
        // A channel fault names no characteristic; a UUID sent with it is a mistake, not ignored.
        #expect(error(#"{"id":1,"cmd":"fault","device":"echo","action":"stall-credits","cid":"0x0040","uuid":"2A37"}"#).contains("uuid"))
        // And a characteristic's fault takes no CID.
        #expect(error(#"{"id":1,"cmd":"fault","device":"hr","uuid":"2A37","action":"drop","cid":"0x0040"}"#).contains("cid"))
        #expect(error(#"{"id":1,"cmd":"fault","device":"hr","action":"stall-credits"}"#).contains("missing \"cid\""))
    }

    // MARK: Malformed lines

    @Test func notJSON() {
        for text in ["", "{", "list", "{\"id\":1,\"cmd\":\"list\"", "{\"id\":1,\"cmd\":\"list\"}x", "\u{0}", "{'id':1}", "{\"id\":1 \"cmd\":\"list\"}"] {
            #expect(error(text, id: nil).contains("JSON"), "\(text)")
        }
        // Bytes that are not UTF-8.
        let bytes: [UInt8] = [0x7B, 0x22, 0xFF, 0xFE, 0x22, 0x3A, 0x31, 0x7D]
        guard case .failure(let failure) = ControlRequest.decode(line: bytes) else {
            Issue.record("bytes that are not UTF-8 were accepted")
            return
        }
        #expect(failure.id == nil)
    }

    @Test func notAnObject() {
        for text in ["[1,2]", "1", "\"list\"", "null", "true"] {
            #expect(error(text, id: nil).contains("one JSON object per line"), "\(text)")
        }
    }

    @Test func deeplyNestedIsRefusedNotOverflowed() {
        // Refused as a line that is not one JSON object (no id is known), the stack intact.
        let deep = String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000)
        #expect(error(deep, id: nil).contains("one JSON object per line"))
        let inside = #"{"id":1,"cmd":"list","x":"# + String(repeating: "{\"a\":", count: 5000) + "1" + String(repeating: "}", count: 5000) + "}"
        #expect(error(inside, id: nil).contains("one JSON object per line"))
        // The same line without the depth is read as JSON (and refused for its field, with its
        // id): the refusal above was for the depth.
        #expect(!error(#"{"id":1,"cmd":"list","x":{"a":1}}"#, id: 1).contains("one JSON object per line"))
    }

    @Test func missingOrBadID() {
        #expect(error(#"{"cmd":"list"}"#, id: nil).contains("missing \"id\""))
        #expect(error(#"{"id":"1","cmd":"list"}"#, id: nil).contains("\"id\" must be a whole number"))
        #expect(error(#"{"id":1.5,"cmd":"list"}"#, id: nil).contains("not 1.5"))
        #expect(error(#"{"id":-1,"cmd":"list"}"#, id: nil).contains("not -1"))
        #expect(error(#"{"id":null,"cmd":"list"}"#, id: nil).contains("\"id\""))
        #expect(error(#"{"id":[1],"cmd":"list"}"#, id: nil).contains("not an array"))
        #expect(error(#"{"id":{},"cmd":"list"}"#, id: nil).contains("not an object"))
        #expect(error(#"{"id":true,"cmd":"list"}"#, id: nil).contains("not a boolean"))
        // The largest id every JSON implementation holds exactly, and one past it.
        #expect(decode(#"{"id":9007199254740991,"cmd":"list"}"#) == .success(ControlRequest(id: ControlRequest.maxID, command: .list(device: nil))))
        #expect(error(#"{"id":9007199254740992,"cmd":"list"}"#, id: nil).contains("9007199254740992"))
        // A whole number written as a float is that number.
        #expect(decode(#"{"id":7.0,"cmd":"list"}"#) == .success(ControlRequest(id: 7, command: .list(device: nil))))
    }

    @Test func hugeNumbers() {
        #expect(error(#"{"id":1e400,"cmd":"list"}"#, id: nil).contains("too large"))
        #expect(error(#"{"id":99999999999999999999999,"cmd":"list"}"#, id: nil).contains("\"id\""))
        #expect(error(#"{"id":-99999999999999999999999,"cmd":"list"}"#, id: nil).contains("\"id\""))
        #expect(error(#"{"id":1,"cmd":"fault","device":"hr","uuid":"2A37","action":"drop","count":1e400}"#).contains("\"count\""))
        #expect(error(#"{"id":1,"cmd":"fault","device":"hr","uuid":"2A37","action":"drop","count":18446744073709551616}"#).contains("\"count\""))
        #expect(error(#"{"id":1,"cmd":"fault","device":"hr","uuid":"2A37","action":"delay","ms":9223372036854775807}"#).contains("\"ms\""))
        #expect(error(#"{"id":1,"cmd":"fault","device":"hr","uuid":"2A37","action":"error","error":1e300}"#).contains("\"error\""))
        #expect(error(#"{"id":1,"cmd":"disconnect","device":"hr","reason":-1}"#).contains("\"reason\""))
        #expect(error(#"{"id":1,"cmd":"set","device":"hr","key":"bpm","value":1e400}"#).contains("\"value\""))
        // A big but finite value goes to the device, which refuses it itself.
        #expect(command(#"{"id":1,"cmd":"set","device":"hr","key":"bpm","value":1e300}"#) == .set(device: "hr", key: "bpm", value: "1e+300"))
    }

    @Test func missingFields() {
        #expect(error(#"{"id":3}"#, id: 3).contains("missing \"cmd\""))
        #expect(error(#"{"id":3,"cmd":"set","key":"bpm","value":"1"}"#, id: 3).contains("missing \"device\""))
        #expect(error(#"{"id":3,"cmd":"set","device":"hr","value":"1"}"#, id: 3).contains("missing \"key\""))
        #expect(error(#"{"id":3,"cmd":"set","device":"hr","key":"bpm"}"#, id: 3).contains("missing \"value\""))
        #expect(error(#"{"id":3,"cmd":"disconnect"}"#, id: 3).contains("missing \"device\""))
        #expect(error(#"{"id":3,"cmd":"advertise","on":true}"#, id: 3).contains("missing \"device\""))
    }

    @Test func wrongTypes() {
        #expect(error(#"{"id":4,"cmd":7}"#, id: 4).contains("\"cmd\" must be a string"))
        #expect(error(#"{"id":4,"cmd":["list"]}"#, id: 4).contains("\"cmd\" must be a string"))
        #expect(error(#"{"id":4,"cmd":"set","device":1,"key":"bpm","value":"1"}"#, id: 4).contains("\"device\" must be a string"))
        #expect(error(#"{"id":4,"cmd":"set","device":"hr","key":{},"value":"1"}"#, id: 4).contains("\"key\" must be a string"))
        #expect(error(#"{"id":4,"cmd":"set","device":"hr","key":"bpm","value":[1]}"#, id: 4).contains("\"value\" must be a string or a number"))
        #expect(error(#"{"id":4,"cmd":"set","device":"hr","key":"bpm","value":{}}"#, id: 4).contains("\"value\""))
        #expect(error(#"{"id":4,"cmd":"fault","device":"hr","uuid":2,"action":"drop"}"#, id: 4).contains("\"uuid\" must be a string"))
        #expect(error(#"{"id":4,"cmd":"set","device":"","key":"bpm","value":"1"}"#, id: 4).contains("\"device\" is empty"))
    }

    @Test func unknownCommandAndFields() {
        #expect(error(#"{"id":5,"cmd":"reboot"}"#, id: 5).contains("unknown command 'reboot'"))
        #expect(error(#"{"id":5,"cmd":"LIST"}"#, id: 5).contains("unknown command"))
        #expect(error(#"{"id":5,"cmd":"list","key":"hr"}"#, id: 5).contains("list takes no 'key'; its fields: device"))
        // A misspelt count would make a fault last until cleared: refused instead.
        let message = error(#"{"id":5,"cmd":"fault","device":"hr","uuid":"2A37","action":"drop","cuont":2}"#, id: 5)
        #expect(message.contains("'cuont'") && message.contains("count"))
    }

    @Test func longStringsAreRefusedAndNeverEchoedWhole() {
        let long = String(repeating: "x", count: 10_000)
        let message = error(#"{"id":6,"cmd":"set","device":"hr","key":"bpm","value":""# + long + #""}"#, id: 6)
        #expect(message.contains("at most 256"))
        let command = error(#"{"id":6,"cmd":""# + long + #""}"#, id: 6)
        #expect(command.count < 300)
        // Control characters in an echoed value are escaped, so a log line stays one line.
        let escaped = error(#"{"id":6,"cmd":"a\nb"}"#, id: 6)
        #expect(!escaped.contains("\n") && escaped.contains("\\u000a"))
    }

    // MARK: Encoding

    @Test func everyCommandRoundTrips() {
        let commands: [ControlCommand] = [
            .list(device: nil),
            .list(device: "Tag 00[1-4]?"),
            .set(device: "heart-rate#2", key: "bpm", value: "120"),
            .set(device: "Bench \"HR\"\n", key: "outside", value: "-5.5"),
            .set(device: "heart-rate", key: "bpm", value: "150", exact: true),
            .notify(device: "heart-rate", characteristic: BluetoothUUID(0x2A37), value: [0x00, 0x96]),
            .disconnect(device: "heart-rate", reason: 0x13),
            .disconnect(device: "heart-rate", reason: 0x3B),
            .advertise(device: "lock", on: false),
            .advertise(device: "lock", on: true),
            .fault(device: "hr", characteristic: BluetoothUUID(0x2A37), action: .error(.application(1)), count: 3),
            .fault(device: "hr", characteristic: BluetoothUUID(0x2A19), action: .delay(.milliseconds(1500)), count: nil),
            .fault(device: "hr", characteristic: BluetoothUUID("7d3c0002-9a5e-4d1a-8f6e-5c1b2d3e4f50")!, action: .drop, count: 1),
            .clearFaults(device: nil),
            .clearFaults(device: "hr"),
            .pairing(device: "heart-rate", confirm: true),
            .pairing(device: "lock#2", confirm: false),
            .authorize(device: "lock", characteristic: BluetoothUUID(0x2A20), allow: true),
            .authorize(device: "lock", characteristic: BluetoothUUID(0x2A20), allow: false, peer: LEAddress(BluetoothAddress("C1:11:11:11:11:11")!, isRandom: true)),
            .authorize(device: "thermostat#2", characteristic: BluetoothUUID("7d3c0002-9a5e-4d1a-8f6e-5c1b2d3e4f50")!, allow: false),
            .bonds(device: "lock"),
            .forgetBonds(device: "lock#2", address: nil),
            .forgetBonds(device: "lock", address: BluetoothAddress("C1:22:33:44:55:66")!),
        ]
        for (index, command) in commands.enumerated() {
            let request = ControlRequest(id: Int64(index), command: command)
            let line = request.json.encoded
            #expect(!line.contains("\n"))
            #expect(ControlRequest.decode(line: Array(line.utf8)) == .success(request), "\(line)")
        }
    }

    @Test func repliesAreOneLineOfJSON() {
        let reply = DeviceControl.errorReply(id: nil, "bad \"quote\" \\ and\nnewline \u{1} \u{2028}")
        #expect(reply.encoded == #"{"id":null,"ok":false,"error":"bad \"quote\" \\ and\nnewline \u0001 \u2028"}"#)
        let ok: JSONValue = .object([("id", 5), ("ok", true), ("list", .array([1, "a", .null, .bool(false)]))])
        #expect(ok.encoded == #"{"id":5,"ok":true,"list":[1,"a",null,false]}"#)
        #expect(ControlClient.isOK(ok.encoded) == true)
        #expect(ControlClient.isOK(reply.encoded) == false)
        #expect(ControlClient.isOK("garbage") == nil)
        #expect(ControlClient.isOK(#"{"ok":"yes"}"#) == nil)
    }

    // MARK: Duplicate names

    @Test func aFieldNamedTwiceIsRefusedNotHalfRead() {
        // The decoder kept the last one: this ran `set`'s checks on what was sent as `list`.
        #expect(error(#"{"id":1,"cmd":"list","cmd":"set"}"#) == #""cmd" appears twice: a request names each field once"#)
        #expect(error(#"{"id":1,"id":2,"cmd":"list"}"#, id: nil) == #""id" appears twice: a request names each field once"#)
        // The same name however it is escaped, as the decoder sees it.
        #expect(error(#"{"id":7,"cmd":"list","c\u006dd":"list"}"#, id: 7) == #""cmd" appears twice: a request names each field once"#)
        #expect(error(#"{"id":1,"cmd":"list","\ud83d\ude00":1,"😀":2}"#) == #""😀" appears twice: a request names each field once"#)
        // Values that spell a name, and names inside nested values, are not members of the request.
        #expect(command(#"{"id":1,"cmd":"set","device":"cmd","key":"cmd","value":"id"}"#) != nil)
        #expect(error(#"{"id":1,"cmd":"list","x":{"a":1,"a":2}}"#).contains("appears twice") == false)
        #expect(command(#"{"id":1,"cmd":"list"}"#) != nil)
    }

    @Test func theNameScanIsTotalOnAnyBytes() {
        var random = SeededRandom(seed: 19)
        let alphabet = Array(#"{}[]":,\\u0dD8Ffx "#.utf8) + [0xC3, 0xA9, 0xFF, 0x00]
        for _ in 0..<5000 {
            let count = Int(random.next() % 40)
            let bytes = (0..<count).map { _ in alphabet[Int(random.next() % UInt64(alphabet.count))] }
            _ = JSONObjectNames.firstDuplicate(in: bytes)
            _ = ControlRequest.decode(line: bytes)
        }
        #expect(JSONObjectNames.firstDuplicate(in: Array(#"{"a":1,"a":"#.utf8)) == "a", "a line cut short after a name still counts it")
        #expect(JSONObjectNames.firstDuplicate(in: Array(#"{"\u"#.utf8)) == nil)
    }
}
