import BlemuControl
import BlemuCore
import BlemuHCI
import BlemuProgrammableHost
import Testing

/// `advertise` and `advertise-stop` decoded totally: each field checked for what it is, anything
/// else refused with the request's id and a message naming the field; the combination's rules
/// are the host's (`ProgrammedAdvertising.ruleBroken`, tested in ProgrammedAdvertisingTests).
@Suite struct HostAdvertiseRequestTests {
    private func host(_ line: String) throws -> HostRequest {
        let request = try ControlRequest.decode(line: Array(line.utf8)).get()
        guard case .host(let host) = request.command else { throw ControlRequestError(id: nil, "not host") }
        return host
    }

    private func refusal(_ line: String) -> String? {
        if case .failure(let error) = ControlRequest.decode(line: Array(line.utf8)) {
            #expect(error.id == 7, "the refusal carries the request's id: \(error)")
            return error.message
        }
        return nil
    }

    @Test func advertiseDecodesWithItsDefaults() throws {
        #expect(try host(#"{"id":1,"cmd":"host","op":"advertise"}"#) == .advertise(HostAdvertiseRequest()))
        let defaults = ProgrammedAdvertising.Parameters()
        #expect(defaults.data.isEmpty && defaults.scanResponse == nil && !defaults.legacy && !defaults.connectable
                && !defaults.scannable && defaults.directedTo == nil && defaults.intervalMilliseconds == 100
                && defaults.primaryPHY == .le1M && defaults.secondaryPHY == .le1M)
        // An empty string is no data (a Pandora server sends "" for an empty DataTypes); null is the default.
        #expect(try host(#"{"id":1,"cmd":"host","op":"advertise","data":"","scan_response":null}"#) == .advertise(HostAdvertiseRequest()))
        guard case .advertise(let empty) = try host(#"{"id":1,"cmd":"host","op":"advertise","scan_response":""}"#) else {
            Issue.record("not advertise")
            return
        }
        #expect(empty.parameters.scanResponse == [])
    }

    @Test func everyFieldOfAdvertiseIsTaken() throws {
        let line = #"{"id":1,"cmd":"host","op":"advertise","data":"0201060aFF","scan_response":"03ff0102","legacy":false,"#
            + #""connectable":false,"scannable":true,"directed_to":"c0:11:22:33:44:55","directed_type":"random","#
            + #""own_address_type":"random","interval_ms":10240,"primary_phy":"coded","secondary_phy":"2m"}"#
        let expected = HostAdvertiseRequest(
            parameters: ProgrammedAdvertising.Parameters(data: [0x02, 0x01, 0x06, 0x0A, 0xFF], scanResponse: [0x03, 0xFF, 0x01, 0x02],
                                                         legacy: false, connectable: false, scannable: true,
                                                         directedTo: LEAddress(BluetoothAddress("C0:11:22:33:44:55")!, isRandom: true),
                                                         intervalMilliseconds: 10240, primaryPHY: .leCoded, secondaryPHY: .le2M),
            ownAddressType: .randomAddress)
        #expect(try host(line) == .advertise(expected))
        guard case .advertise(let publicOne) = try host(#"{"id":1,"cmd":"host","op":"advertise","legacy":true,"connectable":true,"directed_to":"00:11:22:33:44:55","directed_type":"public","own_address_type":"public","interval_ms":20}"#) else {
            Issue.record("not advertise")
            return
        }
        #expect(publicOne.parameters.directedTo == LEAddress(BluetoothAddress("00:11:22:33:44:55")!, isRandom: false))
        #expect(publicOne.ownAddressType == .publicAddress && publicOne.parameters.intervalMilliseconds == 20)
        // The resolvable types decode, with how long one private address lasts.
        guard case .advertise(let resolvable) = try host(#"{"id":1,"cmd":"host","op":"advertise","own_address_type":"resolvable-or-random","rpa_timeout_ms":1000}"#) else {
            Issue.record("not advertise")
            return
        }
        #expect(resolvable.ownAddressType == .resolvableOrRandom)
        #expect(resolvable.parameters.privateAddressTimeoutMilliseconds == 1000)
        #expect(resolvable.parameters.privateAddressTimeout == .seconds(1))
        guard case .advertise(let longest) = try host(#"{"id":1,"cmd":"host","op":"advertise","own_address_type":"resolvable-or-public","rpa_timeout_ms":41400000}"#) else {
            Issue.record("not advertise")
            return
        }
        #expect(longest.ownAddressType == .resolvableOrPublic && longest.parameters.privateAddressTimeout == .seconds(41_400))
        #expect(HostAdvertiseRequest().parameters.privateAddressTimeout == .seconds(900), "TGAP(private_addr_int): 15 minutes")
        #expect(try host(#"{"id":1,"cmd":"host","op":"advertise-stop","advertisement":12}"#) == .advertiseStop(advertisement: 12))
    }

    /// The largest data any controller takes (Max_Advertising_Data_Length 1650, Vol 4, Part E, 7.8.57) decodes; one byte more does not.
    @Test func dataIsBoundedByTheMostAControllerTakes() throws {
        let most = String(repeating: "ab", count: 1650)
        guard case .advertise(let request) = try host(#"{"id":1,"cmd":"host","op":"advertise","data":"\#(most)"}"#) else {
            Issue.record("not advertise")
            return
        }
        #expect(request.parameters.data.count == 1650)
        let message = refusal(#"{"id":7,"cmd":"host","op":"advertise","scan_response":"\#(most)ab"}"#)
        #expect(message?.contains(#""scan_response" is 3302 characters long: at most 1650 bytes"#) == true, "\(message ?? "decoded")")
    }

    @Test(arguments: [
        (#"{"id":7,"cmd":"host","op":"advertise","data":"02010"}"#, #""data" has an odd number of hex digits"#),
        (#"{"id":7,"cmd":"host","op":"advertise","data":"0x020106"}"#, #""data" '0x020106' is not hex digits"#),
        (#"{"id":7,"cmd":"host","op":"advertise","data":"+f+f"}"#, "is not hex digits"),
        (#"{"id":7,"cmd":"host","op":"advertise","data":"02 01 06"}"#, "is not hex digits"),
        (#"{"id":7,"cmd":"host","op":"advertise","data":"zz"}"#, "is not hex digits"),
        (#"{"id":7,"cmd":"host","op":"advertise","data":"٠١"}"#, "is not hex digits"),
        (#"{"id":7,"cmd":"host","op":"advertise","data":[2,1,6]}"#, #""data" must be a string of hex digits"#),
        (#"{"id":7,"cmd":"host","op":"advertise","data":20106}"#, #""data" must be a string of hex digits"#),
        (#"{"id":7,"cmd":"host","op":"advertise","scan_response":{"a":1}}"#, #""scan_response" must be a string of hex digits"#),
        (#"{"id":7,"cmd":"host","op":"advertise","legacy":"true"}"#, #""legacy" must be true or false"#),
        (#"{"id":7,"cmd":"host","op":"advertise","connectable":1}"#, #""connectable" must be true or false"#),
        (#"{"id":7,"cmd":"host","op":"advertise","scannable":[]}"#, #""scannable" must be true or false"#),
        (#"{"id":7,"cmd":"host","op":"advertise","directed_to":"C0:11:22:33:44:55"}"#, #""directed_to" needs "directed_type""#),
        (#"{"id":7,"cmd":"host","op":"advertise","directed_type":"random"}"#, #""directed_type" goes with "directed_to""#),
        (#"{"id":7,"cmd":"host","op":"advertise","directed_to":"C0:11:22:33:44","directed_type":"random"}"#, "is not an address"),
        (#"{"id":7,"cmd":"host","op":"advertise","directed_to":"C0:11:22:33:44:55","directed_type":"random-identity"}"#,
         #""directed_type" 'random-identity' is not public or random"#),
        (#"{"id":7,"cmd":"host","op":"advertise","directed_to":7,"directed_type":"random"}"#, #""directed_to" must be a string"#),
        (#"{"id":7,"cmd":"host","op":"advertise","own_address_type":"static"}"#, #""own_address_type" 'static' is not public, random"#),
        (#"{"id":7,"cmd":"host","op":"advertise","interval_ms":19}"#, #""interval_ms" must be a whole number from 20 to 10240"#),
        (#"{"id":7,"cmd":"host","op":"advertise","interval_ms":10241}"#, #""interval_ms" must be a whole number from 20 to 10240"#),
        (#"{"id":7,"cmd":"host","op":"advertise","interval_ms":100.5}"#, #""interval_ms" must be a whole number"#),
        (#"{"id":7,"cmd":"host","op":"advertise","interval_ms":1e400}"#, #""interval_ms" must be a whole number"#),
        (#"{"id":7,"cmd":"host","op":"advertise","interval_ms":-9223372036854775809}"#, #""interval_ms" must be a whole number"#),
        (#"{"id":7,"cmd":"host","op":"advertise","rpa_timeout_ms":999}"#, #""rpa_timeout_ms" must be a whole number from 1000 to 41400000"#),
        (#"{"id":7,"cmd":"host","op":"advertise","rpa_timeout_ms":41400001}"#, #""rpa_timeout_ms" must be a whole number from 1000 to 41400000"#),
        (#"{"id":7,"cmd":"host","op":"advertise","rpa_timeout_ms":0}"#, #""rpa_timeout_ms" must be a whole number"#),
        (#"{"id":7,"cmd":"host","op":"advertise","rpa_timeout_ms":-1000}"#, #""rpa_timeout_ms" must be a whole number"#),
        (#"{"id":7,"cmd":"host","op":"advertise","rpa_timeout_ms":1500.5}"#, #""rpa_timeout_ms" must be a whole number"#),
        (#"{"id":7,"cmd":"host","op":"advertise","rpa_timeout_ms":"900000"}"#, #""rpa_timeout_ms" must be a whole number"#),
        (#"{"id":7,"cmd":"host","op":"advertise","rpa_timeout_ms":1e400}"#, #""rpa_timeout_ms" must be a whole number"#),
        (#"{"id":7,"cmd":"host","op":"advertise","primary_phy":"2m"}"#, #""primary_phy" '2m' is not 1m or coded"#),
        (#"{"id":7,"cmd":"host","op":"advertise","secondary_phy":"3m"}"#, #""secondary_phy" '3m' is not 1m, 2m or coded"#),
        (#"{"id":7,"cmd":"host","op":"advertise","secondary_phy":2}"#, #""secondary_phy" must be a string"#),
        (#"{"id":7,"cmd":"host","op":"advertise","high_duty_cycle":true}"#, "host advertise takes no 'high_duty_cycle'"),
        (#"{"id":7,"cmd":"host","op":"advertise","advertisement":1}"#, "host advertise takes no 'advertisement'"),
        (#"{"id":7,"cmd":"host","op":"advertise-stop"}"#, #"missing "advertisement""#),
        (#"{"id":7,"cmd":"host","op":"advertise-stop","advertisement":0}"#, #""advertisement" must be a whole number from 1"#),
        (#"{"id":7,"cmd":"host","op":"advertise-stop","advertisement":"1"}"#, #""advertisement" must be a whole number"#),
        (#"{"id":7,"cmd":"host","op":"advertise-stop","advertisement":1,"data":""}"#, "host advertise-stop takes no 'data'"),
    ])
    func hostileAdvertiseRequestsAreRefusedNamingTheField(line: String, fragment: String) {
        let message = refusal(line)
        #expect(message?.contains(fragment) == true, "\(line): \(message ?? "decoded")")
    }

    /// What `blemu ctl` sends decodes back to the same request.
    @Test func theEncodingDecodesToTheSameRequest() throws {
        let requests: [HostRequest] = [
            .advertise(HostAdvertiseRequest()),
            .advertise(HostAdvertiseRequest(
                parameters: ProgrammedAdvertising.Parameters(data: [0x02, 0x01, 0x06], scanResponse: [], legacy: true, connectable: true,
                                                             scannable: true, intervalMilliseconds: 30),
                ownAddressType: .randomAddress)),
            .advertise(HostAdvertiseRequest(
                parameters: ProgrammedAdvertising.Parameters(connectable: true,
                                                             directedTo: LEAddress(BluetoothAddress("00:11:22:33:44:55")!, isRandom: false),
                                                             primaryPHY: .leCoded, secondaryPHY: .leCoded),
                ownAddressType: .publicAddress)),
            .advertise(HostAdvertiseRequest(
                parameters: ProgrammedAdvertising.Parameters(connectable: true, privateAddressTimeoutMilliseconds: 60_000),
                ownAddressType: .resolvableOrPublic)),
            .advertiseStop(advertisement: 4),
        ]
        for request in requests {
            let line = ControlRequest(id: 5, command: .host(request)).json.encoded
            #expect(try host(line) == request, "\(line)")
        }
    }

    @Test func ctlWordsBecomeTheAdvertiseRequest() throws {
        #expect(try HostRequest.parse(arguments: ["advertise", "--data", "020106", "--legacy", "true", "--connectable", "true",
                                                  "--scan-response", "03ff0102", "--own-address-type", "random", "--interval-ms", "50"])
                == .advertise(HostAdvertiseRequest(
                    parameters: ProgrammedAdvertising.Parameters(data: [0x02, 0x01, 0x06], scanResponse: [0x03, 0xFF, 0x01, 0x02], legacy: true,
                                                                 connectable: true, intervalMilliseconds: 50),
                    ownAddressType: .randomAddress)))
        #expect(try HostRequest.parse(arguments: ["advertise", "--directed-to", "C0:11:22:33:44:55", "--directed-type", "random",
                                                  "--connectable=true", "--primary-phy", "1m", "--secondary-phy", "2m"])
                == .advertise(HostAdvertiseRequest(
                    parameters: ProgrammedAdvertising.Parameters(connectable: true,
                                                                 directedTo: LEAddress(BluetoothAddress("C0:11:22:33:44:55")!, isRandom: true),
                                                                 secondaryPHY: .le2M))))
        #expect(try HostRequest.parse(arguments: ["advertise", "--own-address-type", "resolvable-or-random", "--rpa-timeout-ms", "5000"])
                == .advertise(HostAdvertiseRequest(parameters: ProgrammedAdvertising.Parameters(privateAddressTimeoutMilliseconds: 5000),
                                                   ownAddressType: .resolvableOrRandom)))
        #expect(try HostRequest.parse(arguments: ["advertise-stop", "--advertisement", "3"]) == .advertiseStop(advertisement: 3))
        #expect(try ControlCommand(arguments: ["host", "advertise", "--data", ""]) == .host(.advertise(HostAdvertiseRequest())))
        for (words, fragment) in [
            (["advertise", "--data", "0g"], "is not hex digits"), (["advertise", "--legacy", "yes"], "--legacy takes true or false"),
            (["advertise", "--interval-ms", "1.5"], "is not a whole number"), (["advertise", "--phy", "1m"], "host advertise takes no --phy"),
            (["advertise-stop"], #"missing "advertisement""#), (["advertise-stop", "--advertisement", "x"], "is not a whole number"),
        ] {
            do {
                _ = try HostRequest.parse(arguments: words)
                Issue.record("\(words) parsed")
            } catch {
                #expect(error.message.contains(fragment), "\(words): \(error.message)")
            }
        }
    }
}
