import BlemuATT
import BlemuCore
import BlemuGATT
import FoundationEssentials
import BlemuTestSupport
import Testing
@testable import BlemuProfile

/// GATT profile files: every mistake is one error naming the path in the file, and a profile
/// becomes a device whose database is the profile's.
@Suite struct GATTProfileTests {
    static let sample = """
        {"format": "blemu-gatt-profile", "version": 1, "name": "Scale", "appearance": 3200,
         "advertisedServices": ["181D"],
         "services": [
           {"uuid": "1800", "characteristics": [{"uuid": "2A00", "properties": ["read"], "value": "5363616c65"}]},
           {"uuid": "181D", "includes": ["6e400010-b5a3-f393-e0a9-e50e24dcca9e"], "characteristics": [
             {"uuid": "2A9E", "properties": ["read"], "value": "0100"},
             {"uuid": "2A9D", "properties": ["indicate"], "notifications": ["0064", "00c8"]},
             {"uuid": "2A9F", "properties": ["read", "write"], "value": "00",
              "descriptors": [{"uuid": "2902", "value": "0000"}, {"uuid": "2901", "value": "55736572"}]}]},
           {"uuid": "6e400010-b5a3-f393-e0a9-e50e24dcca9e", "primary": false, "characteristics": [
             {"uuid": "2A19", "properties": ["read", "broadcast"], "value": "64"}]}
         ]}
        """

    func parse(_ text: String) throws(ProfileError) -> GATTProfile {
        try GATTProfile.parse(Data(text.utf8), name: "p.json")
    }

    func refusal(_ text: String) -> String {
        do { _ = try parse(text); return "accepted" } catch { return error.description }
    }

    @Test func aGoodProfileParsesAndSurvivesEncoding() throws {
        let profile = try parse(Self.sample)
        #expect(profile.name == "Scale" && profile.services.count == 3)
        #expect(try parse(profile.encoded()) == profile)
    }

    @Test func aClonedPeersControlCharactersAreEscapedInTheFile() throws {
        var profile = try parse(Self.sample)
        profile.name = "Scale\u{1B}[2J\u{85}\u{202E}\u{2066}x"
        let text = profile.encoded()
        #expect(!text.unicodeScalars.contains { $0.value != 0x0A && VisibleText.isEscaped($0) })
        #expect(text.contains(#""Scale\u001b[2J\u0085\u202e\u2066x""#))
        #expect(try parse(text) == profile)
    }

