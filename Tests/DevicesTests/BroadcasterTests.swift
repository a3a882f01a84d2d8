import BlemuBroadcast
import BlemuCore
import BlemuCrypto
import BlemuDevice
import BlemuDevices
import BlemuHCI
import BlemuHost
import BlemuSimulator
import BlemuTestSupport
import Logging
import Testing
#if canImport(Glibc)
import Glibc
@testable import HostTestSupport
#endif

/// A broadcaster whose data and interval a test sets.
final class ProbeBroadcaster: BroadcastingDevice {
    static let deviceName = "probe-broadcaster"
    static let summary = "test broadcaster"
    var profile = DeviceProfile(defaultName: "Probe B", advertisedServices: [], appearance: 0, txPowerLevel: nil)
    var advertisingData: [UInt8]
    var broadcastInterval: UInt16 = 1600
    var context: BroadcastContext?
    init(_ data: [UInt8]) { advertisingData = data }
    func start(broadcasting context: BroadcastContext) { self.context = context }
}

/// Non-connectable advertising for devices that never take a connection (`BroadcastingDevice`):
/// ADV_NONCONN_IND on a legacy controller (Vol 4, Part E, 7.8.5: Advertising_Type 0x03), a set of
/// its own with legacy or extended non-connectable PDUs on an extended one (7.8.53), the data
/// re-set only when its bytes change (7.8.7, 7.8.54), and the devices' payloads.
@Suite struct BroadcasterTests {
    static let data20: [UInt8] = [0x02, 0x01, 0x06, 0x10, 0x16, 0xD2, 0xFC] + [UInt8](repeating: 0x40, count: 13)
    static let data40: [UInt8] = [0x02, 0x01, 0x06, 0x24, 0xFF, 0xFF, 0xFF] + [UInt8](repeating: 0x11, count: 33)

    static func sent(_ c: SimulatedController, since count: Int) -> [HCICommand] { Array(c.commands[count...]) }

    static func legacyData(_ data: [UInt8]) -> [UInt8] { [UInt8(data.count)] + data + [UInt8](repeating: 0, count: 31 - data.count) }

    /// LE Set Extended Advertising Parameters' Advertising_Event_Properties (7.8.53), for `set`.
    static func properties(_ c: SimulatedController, set: UInt8) -> [UInt16] {
        c.commands(HCIOpcode.leSetExtendedAdvertisingParameters).filter { $0.parameters.first == set }
            .map { UInt16($0.parameters[1]) | UInt16($0.parameters[2]) << 8 }
    }

    // MARK: The host's non-connectable path

    @Test func aLegacyControllerAdvertisesTheBroadcasterNonConnectableWithItsDataOnly() throws {
        let device = ProbeBroadcaster(Self.data20)
        let bench = try Bench(device: device)
        let c = bench.controller
        let parameters = try #require(c.commands(HCIOpcode.leSetAdvertisingParameters).last)
        #expect(parameters.parameters[4] == 0x03)   // ADV_NONCONN_IND
        #expect(Array(parameters.parameters[0..<4]) == [0x40, 0x06, 0x40, 0x06])   // 1 s, both bounds
        #expect(c.commands(HCIOpcode.leSetAdvertisingData).map(\.parameters) == [Self.legacyData(Self.data20)])
        // No scan response (nobody may scan it) and no TX power read (not in its data).
        #expect(c.commands(HCIOpcode.leSetScanResponseData).isEmpty)
        #expect(c.commands(HCIOpcode.leReadAdvertisingChannelTxPower).isEmpty)
        #expect(bench.peripheral.isAdvertising)
        #expect(bench.peripheral.broadcastPayload == Self.data20)
        // One interval, no phases: a minute later nothing was sent again.
        let before = c.commands.count
        bench.run(for: .seconds(60))
        #expect(Self.sent(c, since: before).isEmpty)
    }

