import BlemuCore
import BlemuHCI
import BlemuSimulator
import Logging
import Testing

/// One host per controller, with roles (Vol 6, Part B, 1.1.1): the `ControllerHost` routes each
/// link to the role its connection event names, and each role hears only its own.
@Suite struct ControllerHostTests {
    /// A role that records what it hears.
    final class RecordingRole: ControllerRole {
        var advertisingSetsWanted = 0
        var wantsPeriodicAdvertising = false
        var openLinks: Set<UInt16> = []
        var openLinkCount: Int { openLinks.count }
        var heard: [String] = []
        var acl: [UInt16] = []
        /// Whether `controllerReady` lets the next role go on at once.
        var proceeds = true
        var proceed: (() -> Void)?

        func controllerStarting() { heard.append("starting") }
        func controllerReady(then proceed: @escaping () -> Void) {
            heard.append("ready")
            if proceeds { proceed() } else { self.proceed = proceed }
        }
        func controllerWasReset(reason: String) { heard.append("reset") }
        func controllerWillHalt() { heard.append("will halt") }
        func controllerWentAway(reason: String, stopping: Bool) { heard.append("gone") }
        func stopBegan() { heard.append("stop began") }
        func closeLinksForStop() { heard.append("close links") }
        func stopFinished() { heard.append("stopped") }
        func connectionCompleted(_ event: LEConnectionComplete) {
            heard.append("connection \(event.handle) status \(event.status)")
            if event.status == HCIStatus.success { openLinks.insert(event.handle) }
        }
        func disconnectionCompleted(status: UInt8, handle: UInt16, reason: UInt8) {
            heard.append("disconnection \(handle)")
            openLinks.remove(handle)
        }
        func linkEvent(_ event: HCIEvent, handle: UInt16) { heard.append("link event") }
        func roleEvent(_ event: HCIEvent) { heard.append("role event") }
        func receiveACL(_ packet: ACLPacket) { acl.append(packet.handle) }
        func transmitQueueHasRoom(for handle: UInt16) {}
    }

    final class Bench {
        let scheduler = ManualScheduler()
        let simulated = SimulatedController()
        let host: ControllerHost
        let peripheral = RecordingRole()
        let central = RecordingRole()