    @Test func mistakesNameThePathInTheFile() {
        #expect(refusal("[]") == "p.json: the top level: expected an object")
        #expect(refusal("{") .hasPrefix("p.json: not JSON"))
        #expect(refusal(#"{"format":"blemu-gatt-profile","version":1,"name":"x"}"#) == #"p.json: missing "services""#)
        let base = #"{"format":"blemu-gatt-profile","version":1,"name":"x","services":[{"uuid":"180D","characteristics":[CHAR]}]}"#
        func with(_ characteristic: String) -> String { base.replacing("CHAR", with: characteristic) }
        #expect(refusal(with(#"{"properties":["read"]}"#)) == #"p.json: services[0].characteristics[0]: missing "uuid""#)
        #expect(refusal(with(#"{"uuid":"nope","properties":["read"]}"#)).hasPrefix("p.json: services[0].characteristics[0].uuid: 'nope' is not a UUID"))
        #expect(refusal(with(#"{"uuid":"2A37","properties":["read","fly"]}"#)).hasPrefix("p.json: services[0].characteristics[0].properties[1]: 'fly' is not one of"))
        #expect(refusal(with(#"{"uuid":"2A37","properties":["read"],"value":"xyz"}"#)).hasPrefix("p.json: services[0].characteristics[0].value: 'xyz' is not hex"))
        #expect(refusal(with(#"{"uuid":"2A37","properties":["read"],"value":"\#(String(repeating: "00", count: 513))"}"#))
                .hasSuffix("513 bytes; an attribute value holds at most 512"))
        #expect(refusal(with(#"{"uuid":2,"properties":[]}"#)) == "p.json: services[0].characteristics[0].uuid: expected a string")
        #expect(refusal(base.replacing("\"180D\",", with: "\"180D\",\"includes\":[\"180F\"],").replacing("CHAR", with: ""))
                .hasPrefix("p.json: services[0].includes[0]: '180F' is not the UUID of a service of this profile"))
        #expect(refusal(with(#"{"uuid":"2A37","properties":["read"],"permissions":["read-authorized","sometimes"]}"#))
                .hasPrefix("p.json: services[0].characteristics[0].permissions[1]: 'sometimes' is not one of read-encrypted"))
        #expect(refusal(#"{"format":"other","version":1,"name":"x","services":[]}"#).hasPrefix("p.json: format:"))
        #expect(refusal(#"{"format":"blemu-gatt-profile","version":2,"name":"x","services":[]}"#).hasPrefix("p.json: version:"))
    }

    /// Keys the format does not define are errors at every depth (Docs/PROFILES.md, "The
    /// format"): a misspelt `permisions` would otherwise serve the value unprotected. A key
    /// given twice is one too: the decoder would keep one of the two without a word.
    @Test func unknownAndRepeatedKeysAreRefusedByTheirPath() {
        let base = #"{"format":"blemu-gatt-profile","version":1,"name":"x","services":[{"uuid":"180D","characteristics":[CHAR]}]}"#
        func with(_ characteristic: String) -> String { base.replacing("CHAR", with: characteristic) }
        #expect(refusal(with(#"{"uuid":"2A37","properties":["read"],"value":"00","permisions":["read-encrypted"]}"#))
                == "p.json: services[0].characteristics[0].permisions: unknown key (did you mean permissions? allowed: uuid, handle, valueHandle, properties, value, notifications, descriptors, permissions, minimumKeySize)")
        // A misspelt required key is named as what it is, not as the key missing.
        #expect(refusal(with(#"{"uid":"2A37","properties":["read"]}"#)).hasPrefix("p.json: services[0].characteristics[0].uid: unknown key (did you mean uuid?"))
        #expect(refusal(with(#"{"uuid":"2A37","properties":["read"],"descriptors":[{"uuid":"2901","vlaue":"41"}]}"#))
                .hasPrefix("p.json: services[0].characteristics[0].descriptors[0].vlaue: unknown key (did you mean value?"))
        #expect(refusal(base.replacing("\"180D\",", with: "\"180D\",\"secondary\":true,").replacing("CHAR", with: ""))
                .hasPrefix("p.json: services[0].secondary: unknown key (allowed: uuid, handle, endHandle, primary, includes, characteristics)"))
        #expect(refusal(base.replacing("\"name\":\"x\",", with: "\"name\":\"x\",\"colour\":\"red\",").replacing("CHAR", with: ""))
                .hasPrefix("p.json: colour: unknown key (allowed: format, version, name,"))
        // Twice, however it is spelt in the text: the decoder sees one name.
        #expect(refusal(with(#"{"uuid":"2A37","properties":["read"],"permissions":["read-encrypted"],"p\u0065rmissions":[]}"#))
                == "p.json: services[0].characteristics[0].permissions: appears twice in one object: give each key once")
        #expect(refusal(base.replacing("\"name\":\"x\",", with: "\"name\":\"x\",\"name\":\"y\",").replacing("CHAR", with: ""))
                == "p.json: name: appears twice in one object: give each key once")
        // A key's name from the file is shown with its control characters made visible.
        #expect(refusal(with(#"{"uuid":"2A37","properties":["read"],"\u001b[2J":1}"#))
                .hasPrefix(#"p.json: services[0].characteristics[0].\x1b[2J: unknown key"#))
        // A string that spells a key is a value, not a key.
        #expect(refusal(with(#"{"uuid":"2A37","properties":["read"],"value":""}"#).replacing("\"name\":\"x\"", with: "\"name\":\"colour\"")) == "accepted")
    }

    /// Includes of later services, at any depth, are served (an included service may be
    /// anywhere in the database, Vol 3, Part G, 3.2): each included service is declared before
    /// the services that include it. Circular includes are refused by their path.
    @Test func includesOfLaterServicesAreServedAndCirclesRefused() throws {
        func profile(_ includes: [String: String]) -> String {
            let services = ["180A", "180F", "1812"].map { uuid in
                #"{"uuid":"\#(uuid)","includes":[\#(includes[uuid].map { "\"\($0)\"" } ?? "")],"characteristics":[{"uuid":"2A19","properties":["read"],"value":"01"}]}"#
            }
            return #"{"format":"blemu-gatt-profile","version":1,"name":"x","services":[\#(services.joined(separator: ","))]}"#
        }
        // 180A includes 180F, which includes 1812: a chain forward through the file.
        let device = ProfileDevice(try parse(profile(["180A": "180F", "180F": "1812"])))
        #expect(device.services.map(\.uuid) == [BluetoothUUID(0x1812), BluetoothUUID(0x180F), BluetoothUUID(0x180A)])
        #expect(device.services[1].includes.map(\.uuid) == [BluetoothUUID(0x1812)])
        #expect(device.services[2].includes.map(\.uuid) == [BluetoothUUID(0x180F)])
        let database = try GATTDatabase(services: device.services)
        #expect(database.attributes.filter { $0.type == GATTType.include }.count == 2)
        #expect(refusal(profile(["180A": "180F", "180F": "1812", "1812": "180A"]))
                == "p.json: services[2].includes[0]: '180A' includes services[2] again (itself or through the services it includes): circular includes are not served")
        #expect(refusal(profile(["180F": "180F"])).hasPrefix("p.json: services[1].includes[0]: '180F' includes services[1] again"))
    }

    /// A wrong path is refused before anything is read: a device that never ends, a folder.
    @Test func onlyARegularFileOfBoundedSizeIsRead() {
        for path in ["/dev/zero", "/tmp", "/nonexistent/profile.json"] {
            do {
                _ = try GATTProfile.load(path: path)
                Issue.record("\(path) was accepted")
            } catch {
                #expect(error.description.hasPrefix("\(path): "))
            }
        }
    }

    /// The device serves the profile: the stack's services left out, included services first,
    /// read-only values cached, writable and notifying ones dynamic, what cannot be served dropped.
    @Test func theDeviceServesTheProfile() throws {
        let device = ProfileDevice(try parse(Self.sample))
        #expect(device.profile.defaultName == "Scale" && device.profile.appearance == 3200)
        #expect(device.profile.advertisedServices == [BluetoothUUID(0x181D)])
        #expect(device.services.map(\.uuid) == [BluetoothUUID("6e400010-b5a3-f393-e0a9-e50e24dcca9e")!, BluetoothUUID(0x181D)])
        #expect(device.services[1].includes.first === device.services[0])
        let chars = device.services[1].characteristics
        #expect(chars[0].cachedValue == [0x01, 0x00])
        #expect(chars[1].cachedValue == nil && chars[1].notifies)
        #expect(chars[2].onWrite != nil && chars[2].descriptors.map(\.uuid) == [GATTType.userDescription])
        #expect(device.services[0].characteristics[0].properties == [.read])
        #expect(device.adjustments.count == 1 && device.adjustments[0].contains("broadcast"))
        // It builds: handles, CCCDs and all.
        let database = try GATTDatabase(services: device.services)
        #expect(database.characteristics.count == 4)
        // A write is what the next read sees, at any offset.
        let peer = ATTPeer(connectionHandle: 1, address: BluetoothAddress(value: 1))
        #expect(chars[2].onWrite?(WriteRequest(peer: peer, offset: 0, value: [7, 8], withResponse: true)) == nil)
        #expect(chars[2].onWrite?(WriteRequest(peer: peer, offset: 1, value: [9], withResponse: true)) == nil)
        var read = ValueBuffer()
        #expect(chars[2].onRead?(ReadRequest(peer: peer, offset: 0), &read) == nil)
        #expect(Array(read.bytes) == [7, 9])
    }

    /// Permissions a profile declares are the characteristic's, beside the access its
    /// properties give, for cached and dynamic values alike.
    @Test func permissionsAreServed() throws {
        let profile = try parse(#"""
            {"format":"blemu-gatt-profile","version":1,"name":"Door","services":[{"uuid":"180D","characteristics":[
              {"uuid":"2A20","properties":["read"],"value":"01","permissions":["read-authorized"]},
              {"uuid":"2A21","properties":["read","write"],"value":"02","permissions":["read-encrypted","write-authorized","secure-connections"]},
              {"uuid":"2A22","properties":["read"],"value":"03"}]}]}
            """#)
        #expect(try parse(profile.encoded()) == profile)
        let chars = ProfileDevice(profile).services[0].characteristics
        #expect(chars[0].cachedValue == [0x01] && chars[0].permissions == [.readable, .readAuthorizationRequired])
        #expect(chars[1].permissions == [.readable, .writeable, .readEncryptionRequired, .writeAuthorizationRequired, .secureConnectionsRequired])
        #expect(chars[2].permissions == [.readable])
    }

    /// What a server on no link hands its delegate to send.
    final class Answers: ATTServerDelegate {
        var pdus: [[UInt8]] = []
        func attServer(_ server: ATTServer, send pdu: ArraySlice<UInt8>, kind: ATTSendKind) -> Bool { pdus.append(Array(pdu)); return true }
        func attServerTransactionTimedOut(_ server: ATTServer) {}
    }

    /// `minimumKeySize` (Vol 3, Part C, 10.3.1): the ATT server answers a link whose key is
    /// shorter with Encryption Key Size Too Short (0x0C), and the device's pairing asks for it.
    @Test func aMinimumKeySizeIsDeclaredAndServed() throws {
        let profile = try parse(#"""
            {"format":"blemu-gatt-profile","version":1,"name":"Vault","services":[{"uuid":"180D","characteristics":[
              {"uuid":"2A20","properties":["read"],"value":"01","permissions":["read-encrypted"],"minimumKeySize":16},
              {"uuid":"2A21","properties":["read","write"],"value":"02","permissions":["read-encrypted"]}]}]}
            """#)
        #expect(try parse(profile.encoded()) == profile)
        let chars = ProfileDevice(profile).services[0].characteristics
        #expect(chars.map(\.minimumEncryptionKeySize) == [16, 7])
        let database = try GATTDatabase(services: ProfileDevice(profile).services)
        #expect(database.requiredEncryptionKeySize == 16)

        let answers = Answers()
        let server = ATTServer(database: database, peer: ATTPeer(connectionHandle: 1, address: BluetoothAddress(value: 1)),
                               scheduler: ManualScheduler())
        server.delegate = answers
        server.session.linkSecurity = LinkSecurity(isEncrypted: true, isAuthenticated: false, isSecureConnections: true, encryptionKeySize: 7)
        let guarded = try #require(database.characteristic(BluetoothUUID(0x2A20))).valueHandle
        let open = try #require(database.characteristic(BluetoothUUID(0x2A21))).valueHandle
        func read(_ handle: UInt16) -> [UInt8]? {
            server.receive([0x0A, UInt8(handle & 0xFF), UInt8(handle >> 8)][...])
            return answers.pdus.last
        }
        #expect(read(guarded) == [0x01, 0x0A, UInt8(guarded & 0xFF), UInt8(guarded >> 8), 0x0C])
        #expect(read(open) == [0x0B, 0x02], "encrypted with any key: served")
        server.session.linkSecurity.encryptionKeySize = 16
        #expect(read(guarded) == [0x0B, 0x01])

        let base = #"{"format":"blemu-gatt-profile","version":1,"name":"x","services":[{"uuid":"180D","characteristics":[CHAR]}]}"#
        #expect(refusal(base.replacing("CHAR", with: #"{"uuid":"2A20","properties":["read"],"permissions":["read-encrypted"],"minimumKeySize":17}"#))
                == "p.json: services[0].characteristics[0].minimumKeySize: 17 is not a key size: 7 to 16 octets")
        #expect(refusal(base.replacing("CHAR", with: #"{"uuid":"2A20","properties":["read"],"minimumKeySize":16}"#))
                .hasPrefix("p.json: services[0].characteristics[0].minimumKeySize: goes with a permission that requires encryption"))
    }

    /// What a peripheral's refusals of reads show (Vol 3, Part F, 3.4.1.1), as the dump records it.
    @Test func refusalsBecomeReadPermissions() {
        #expect(GATTProfile.readPermission(refusedWith: 0x0F) == "read-encrypted")
        #expect(GATTProfile.readPermission(refusedWith: 0x0C) == "read-encrypted")
        #expect(GATTProfile.readPermission(refusedWith: 0x05) == "read-authenticated")
        #expect(GATTProfile.readPermission(refusedWith: 0x08) == "read-authorized")
        // Read Not Permitted and the rest show no permission.
        for code: UInt8 in [0x00, 0x01, 0x02, 0x03, 0x0A, 0x0E, 0x80, 0xFF] { #expect(GATTProfile.readPermission(refusedWith: code) == nil) }
        // Every name is one the loader takes.
        for code in UInt8.min...UInt8.max {
            if let name = GATTProfile.readPermission(refusedWith: code) {
                #expect(GATTProfile.permissionNames.contains { $0.0 == name } && GATTProfile.descriptorPermissionNames.contains(name))
            }
        }
        #expect(GATTProfile.readPermissions(refusals: [], readOnAuthenticatedLink: nil) == nil)
        #expect(GATTProfile.readPermissions(refusals: [0x02], readOnAuthenticatedLink: nil) == nil)
        // No pairing: what the refusal says.
        #expect(GATTProfile.readPermissions(refusals: [0x05], readOnAuthenticatedLink: nil) == ["read-authenticated"])
        #expect(GATTProfile.readPermissions(refusals: [0x0F], readOnAuthenticatedLink: nil) == ["read-encrypted"])
        // Paired with a passkey and read: the clone asks for the same.
        #expect(GATTProfile.readPermissions(refusals: [0x05], readOnAuthenticatedLink: true) == ["read-authenticated"])
        // Read after Just Works: 0x05 only meant "pair"; encryption is what it needs.
        #expect(GATTProfile.readPermissions(refusals: [0x05], readOnAuthenticatedLink: false) == ["read-encrypted"])
        // Refused again after Just Works: authentication it is (and encryption goes without saying).
        #expect(GATTProfile.readPermissions(refusals: [0x0F, 0x05], readOnAuthenticatedLink: nil) == ["read-authenticated"])
        // Security first, authorization last: both kept.
        #expect(GATTProfile.readPermissions(refusals: [0x05, 0x08], readOnAuthenticatedLink: nil) == ["read-authenticated", "read-authorized"])
        #expect(GATTProfile.readPermissions(refusals: [0x08, 0x08], readOnAuthenticatedLink: nil) == ["read-authorized"])
    }

    /// A dumped profile with permissions on values and descriptors is written, read back and
    /// served with them; a descriptor's authorization is left out and said.
    @Test func recordedPermissionsAreWrittenAndServed() throws {
        var characteristic = GATTProfile.Characteristic(
            uuid: "2A20", properties: ["read"],
            descriptors: [GATTProfile.Descriptor(uuid: "2901", value: "41", permissions: ["read-encrypted"]),
                          GATTProfile.Descriptor(uuid: "2904", permissions: ["read-authenticated", "read-authorized"])],
            permissions: GATTProfile.readPermissions(refusals: [0x05], readOnAuthenticatedLink: true))
        characteristic.value = "01"
        let profile = GATTProfile(name: "Door", services: [GATTProfile.Service(uuid: "180D", characteristics: [characteristic])])
        let text = profile.encoded()
        #expect(text.contains(#""permissions" : ["#) && text.contains(#""read-authenticated""#) && text.contains(#""read-encrypted""#))
        let back = try parse(text)
        #expect(back == profile)
        let device = ProfileDevice(back)
        let served = device.services[0].characteristics[0]
        #expect(served.permissions == [.readable, .readAuthenticationRequired])
        #expect(served.descriptors.map(\.permissions) == [[.readEncryptionRequired], [.readAuthenticationRequired]])
        #expect(device.adjustments == ["180D/2A20: descriptor 2904: read-authorized left out (the stack authorizes values, not descriptors)"])
        let base = #"{"format":"blemu-gatt-profile","version":1,"name":"x","services":[{"uuid":"180D","characteristics":[{"uuid":"2A37","properties":["read"],"descriptors":[{"uuid":"2901","permissions":["write-encrypted"]}]}]}]}"#
        #expect(refusal(base) == "p.json: services[0].characteristics[0].descriptors[0].permissions[0]: 'write-encrypted' is not one of read-encrypted, read-authenticated, read-authorized")
    }
}

#if canImport(Glibc)
import Glibc

/// A FIFO at a profile's path: the old check (stat, then Data(contentsOf:)) could be raced, and
/// a FIFO swapped in between blocked the read; now kind and size are checked on what was opened.
@Suite struct GATTProfileFileTests {
    @Test func aFIFOIsRefusedAtOnce() {
        let directory = TemporaryDirectory()
        let path = directory.file("scale.json")
        #expect(mkfifo(path, 0o600) == 0)
        var message: String?
        let time = ContinuousClock().measure {
            do { _ = try GATTProfile.load(path: path) } catch { message = "\(error)" }
        }
        #expect(time < .seconds(1))
        #expect(message == "\(path): a FIFO, not a regular file")
        #expect(throws: ProfileError.self) { _ = try GATTProfile.load(path: "/dev/zero") }
    }
}
#endif
