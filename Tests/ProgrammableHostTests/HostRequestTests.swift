import BlemuControl
import BlemuCore
import BlemuHCI
import BlemuProgrammableHost
import Testing

/// `{"cmd":"host",...}` decoded totally: every field checked, anything else refused with the
/// request's id and a message naming the field.
@Suite struct HostRequestDecodingTests {
    private func decode(_ line: String) -> Result<ControlRequest, ControlRequestError> {
        ControlRequest.decode(line: Array(line.utf8))
    }

    private func host(_ line: String) throws -> HostRequest {
        let request = try decode(line).get()
        guard case .host(let host) = request.command else { throw ControlRequestError(id: nil, "not host") }
        return host
    }

    private func refusal(_ line: String) -> String? {
        if case .failure(let error) = decode(line) {
            #expect(error.id == 7, "the refusal carries the request's id: \(error)")
            return error.message
        }
        return nil
    }

    @Test func theOpsDecodeWithTheirDefaults() throws {
        #expect(try host(#"{"id":1,"cmd":"host","op":"address"}"#) == .address)
        #expect(try host(#"{"id":1,"cmd":"host","op":"reset"}"#) == .reset)
        #expect(try host(#"{"id":1,"cmd":"host","op":"links"}"#) == .links)
        #expect(try host(#"{"id":1,"cmd":"host","op":"scan"}"#) == .scan(HostScanRequest()))
        var scan = HostScanRequest()
        scan.legacyOnly = true
        scan.passive = true
        scan.ownAddressType = .randomIdentity
        scan.phys = [.oneM, .coded]
        scan.intervalMilliseconds = 200
        scan.windowMilliseconds = 200
        #expect(try host(#"{"id":1,"cmd":"host","op":"scan","legacy":true,"passive":true,"own_address_type":"resolvable-or-random","phys":["coded","1m"],"interval_ms":200,"window_ms":200}"#)
                == .scan(scan))
        // A short interval alone takes the window down with it.
        guard case .scan(let short) = try host(#"{"id":1,"cmd":"host","op":"scan","interval_ms":10}"#) else { Issue.record("not a scan"); return }
        #expect(short.intervalMilliseconds == 10 && short.windowMilliseconds == 10)
        #expect(try host(#"{"id":1,"cmd":"host","op":"scan-stop","scan":3}"#) == .scanStop(scan: 3))
        #expect(try host(#"{"id":1,"cmd":"host","op":"connect","address":"c0:11:22:33:44:55","address_type":"random"}"#)
                == .connect(HostConnectRequest(peer: BluetoothAddress("C0:11:22:33:44:55")!, peerAddressType: .randomDevice)))
        #expect(try host(#"{"id":1,"cmd":"host","op":"connect","address":"00:11:22:33:44:55","address_type":"public-identity","own_address_type":"random","timeout_ms":100}"#)
                == .connect(HostConnectRequest(peer: BluetoothAddress("00:11:22:33:44:55")!, peerAddressType: .publicIdentity,
                                               ownAddressType: .randomDevice, timeout: .milliseconds(100))))
        #expect(try host(#"{"id":1,"cmd":"host","op":"disconnect","link":4}"#) == .disconnect(link: 4, reason: 0x13))
        #expect(try host(#"{"id":1,"cmd":"host","op":"disconnect","link":4,"reason":"0x05"}"#) == .disconnect(link: 4, reason: 0x05))
        #expect(try host(#"{"id":1,"cmd":"host","op":"disconnect","link":4,"reason":21}"#) == .disconnect(link: 4, reason: 0x15))
    }

    @Test(arguments: [
        (#"{"id":7,"cmd":"host"}"#, #"missing "op""#),
        (#"{"id":7,"cmd":"host","op":null}"#, #"missing "op""#),
        (#"{"id":7,"cmd":"host","op":["scan"]}"#, #""op" must be a string"#),
        (#"{"id":7,"cmd":"host","op":"Scan"}"#, "unknown host op 'Scan'"),
        (#"{"id":7,"cmd":"host","op":"links","link":1}"#, "host links takes no 'link'"),
        (#"{"id":7,"cmd":"host","op":"scan","phys":"1m"}"#, #""phys" must be a list"#),
        (#"{"id":7,"cmd":"host","op":"scan","phys":[]}"#, #""phys" must be a list"#),
        (#"{"id":7,"cmd":"host","op":"scan","phys":["1m","coded","1m"]}"#, #""phys" must be a list"#),
        (#"{"id":7,"cmd":"host","op":"scan","phys":["coded","coded"]}"#, #""phys" holds"#),
        (#"{"id":7,"cmd":"host","op":"scan","phys":[1]}"#, #""phys" holds 1"#),
        (#"{"id":7,"cmd":"host","op":"scan","phys":[["1m"]]}"#, #""phys" holds an array"#),
        (#"{"id":7,"cmd":"host","op":"scan","legacy":1}"#, #""legacy" must be true or false"#),
        (#"{"id":7,"cmd":"host","op":"scan","interval_ms":2}"#, #""interval_ms" must be a whole number from 3 to 10240"#),
        (#"{"id":7,"cmd":"host","op":"scan","interval_ms":10241}"#, #""interval_ms" must be a whole number from 3 to 10240"#),
        (#"{"id":7,"cmd":"host","op":"scan","window_ms":1e400}"#, #""window_ms" must be a whole number"#),
        (#"{"id":7,"cmd":"host","op":"scan","interval_ms":20,"window_ms":21}"#, "the window is at most the interval"),
        (#"{"id":7,"cmd":"host","op":"scan","own_address_type":"resolvable"}"#, #""own_address_type" 'resolvable' is not"#),
        (#"{"id":7,"cmd":"host","op":"scan-stop"}"#, #"missing "scan""#),
        (#"{"id":7,"cmd":"host","op":"scan-stop","scan":0}"#, #""scan" must be a whole number from 1"#),
        (#"{"id":7,"cmd":"host","op":"connect","address":"C0:11:22:33:44:55"}"#, #"missing "address_type""#),
        (#"{"id":7,"cmd":"host","op":"connect","address":"C0:11:22:33:44","address_type":"random"}"#, "is not an address"),
        (#"{"id":7,"cmd":"host","op":"connect","address":"C0:11:22:33:44:5G","address_type":"random"}"#, "is not an address"),
        (#"{"id":7,"cmd":"host","op":"connect","address":42,"address_type":"random"}"#, #""address" must be a string"#),
        (#"{"id":7,"cmd":"host","op":"connect","address":"C0:11:22:33:44:55","address_type":"RANDOM"}"#, #""address_type" 'RANDOM'"#),
        (#"{"id":7,"cmd":"host","op":"connect","address":"C0:11:22:33:44:55","address_type":"random","timeout_ms":60001}"#,
         #""timeout_ms" must be a whole number from 100 to 60000"#),
        (#"{"id":7,"cmd":"host","op":"connect","address":"C0:11:22:33:44:55","address_type":"random","timeout":1000}"#,
         "host connect takes no 'timeout'"),
        (#"{"id":7,"cmd":"host","op":"disconnect","link":"1"}"#, #""link" must be a whole number"#),
        (#"{"id":7,"cmd":"host","op":"disconnect","link":1,"reason":"0x100"}"#, "is not a hex octet"),
        (#"{"id":7,"cmd":"host","op":"disconnect","link":1,"reason":256}"#, #""reason" must be an octet"#),
        (#"{"id":7,"cmd":"host","op":"disconnect","link":1,"reason":"0x08"}"#, "is not one HCI Disconnect allows"),
    ])
    func hostileRequestsAreRefusedNamingTheField(line: String, fragment: String) {
        let message = refusal(line)
        #expect(message?.contains(fragment) == true, "\(line): \(message ?? "decoded")")
    }

    /// What `blemu ctl` sends decodes back to the same request.
    @Test func theEncodingDecodesToTheSameRequest() throws {
        var scan = HostScanRequest()
        scan.phys = [.coded]
        scan.ownAddressType = .publicDevice
        let requests: [HostRequest] = [
            .address, .reset, .links, .scan(scan), .scanStop(scan: 9),
            .connect(HostConnectRequest(peer: BluetoothAddress("C0:11:22:33:44:55")!, peerAddressType: .randomIdentity,
                                        ownAddressType: .randomDevice, timeout: .milliseconds(2500))),
            .disconnect(link: 3, reason: 0x15),
        ]
        for request in requests {
            let line = ControlRequest(id: 5, command: .host(request)).json.encoded
            #expect(try host(line) == request, "\(line)")
        }
    }

    /// `blemu ctl PATH host OP --field value`: the words by the op's field kinds, checked by the
    /// same decoder before anything is sent.
    @Test func ctlWordsBecomeTheRequest() throws {
        #expect(try HostRequest.parse(arguments: ["address"]) == .address)
        var scan = HostScanRequest()
        scan.phys = [.oneM, .coded]
        scan.legacyOnly = false
        scan.passive = true
        #expect(try HostRequest.parse(arguments: ["scan", "--phys", "1m,coded", "--passive=true", "--legacy", "false"]) == .scan(scan))
        #expect(try HostRequest.parse(arguments: ["connect", "--address", "C0:11:22:33:44:55", "--address-type", "random",
                                                  "--own-address-type", "public", "--timeout-ms", "500"])
                == .connect(HostConnectRequest(peer: BluetoothAddress("C0:11:22:33:44:55")!, peerAddressType: .randomDevice,
                                               ownAddressType: .publicDevice, timeout: .milliseconds(500))))
        #expect(try HostRequest.parse(arguments: ["disconnect", "--link", "2", "--reason", "0x05"]) == .disconnect(link: 2, reason: 0x05))
        for (words, fragment) in [
            ([], "host needs an op"), (["fly"], "unknown host op 'fly'"), (["links", "extra"], "unexpected 'extra'"),
            (["scan", "--passive", "yes"], "--passive takes true or false"), (["scan", "--phys", "1m,"], #""phys" holds"#),
            (["scan", "--phys"], "--phys needs a value"), (["scan", "--phys", "1m", "--phys", "coded"], "--phys given twice"),
            (["disconnect", "--link", "+1"], "is not a whole number"), (["disconnect", "--link", "1", "--reason", "0x16"], "HCI Disconnect"),
            (["connect", "--address", "C0:11:22:33:44:55", "--address-type", "random", "--speed", "9"], "host connect takes no --speed"),
        ] {
            #expect(throws: ControlUsageError.self, "\(words)") { _ = try HostRequest.parse(arguments: words) }
            do {
                _ = try HostRequest.parse(arguments: words)
            } catch {
                #expect(error.message.contains(fragment), "\(words): \(error.message)")
            }
        }
        #expect(try ControlCommand(arguments: ["host", "reset"]) == .host(.reset))
        #expect(try ControlCommand(arguments: ["watch", "host"]) == .watch(EventFilter(device: "host")))
    }
}