        init(extendedSets: UInt8 = 4, peripheral hasPeripheral: Bool = true, central hasCentral: Bool = true, devices: Int = 1) {
            simulated.extendedAdvertisingSets = extendedSets
            let simulated = self.simulated
            host = ControllerHost(controller: "scripted", scheduler: scheduler,
                                  logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() }),
                                  output: { simulated.output($0, $1) })
            simulated.host = host.hci
            peripheral.advertisingSetsWanted = devices
            if hasPeripheral { host.register(peripheral, as: .peripheral) }
            if hasCentral { host.register(central, as: .central) }
            host.controllerUp()
        }
    }

    /// Vol 4, Part E, 7.7.65.1: Role 0x00 is a link made as central, 0x01 one made as peripheral;
    /// each link's data, events and disconnection go to its role alone.
    @Test func eachLinkGoesToTheRoleItsConnectionEventNames() {
        let b = Bench()
        b.simulated.connect(handle: 0x0040, peer: BluetoothAddress("D0:11:22:33:44:55")!)
        b.simulated.centralConnected(handle: 0x0050, peer: BluetoothAddress("C4:11:22:33:44:55")!)
        #expect(b.host.linkRole(0x0040) == .peripheral && b.host.linkRole(0x0050) == .central)
        b.simulated.sendL2CAP(handle: 0x0050, cid: 0x0004, [0x0B, 0x01])
        b.simulated.sendL2CAP(handle: 0x0040, cid: 0x0004, [0x0A, 0x03, 0x00])
        #expect(b.central.acl == [0x0050] && b.peripheral.acl == [0x0040])
        b.simulated.requestLongTermKey(handle: 0x0040)
        b.simulated.disconnect(handle: 0x0050)
        #expect(b.peripheral.heard.suffix(2) == ["connection 64 status 0", "link event"])
        #expect(b.central.heard.suffix(2) == ["connection 80 status 0", "disconnection 80"])
        #expect(b.host.linkRole(0x0050) == nil)
    }

    /// A link's receiver (its L2CAP link, handed over at `openLink`) takes its data straight
    /// from HCI: the role routing sees only the data of links that have none yet, and a closed
    /// or disconnected link's data goes back to the routing.
    @Test func aLinksReceiverTakesItsDataAndTheRolesOnlyTheRest() {
        final class Receiver: ACLReceiver {
            var packets: [[UInt8]] = []
            func receive(_ packet: ACLPacket) { packets.append(Array(packet.data)) }
        }
        let b = Bench()
        b.simulated.connect(handle: 0x0040, peer: BluetoothAddress("D0:11:22:33:44:55")!)
        b.simulated.connect(handle: 0x0041, peer: BluetoothAddress("D0:11:22:33:44:66")!)
        let receiver = Receiver()
        b.host.hci.openLink(0x0040, receiver: receiver)
        b.simulated.sendL2CAP(handle: 0x0040, cid: 0x0004, [0x0A, 0x03, 0x00])
        b.simulated.sendL2CAP(handle: 0x0041, cid: 0x0004, [0x0A, 0x05, 0x00])
        #expect(receiver.packets == [[0x03, 0x00, 0x04, 0x00, 0x0A, 0x03, 0x00]])
        #expect(b.peripheral.acl == [0x0041])
        b.host.hci.closeLink(0x0040)
        b.simulated.sendL2CAP(handle: 0x0040, cid: 0x0004, [0x0A, 0x07, 0x00])
        #expect(receiver.packets.count == 1 && b.peripheral.acl == [0x0041, 0x0040])
        b.host.hci.openLink(0x0041, receiver: receiver)
        b.simulated.disconnect(handle: 0x0041)
        b.simulated.sendL2CAP(handle: 0x0041, cid: 0x0004, [0x0A, 0x09, 0x00])
        #expect(receiver.packets.count == 1)
    }

    /// A link in a role no one here plays is not kept: disconnected with 0x13.
    @Test func aLinkInARoleNoOnePlaysIsDisconnected() {
        let b = Bench(peripheral: false)
        b.simulated.connect(handle: 0x0040, peer: BluetoothAddress("D0:11:22:33:44:55")!)
        #expect(b.host.linkRole(0x0040) == nil)
        #expect(b.simulated.commands(HCIOpcode.disconnect).map { Array($0.parameters) } == [[0x40, 0x00, 0x13]])
        #expect(!b.central.heard.contains { $0.hasPrefix("connection") })
    }

    /// A controller that reports a link in a role no one plays on a handle one of ours holds has
    /// lost ours (Vol 4, Part E, 5.3.1: a handle names one link at a time): its role hears it
    /// ended, as when a link is reopened in another role we play, before the new one is
    /// disconnected.
    @Test func aLinkInARoleNoOnePlaysOnAHandleInUseEndsTheOldLink() {
        let b = Bench(central: false)
        b.simulated.connect(handle: 0x0040, peer: BluetoothAddress("D0:11:22:33:44:55")!)
        #expect(b.host.linkRole(0x0040) == .peripheral)
        b.simulated.centralConnected(handle: 0x0040, peer: BluetoothAddress("C4:11:22:33:44:55")!)
        #expect(b.peripheral.heard.last == "disconnection 64")
        #expect(b.host.linkRole(0x0040) == nil)
        #expect(b.simulated.commands(HCIOpcode.disconnect).map { Array($0.parameters) } == [[0x40, 0x00, 0x13]])
    }

    /// Advertising reports are the central's, advertising-set events the peripheral's; a key
    /// request for a link no role has is refused at once (Vol 4, Part E, 7.8.26).
    @Test func roleEventsGoToTheirRoleAndUnknownLinksAreAnswered() {
        let b = Bench()
        b.simulated.event(0x3E, [0x02, 1, 0x00, 0x01] + BluetoothAddress("C4:11:22:33:44:55")!.littleEndianBytes + [0, 0xC4])
        b.simulated.setTerminated(set: 1, handle: 0x0041)
        #expect(b.central.heard.last == "role event" && b.peripheral.heard.last == "role event")
        #expect(b.central.heard.filter { $0 == "role event" }.count == 1)
        b.simulated.requestLongTermKey(handle: 0x0099)
        #expect(b.simulated.commands(HCIOpcode.leLongTermKeyRequestNegativeReply).count == 1)
    }

    /// Vol 4, Part E, 3.1.1: one choice of legacy or extended commands for the controller. The
    /// devices that advertise decide (one keeps to legacy, several need sets); a central alone
    /// uses extended where the controller has it.
    @Test func oneChoiceOfLegacyOrExtendedCommandsForEveryRole() {
        #expect(!Bench(devices: 1).host.usesExtendedCommands)
        #expect(Bench(devices: 2).host.usesExtendedCommands)
        #expect(!Bench(extendedSets: 0, devices: 2).host.usesExtendedCommands)
        #expect(Bench(peripheral: false).host.usesExtendedCommands)
        #expect(!Bench(extendedSets: 0, peripheral: false).host.usesExtendedCommands)
    }

    /// The roles hear of readiness in turn: the peripheral's resolving list is loaded before the
    /// central scans or connects (Vol 4, Part E, 7.8.38).
    @Test func theCentralIsReadyAfterThePeripheralRoleIsSetUp() {
        let scheduler = ManualScheduler()
        let simulated = SimulatedController()
        let host = ControllerHost(controller: "scripted", scheduler: scheduler,
                                  logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() }),
                                  output: { simulated.output($0, $1) })
        simulated.host = host.hci
        let peripheral = RecordingRole(), central = RecordingRole()
        peripheral.proceeds = false
        host.register(central, as: .central)
        host.register(peripheral, as: .peripheral)
        host.controllerUp()
        #expect(peripheral.heard == ["starting", "ready"] && central.heard == ["starting"])
        peripheral.proceed?()
        #expect(central.heard == ["starting", "ready"])
    }

    /// A stop asks every role to close its links, and resets once, when the last is closed.
    @Test func aStopClosesEveryRolesLinksThenResetsOnce() {
        let b = Bench()
        b.simulated.connect(handle: 0x0040, peer: BluetoothAddress("D0:11:22:33:44:55")!)
        b.simulated.centralConnected(handle: 0x0050, peer: BluetoothAddress("C4:11:22:33:44:55")!)
        var stopped = false
        b.host.stop { stopped = true }
        #expect(b.peripheral.heard.suffix(2) == ["stop began", "close links"])
        #expect(b.central.heard.suffix(2) == ["stop began", "close links"])
        b.simulated.disconnect(handle: 0x0040)
        #expect(b.simulated.commands(HCIOpcode.reset).count == 1 && !stopped)   // the initialization's only
        b.simulated.disconnect(handle: 0x0050)
        #expect(b.simulated.commands(HCIOpcode.reset).count == 2 && stopped)
        #expect(b.peripheral.heard.last == "stopped" && b.central.heard.last == "stopped")
    }

    /// A role that says its links may have closed while the stop's Reset is in flight (the
    /// peripheral role does, as its advertising stops) queued a second Reset, which went out
    /// after the stop had finished and the link was closed: `blemu bench`'s peripheral ended
    /// every run with "controller link refused Reset". One stop, one Reset.
    @Test func aStopSendsOneResetWhateverTheRolesSayWhileItIsInFlight() {
        let b = Bench()
        b.simulated.delivery = .queued
        var stopped = 0
        b.host.stop { stopped += 1 }
        #expect(b.simulated.commands(HCIOpcode.reset).count == 2 && stopped == 0, "the initialization's and the stop's")
        b.host.linksMayHaveClosed()
        b.host.linksMayHaveClosed()
        b.simulated.flush()
        #expect(stopped == 1)
        #expect(b.simulated.commands(HCIOpcode.reset).count == 2, "no Reset after the stop's")
    }
}