    @Test func theSameBytesSendNothingNewBytesOnlyTheDataAndANewIntervalRestarts() throws {
        let device = ProbeBroadcaster(Self.data20)
        let bench = try Bench(device: device)
        let c = bench.controller
        var before = c.commands.count
        device.context?.broadcastChanged()
        #expect(Self.sent(c, since: before).isEmpty, "unchanged data: no command, no wakeup of the controller")

        var changed = Self.data20
        changed[19] = 0x41
        device.advertisingData = changed
        before = c.commands.count
        device.context?.broadcastChanged()
        #expect(Self.sent(c, since: before).map(\.opcode) == [HCIOpcode.leSetAdvertisingData])
        #expect(Self.sent(c, since: before).first?.parameters == Self.legacyData(changed))
        #expect(bench.peripheral.broadcastPayload == changed)

        device.broadcastInterval = 160
        before = c.commands.count
        device.context?.broadcastChanged()
        #expect(Self.sent(c, since: before).map(\.opcode) == [HCIOpcode.leSetAdvertisingEnable, HCIOpcode.leSetAdvertisingParameters,
                                                              HCIOpcode.leSetAdvertisingData, HCIOpcode.leSetAdvertisingEnable])
        #expect(bench.peripheral.advertisingInterval == 160)
    }

    @Test func dataBeyond31BytesIsRefusedOnALegacyController() throws {
        let capture = CapturedLog()
        let bench = try Bench(device: ProbeBroadcaster(Self.data40), logger: capture.logger)
        #expect(bench.controller.commands(HCIOpcode.leSetAdvertisingEnable).isEmpty)
        #expect(!bench.peripheral.isAdvertising)
        #expect(capture.lines.contains { $0.contains("broadcast data of 40 bytes does not fit this controller's advertising (31 bytes") })
    }

    /// A controller whose extended sets take less than the data (LE Read Maximum Advertising
    /// Data Length, Vol 4, Part E, 7.8.57) is not handed it, which it would refuse with Memory
    /// Capacity Exceeded (7.8.54): an error says what fits; one that takes it advertises it.
    @Test func dataBeyondWhatTheControllersSetsTakeIsRefusedWithItsLimit() throws {
        let capture = CapturedLog()
        let bench = try Bench(device: ProbeBroadcaster(Self.data40), logger: capture.logger) {
            $0.extendedAdvertisingSets = 4
            $0.maximumAdvertisingDataLength = 35
        }
        #expect(bench.controller.commands(HCIOpcode.leReadMaximumAdvertisingDataLength).count == 1)
        #expect(bench.controller.commands(HCIOpcode.leSetExtendedAdvertisingData).isEmpty)
        #expect(!bench.peripheral.isAdvertising)
        #expect(capture.lines.contains { $0.contains("broadcast data of 40 bytes does not fit this controller's advertising (35 bytes in an extended set)") },
                "\(capture.lines)")
        let roomy = try Bench(device: ProbeBroadcaster(Self.data40)) {
            $0.extendedAdvertisingSets = 4
            $0.maximumAdvertisingDataLength = 40
        }
        #expect(roomy.peripheral.isAdvertising)
    }

    @Test func onAnExtendedControllerTheBroadcasterHasItsOwnNonConnectableSetBesideAConnectableDevice() throws {
        let device = ProbeBroadcaster(Self.data20)
        let bench = try SharedBench(devices: [HeartRateDevice(seed: 1), device])
        let c = bench.controller
        let heart = try #require(bench.peripherals[0].advertisingSet)
        let broadcaster = try #require(bench.peripherals[1].advertisingSet)
        #expect(heart != broadcaster)
        #expect(c.enabledSets == [heart, broadcaster])
        #expect(Self.properties(c, set: heart).last == 0x0013)          // connectable, scannable, legacy
        #expect(Self.properties(c, set: broadcaster) == [0x0010])       // ADV_NONCONN_IND
        #expect(c.commands(HCIOpcode.leSetExtendedScanResponseData).filter { $0.parameters.first == broadcaster }.isEmpty)
        #expect(c.commands(HCIOpcode.leSetExtendedAdvertisingData).filter { $0.parameters.first == broadcaster }.map(\.parameters)
                == [[broadcaster, 0x03, 0x01, 20] + Self.data20])

        // 40 bytes: the set is restarted with extended non-connectable, non-scannable PDUs.
        device.advertisingData = Self.data40
        var before = c.commands.count
        device.context?.broadcastChanged()
        #expect(Self.properties(c, set: broadcaster).last == 0x0000)
        #expect(Self.sent(c, since: before).filter { $0.opcode == HCIOpcode.leSetExtendedAdvertisingData }.map(\.parameters)
                == [[broadcaster, 0x03, 0x01, 40] + Self.data40])
        #expect(c.enabledSets.contains(broadcaster))

        // The same 40 bytes again: nothing.
        before = c.commands.count
        device.context?.broadcastChanged()
        #expect(Self.sent(c, since: before).isEmpty)

        // New 40 bytes: the data only, the set left running.
        var changed = Self.data40
        changed[39] = 0x12
        device.advertisingData = changed
        before = c.commands.count
        device.context?.broadcastChanged()
        #expect(Self.sent(c, since: before).map(\.opcode) == [HCIOpcode.leSetExtendedAdvertisingData])
        // The connectable device kept its set untouched throughout.
        #expect(Self.properties(c, set: heart).allSatisfy { $0 == 0x0013 })
        #expect(bench.fatal.isEmpty)
    }

    // MARK: The devices

    static func bthome(_ peripheral: Peripheral, key: AESCCMKey? = nil) throws -> BTHomeReading {
        let data = try #require(peripheral.broadcastPayload)
        return try BTHome.decode(advertisingData: data[...], key: key, address: key == nil ? nil : peripheral.advertisingAddress)
    }

    static func setting(_ device: Device, _ key: String, _ value: String) -> String? {
        device.settings.first { $0.key == key }.map { $0.apply(value) } ?? "no setting \(key)"
    }

    @Test func theThermometerAdvertisesWhatWasSetWithANewPacketIDOnlyForANewReading() throws {
        let device = BTHomeThermometerDevice()
        let bench = try Bench(device: device)
        let c = bench.controller
        #expect(Self.setting(device, "temperature", "21.5") == nil)
        #expect(Self.setting(device, "humidity", "48.25") == nil)
        #expect(Self.setting(device, "battery", "93") == nil)
        var reading = try Self.bthome(bench.peripheral)
        #expect(!reading.encrypted && !reading.packet.triggerBased)
        #expect(reading.packet.objects.map(\.id) == [0x00, 0x01, 0x02, 0x03])
        #expect(reading.packet.first(.temperature)?.integer == 2150)
        #expect(reading.packet.first(.humidity)?.integer == 4825)
        #expect(reading.packet.first(.battery)?.integer == 93)
        let id = try #require(reading.packetID)

        // The same value again: no new reading, nothing sent.
        var before = c.commands.count
        #expect(Self.setting(device, "battery", "93") == nil)
        #expect(Self.sent(c, since: before).isEmpty)
        #expect(try Self.bthome(bench.peripheral).packetID == id)

        // Over ten minutes the room moves (the thermal model): each reading the sensor takes
        // that differs is one new packet id and one LE Set Advertising Data; one that does not
        // is nothing.
        before = c.commands.count
        bench.run(for: .seconds(600))
        let sent = Self.sent(c, since: before)
        #expect(sent.allSatisfy { $0.opcode == HCIOpcode.leSetAdvertisingData })
        reading = try Self.bthome(bench.peripheral)
        #expect(Int(reading.packetID ?? 0) == (Int(id) + sent.count) % 256)
        #expect(sent.count <= 60, "at most one reading every 10 s")
        let values = sent.map(\.parameters)
        #expect(zip(values, values.dropFirst()).allSatisfy { $0 != $1 })
    }

    @Test func theEncryptedThermometerOpensWithItsKeyAndTakesANewCounterPerReading() throws {
        let temporary = TemporaryDirectory(prefix: "blemu-broadcaster-test")
        defer { temporary.remove() }
        let directory = temporary.path
        let key = try #require(AESCCMKey([UInt8](repeating: 0x5A, count: 16)))
        let device = BTHomeThermometerDevice()
        device.broadcast.encrypt(key: key, counters: BTHomeCounterStore(path: directory + "/counter"))
        let bench = try Bench(device: device)
        let first = try Self.bthome(bench.peripheral, key: key)
        #expect(first.encrypted)
        #expect(Self.setting(device, "battery", "50") == nil)
        let second = try Self.bthome(bench.peripheral, key: key)
        #expect(second.packet.first(.battery)?.integer == 50)
        let firstCounter = try #require(first.counter)
        let secondCounter = try #require(second.counter)
        #expect(secondCounter > firstCounter)
        // A wrong key fails the MIC.
        let wrong = try #require(AESCCMKey([UInt8](repeating: 0x5B, count: 16)))
        #expect(throws: BTHomeDecodeError.self) { try Self.bthome(bench.peripheral, key: wrong) }
        // The counter's block is reserved in the file before it is used.
        guard case .success(let bytes) = RegularFile.read(directory + "/counter", maximumBytes: 256, followSymlinks: false) else {
            Issue.record("no counter file")
            return
        }
        #expect(String(decoding: bytes, as: UTF8.self).hasPrefix("blemu-bthome-counter 1 next 256"))
    }

    /// With `--privacy` the address changes under an encrypted reading; BTHome's nonce holds
    /// the address (bthome.io/encryption), so the reading is sealed again, with a new counter
    /// and the same packet id, before advertising restarts from the new address: what the
    /// controller advertises always opens under the address it advertises from.
    @Test func anEncryptedReadingIsSealedAgainForEachNewPrivateAddress() throws {
        let temporary = TemporaryDirectory(prefix: "blemu-broadcaster-test")
        defer { temporary.remove() }
        let directory = temporary.path
        let key = try #require(AESCCMKey([UInt8](repeating: 0x5A, count: 16)))
        let device = BTHomeThermometerDevice()
        device.broadcast.encrypt(key: key, counters: BTHomeCounterStore(path: directory + "/counter"))
        // 13 s: each new address comes between two of the readings taken every 10 s.
        let bench = try Bench(device: device, privacy: true, rpaTimeout: .seconds(13))
        let c = bench.controller
        var counters: [UInt32] = []
        var addresses: [[UInt8]] = []
        for _ in 0..<4 {
            bench.run(for: .seconds(13))
            // The controller's address and data now: the data opens under that address.
            let address = try #require(c.commands(HCIOpcode.leSetRandomAddress).last).parameters
            #expect(address == bench.peripheral.advertisingAddress.littleEndianBytes)
            let data = try #require(bench.peripheral.broadcastPayload)
            #expect(c.commands(HCIOpcode.leSetAdvertisingData).last?.parameters == Self.legacyData(data))
            let reading = try Self.bthome(bench.peripheral, key: key)
            counters.append(try #require(reading.counter))
            addresses.append(address)
            #expect(bench.peripheral.isAdvertising)
        }
        #expect(Set(addresses).count == 4, "a new private address each time")
        #expect(zip(counters, counters.dropFirst()).allSatisfy { $0 < $1 }, "a new counter for each sealing")
        // After each LE Set Random Address, the data enabled next was sealed under it.
        var address: BluetoothAddress?
        for command in c.commands {
            if command.opcode == HCIOpcode.leSetRandomAddress {
                address = try? BluetoothAddress(littleEndian: command.parameters)
            } else if command.opcode == HCIOpcode.leSetAdvertisingData, let address {
                let data = command.parameters[1...Int(command.parameters[0])]
                #expect(throws: Never.self) { try BTHome.decode(advertisingData: data, key: key, address: address) }
            }
        }
    }

    // MARK: Periodic advertising (Vol 6, Part B, 4.4.2.12; Vol 4, Part E, 7.8.61 - 7.8.63)

    static func periodicController(_ c: SimulatedController) {
        c.extendedAdvertisingSets = 4
        c.supportsPeriodicAdvertising = true
    }

    @Test func aPeriodicTrainCarriesTheReadingsOnAnExtendedSetAndGetsNewDataOnlyWhenItChanges() throws {
        let device = BTHomeThermometerDevice()
        let bench = try Bench(device: device, configure: Self.periodicController)
        let c = bench.controller
        let set = try #require(bench.peripheral.advertisingSet)
        #expect(Self.properties(c, set: set) == [0x0010], "without a train: legacy PDUs, every scanner hears it")

        var before = c.commands.count
        #expect(Self.setting(device, "periodic", "100") == nil)
        var sent = Self.sent(c, since: before)
        // The set restarts with extended non-connectable, non-scannable PDUs (a train needs
        // them: 7.8.61), then the train's parameters (100 ms = 80 units of 1.25 ms), its data
        // (the advertising data, complete: operation 0x03) and its enable, then the set's.
        #expect(sent.map(\.opcode) == [HCIOpcode.leSetExtendedAdvertisingEnable, HCIOpcode.leSetExtendedAdvertisingParameters,
                                       HCIOpcode.leSetAdvertisingSetRandomAddress, HCIOpcode.leSetExtendedAdvertisingData,
                                       HCIOpcode.leSetPeriodicAdvertisingParameters, HCIOpcode.leSetPeriodicAdvertisingData,
                                       HCIOpcode.leSetPeriodicAdvertisingEnable, HCIOpcode.leSetExtendedAdvertisingEnable])
        #expect(Self.properties(c, set: set).last == 0x0000)
        #expect(sent[4].parameters == [set, 80, 0, 80, 0, 0, 0])
        let data = try #require(bench.peripheral.broadcastPayload)
        #expect(sent[5].parameters == [set, 0x03, UInt8(data.count)] + data)
        #expect(sent[6].parameters == [0x01, set])
        #expect(bench.peripheral.host.advertiser.periodicSets == [set], "every command accepted (the controller refuses a train on legacy PDUs)")
        #expect(bench.peripheral.periodicInterval == 80)

        // A new reading: the set's data and the train's, nothing else.
        before = c.commands.count
        #expect(Self.setting(device, "temperature", "19.25") == nil)
        sent = Self.sent(c, since: before)
        let reading = try #require(bench.peripheral.broadcastPayload)
        #expect(sent.map(\.opcode) == [HCIOpcode.leSetExtendedAdvertisingData, HCIOpcode.leSetPeriodicAdvertisingData])
        #expect(sent.last?.parameters == [set, 0x03, UInt8(reading.count)] + reading)
        #expect(try Self.bthome(bench.peripheral).packet.first(.temperature)?.integer == 1925)
        // The same reading: nothing.
        before = c.commands.count
        #expect(Self.setting(device, "temperature", "19.25") == nil)
        #expect(Self.sent(c, since: before).isEmpty)

        // Off: the train is disabled by itself (disabling the set leaves it running, 7.8.56),
        // and the set goes back to legacy PDUs.
        before = c.commands.count
        #expect(Self.setting(device, "periodic", "off") == nil)
        sent = Self.sent(c, since: before)
        #expect(sent.first?.opcode == HCIOpcode.leSetPeriodicAdvertisingEnable && sent.first?.parameters == [0x00, set])
        #expect(!sent.dropFirst().contains { $0.opcode == HCIOpcode.leSetPeriodicAdvertisingEnable })
        #expect(Self.properties(c, set: set).last == 0x0010)
        #expect(bench.peripheral.host.advertiser.periodicSets.isEmpty && bench.peripheral.periodicInterval == nil)
        #expect(bench.peripheral.isAdvertising)
        #expect(Self.setting(device, "periodic", "7") != nil && Self.setting(device, "periodic", "yes") != nil)
    }

    @Test func aControllerWithoutPeriodicAdvertisingRefusesTheSettingAndAConfiguredTrainIsAnError() throws {
        // The control socket: refused with the reason, nothing sent.
        for (extended, reason) in [(true, "LE Periodic Advertising"), (false, "LE Extended Advertising")] {
            let device = BTHomeThermometerDevice()
            let bench = try Bench(device: device) { $0.extendedAdvertisingSets = extended ? 4 : 0 }
            let refusal = Self.setting(device, "periodic", "100")
            #expect(refusal?.contains(reason) == true, "\(String(describing: refusal))")
            #expect(bench.controller.commands(HCIOpcode.leSetPeriodicAdvertisingParameters).isEmpty)
        }
        // A configuration file's value (set before the start): an error in the log, and the
        // readings still broadcast, without the train.
        let capture = CapturedLog()
        let device = BTHomeThermometerDevice()
        #expect(Self.setting(device, "periodic", "100") == nil)
        let bench = try Bench(device: device, logger: capture.logger) { $0.extendedAdvertisingSets = 4 }
        #expect(capture.lines.contains { $0.hasPrefix("error") && $0.contains("periodic advertising every 100.0 ms asked for, but the controller has no LE Periodic Advertising") },
                "\(capture.lines)")
        #expect(bench.controller.commands(HCIOpcode.leSetPeriodicAdvertisingParameters).isEmpty)
        #expect(bench.peripheral.isAdvertising && bench.peripheral.periodicInterval == nil)
        // Reported once, not at every reading.
        bench.run(for: .seconds(120))
        #expect(capture.lines.filter { $0.contains("asked for") }.count == 1)
    }

    /// A broadcaster makes no wakeups but its advertising: the thermometer measures every 10 s,
    /// but wakes only for a measurement whose reading differs from the one advertised (its
    /// model is solved exactly, so it knows when that is), and a setting starts that anew.
    @Test func theThermometerWakesOnlyForAReadingThatDiffers() throws {
        let device = BTHomeThermometerDevice()
        let bench = try Bench(device: device)
        let c = bench.controller
        #expect(bench.scheduler.pendingCount == 1, "the next reading's timer only")
        let fired = bench.scheduler.firedCount
        let before = c.commands.count
        bench.run(for: .seconds(3600))
        let sent = Self.sent(c, since: before)
        #expect(sent.allSatisfy { $0.opcode == HCIOpcode.leSetAdvertisingData })
        #expect(bench.scheduler.firedCount - fired == sent.count, "each wakeup sends a new reading")
        #expect(!sent.isEmpty && sent.count < 360)
        // A setting measures now and looks ahead again: still one timer.
        let packetID = try Self.bthome(bench.peripheral).packetID
        #expect(Self.setting(device, "temperature", "30") == nil)
        #expect(try Self.bthome(bench.peripheral).packetID != packetID)
        #expect(bench.scheduler.pendingCount == 1)
        let afterSet = bench.scheduler.firedCount
        let sentBefore = c.commands.count
        bench.run(for: .seconds(600))
        #expect(bench.scheduler.firedCount - afterSet == Self.sent(c, since: sentBefore).count)
        device.stop()
        #expect(bench.scheduler.pendingCount == 0)
    }

    @Test func theDoorTellsAButtonEventOnceAndIsTriggerBased() throws {
        let device = BTHomeDoorDevice()
        let bench = try Bench(device: device)
        let c = bench.controller
        #expect(Self.setting(device, "open", "1") == nil)
        var reading = try Self.bthome(bench.peripheral)
        #expect(reading.packet.triggerBased)
        #expect(reading.packet.first(.opening)?.integer == 1)
        #expect(reading.packet.first(.button) == nil)
        let before = c.commands.count
        #expect(Self.setting(device, "open", "1") == nil)
        #expect(Self.sent(c, since: before).isEmpty, "the same state: no new reading")
        let id = reading.packetID
        #expect(Self.setting(device, "button", "double_press") == nil)
        reading = try Self.bthome(bench.peripheral)
        #expect(reading.packet.first(.button)?.integer == Int64(BTHomeButtonEvent.doublePress.rawValue))
        #expect(reading.packetID != id)
        #expect(Self.setting(device, "open", "0") == nil)
        reading = try Self.bthome(bench.peripheral)
        #expect(reading.packet.first(.button) == nil && reading.packet.first(.opening)?.integer == 0)
        #expect(Self.setting(device, "button", "sneeze") != nil)
    }

    @Test func theIBeaconAndEddystoneAdvertiseTheirSettings() throws {
        let beacon = IBeaconDevice()
        let bench = try Bench(device: beacon)
        #expect(Self.setting(beacon, "uuid", "74278BDA-B644-4520-8F0C-720EAF059935") == nil)
        #expect(Self.setting(beacon, "major", "258") == nil)
        let beaconData = try #require(bench.peripheral.broadcastPayload)
        let found = try #require(try IBeacon.find(in: beaconData[...]))
        #expect(found.uuidText.lowercased() == "74278bda-b644-4520-8f0c-720eaf059935")
        #expect(found.major == 258 && found.minor == 1 && found.measuredPower == -59)
        #expect(Self.setting(beacon, "uuid", "7427") != nil)

        let eddystone = EddystoneDevice()
        let other = try Bench(device: eddystone)
        #expect(Self.setting(eddystone, "url", "https://www.example.com/") == nil)
        var kinds: [String] = []
        var telemetry: [(UInt32, UInt32)] = []
        for _ in 0..<10 {
            let frameData = try #require(other.peripheral.broadcastPayload)
            switch try EddystoneFrame.find(in: frameData[...]) {
            case .uid?: kinds.append("uid")
            case .url(_, let url)?:
                kinds.append("url")
                #expect(url == "https://www.example.com/")
            case .telemetry(let mv, let celsius, let count, let uptime)?:
                kinds.append("tlm")
                #expect(mv == 3000 && celsius == 22)
                telemetry.append((count, uptime))
            case nil: kinds.append("none")
            }
            other.run(for: EddystoneDevice.slot)
        }
        #expect(kinds == ["uid", "url", "uid", "url", "tlm", "uid", "url", "uid", "url", "tlm"])
        // 5 s between the two TLM frames: 50 tenths of uptime, 50 advertising events at 100 ms.
        #expect(telemetry.count == 2 && telemetry[1].1 - telemetry[0].1 == 50 && telemetry[1].0 - telemetry[0].0 == 50)
    }

    /// BTHome's encoder traps on a payload past one AD structure; no value the control socket or
    /// a config file can set gets there: every setting's extremes leave the data within a legacy
    /// advertisement, and what is out of range is refused before anything changes.
    @Test func noSettingReachesTheEncodersSizeLimit() throws {
        let extremes: [(Device, [(String, [String])])] = [
            (BTHomeThermometerDevice(), [("temperature", ["-40", "85"]), ("humidity", ["0", "100"]), ("battery", ["0", "100"]),
                                         ("interval", ["20", "10240"])]),
            (BTHomeDoorDevice(), [("open", ["1"]), ("battery", ["0", "100"]), ("button", ["hold"])]),
        ]
        for (device, settings) in extremes {
            let bench = try Bench(device: device)
            for (key, values) in settings {
                for value in values {
                    #expect(Self.setting(device, key, value) == nil, "\(key) \(value)")
                    #expect((bench.peripheral.broadcastPayload?.count ?? 99) <= 31 - 8, "room for the 8 bytes of encryption")
                }
            }
        }
        let thermometer = BTHomeThermometerDevice()
        for (key, value) in [("temperature", "400"), ("temperature", "nan"), ("humidity", "101"), ("battery", "-1"), ("interval", "10")] {
            #expect(Self.setting(thermometer, key, value) != nil, "\(key) \(value)")
        }
        let eddystone = EddystoneDevice()
        #expect(Self.setting(eddystone, "url", "https://www.example.com/a-very-long-path") != nil)
        #expect(Self.setting(eddystone, "url", "ftp://x") != nil)
        #expect(Self.setting(eddystone, "temperature", "200") != nil)
    }
}
