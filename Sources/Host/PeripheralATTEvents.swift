import BlemuATT
import BlemuCore
import BlemuGATT
import BlemuHCI
import BlemuL2CAP
import Logging

// MARK: - ATT server events

extension Peripheral: ATTServerDelegate {
    /// What a log line says beside a handle, so a reader need not map handles: " (2A37)" for a
    /// characteristic's value, " (2A37 CCCD)" for its Client Characteristic Configuration, the
    /// attribute's type otherwise (" (2803)" a declaration); "" for a handle not in the database.
    func attributeNote(_ handle: UInt16) -> String {
        guard let attribute = database.attribute(handle) else { return "" }
        switch attribute.content {
        case .dynamic(let characteristic): return " (\(characteristic.uuid))"
        case .clientConfiguration(let characteristic): return " (\(characteristic.uuid) CCCD)"
        case .fixed: return " (\(attribute.type))"
        }
    }

    /// Errors are always counted, logged (budgeted) and, for a want of security, told to the
    /// Security Manager; the requests answered are counted by each link's session.
    public func attServer(_ server: ATTServer, refused opcode: UInt8, handle: UInt16, error: ATTError) {
        statistics.attErrors += 1
        if error == .insufficientAuthentication || error == .insufficientEncryption || error == .encryptionKeySizeTooShort {
            security.securityNeeded(on: server.peer.connectionHandle)
        }
        // Kept as values and formatted only when the Diagnostics value is read.
        statistics.lastError = (opcode, handle, error)
        // Attribute Not Found ends every discovery: normal, so it stays at debug level.
        let level: Logger.Level = error == .attributeNotFound ? .debug : .info
        // A central sets the pace of its requests, and so of these lines: they have a budget.
        guard logger.logLevel <= level, let leftOut = requestLog.take(now: scheduler.nowNanoseconds, for: logger) else { return }
        logger.event(.attError, level, "ATT \(error) for opcode \(Hex.byte(opcode)), handle \(Hex.word(handle))\(attributeNote(handle))\(LogBudget.note(leftOut))", [
            LogKey.peer: .string(server.peer.address.description),
            LogKey.connHandle: .string("\(server.peer.connectionHandle)"),
            LogKey.attOpcode: .string(Hex.byte(opcode)), LogKey.attHandle: .string(Hex.word(handle)),
            LogKey.attError: .string(Hex.byte(error.rawValue)),
        ])
    }

    public func attServer(_ server: ATTServer, mtuChanged mtu: Int) {
        eventObserver?(.mtu(peer: server.peer, mtu: mtu))
        logger.event(.mtuChanged, .info, "ATT MTU now \(mtu)", [
            LogKey.peer: .string(server.peer.address.description),
            LogKey.connHandle: .string("\(server.peer.connectionHandle)"),
        ])
    }

    public func attServer(_ server: ATTServer, configured characteristic: Characteristic, from old: UInt16, to new: UInt16) {
        let event: BlemuEvent = new == 0 ? .unsubscribed : .subscribed
        let what = new & 0x0002 != 0 ? "indications" : "notifications"
        if logger.logLevel <= .info, let leftOut = requestLog.take(now: scheduler.nowNanoseconds, for: logger) {
            let text = new == 0 ? "unsubscribed from \(characteristic.uuid)" : "subscribed to \(what) of \(characteristic.uuid)"
            logger.event(event, .info, "\(text)\(LogBudget.note(leftOut))", [
                LogKey.peer: .string(server.peer.address.description),
                LogKey.connHandle: .string("\(server.peer.connectionHandle)"),
                LogKey.attHandle: .string(Hex.word(characteristic.valueHandle)),
            ])
        }
        if let observer = eventObserver {
            observer(new == 0 ? .unsubscribed(peer: server.peer, characteristic: EventCharacteristic(characteristic), cause: nil)
                              : .subscribed(peer: server.peer, characteristic: EventCharacteristic(characteristic),
                                            notify: new & 0x0001 != 0, indicate: new & 0x0002 != 0))
        }
        if deviceStarted {
            device.subscriptionChanged(characteristic, peer: server.peer, notify: new & 0x0001 != 0, indicate: new & 0x0002 != 0)
        }
        // A bonded central's CCCD values outlive the link (Vol 3, Part G, 3.3.3.3).
        if let connection = connections[server.peer.connectionHandle] { bondedClients.subscriptionsChanged(on: connection) }
    }

    /// A closing link (or a service taken out) ends every subscription it held: logged and told
    /// to the device like a CCCD write of zero, so its timers stop when nobody listens any more.
    func subscriptionsEnded(_ held: [(characteristic: Characteristic, configuration: UInt16)], peer: ATTPeer,
                            because reason: String = "link closed") {
        for (characteristic, _) in held {
            logger.event(.unsubscribed, .info, "unsubscribed from \(characteristic.uuid): \(reason)", [
                LogKey.peer: .string(peer.address.description),
                LogKey.connHandle: .string("\(peer.connectionHandle)"),
                LogKey.attHandle: .string(Hex.word(characteristic.valueHandle)),
            ])
            eventObserver?(.unsubscribed(peer: peer, characteristic: EventCharacteristic(characteristic), cause: reason))
            if deviceStarted {
                device.subscriptionChanged(characteristic, peer: peer, notify: false, indicate: false)
            }
        }
    }

    public func attServerIndicationQueueHasRoom(_ server: ATTServer) {
        deviceMayProceed()
    }

    public func attServer(_ server: ATTServer, executeWriteRefusedAfter written: Int, error: ATTError, handle: UInt16) {
        guard written > 0 else { return }
        logger.error("Execute Write was not atomic: the device's onWrite for handle \(Hex.word(handle))\(attributeNote(handle)) refused (\(error)) after \(written) value(s) were written; put value checks in validateWrite",
                     metadata: [LogKey.connHandle: "\(server.peer.connectionHandle)"])
    }

    public func attServer(_ server: ATTServer, acceptedSignCounter counter: UInt32) {
        bondedClients.signCounterAccepted(counter, on: server.peer.connectionHandle)
    }

    public func attServer(_ server: ATTServer, droppedSignedWrite reason: SignedWriteDrop, handle: UInt16) {
        statistics.attErrors += 1
        let why: String
        switch reason {
        case .noKey: why = "no CSRK for this central (not bonded, or it gave none when it paired)"
        case let .replayed(counter, last): why = "SignCounter \(counter) is not above the last one accepted, \(last) (a replay)"
        case .badSignature: why = "the signature does not verify with the central's CSRK"
        }
        // A central sets the pace: budgeted like the other per-request lines.
        guard logger.logLevel <= .notice, let leftOut = requestLog.take(now: scheduler.nowNanoseconds, for: logger) else { return }
        logger.notice("signed write to handle \(Hex.word(handle))\(attributeNote(handle)) ignored: \(why) (Vol 3, Part C, 10.4.2)\(LogBudget.note(leftOut))", metadata: [
            LogKey.peer: .string(server.peer.address.description),
            LogKey.connHandle: .string("\(server.peer.connectionHandle)"),
            LogKey.attOpcode: .string(Hex.byte(ATTOpcode.signedWriteCommand.rawValue)), LogKey.attHandle: .string(Hex.word(handle)),
        ])
    }

    /// A value that requires authorization and whose device does not decide: the control
    /// socket's answer (`authorize DEVICE UUID allow|deny [PEER [public|random]]`), refused until it allows.
    public func attServer(_ server: ATTServer, authorize characteristic: Characteristic, access: AttributeAccess) -> Bool {
        control.authorization(of: characteristic.valueHandle, on: server.peer.connectionHandle, peer: server.peer.leAddress)
    }

    public func attServerTransactionTimedOut(_ server: ATTServer) {
        if server.bearer.isEnhanced {
            // Vol 3, Part F, 3.3.3: on an Enhanced ATT bearer the timeout closes that bearer's
            // L2CAP channel; the link and its other bearers stay.
            logger.error("indication not confirmed within 30 s on an enhanced ATT bearer: closing its channel (Vol 3, Part F, 3.3.3)",
                         metadata: [LogKey.connHandle: "\(server.peer.connectionHandle)"])
            connections[server.peer.connectionHandle]?.enhanced.entries.first { $0.endpoint.server === server }?.bearer.channel.disconnect()
            return
        }
        logger.error("indication not confirmed within 30 s: the ATT bearer is dead, disconnecting (Vol 3, Part F, 3.3.3)",
                     metadata: [LogKey.connHandle: "\(server.peer.connectionHandle)"])
        if let connection = connections[server.peer.connectionHandle] {
            links.disconnect(connection, reason: HCIStatus.remoteUserTerminated)
        }
    }
}

// MARK: - Watching requests

/// What the device hears of each request only while someone wants it: every value read and
/// written while its events are observed (`eventObserver`: the control socket's `watch`, a
/// scenario), and the journal's line for each write while it logs at info level (the default of
/// `blemu run`). With neither, the servers call nothing here per request.
extension Peripheral: ATTServerObserver {
    /// Installs the device as the observer of its links' servers for what is wanted now, or
    /// removes it: called as the event observer and the logger change.
    func watchRequests() {
        // A broadcaster has no links to watch (and asking for `links` would build them).
        guard let links = madeConnectionParts?.links else { return }
        let events = eventObserver != nil
        let writeLines = logger.logLevel <= .info
        if events || writeLines {
            links.requestWatch.install(self, answers: false, reads: events, writes: true)
        } else {
            links.requestWatch.remove()
        }
    }

    public func attServer(_ server: ATTServer, read characteristic: Characteristic, offset: Int) {
        eventObserver?(.read(peer: server.peer, characteristic: EventCharacteristic(characteristic), offset: offset))
    }

    public func attServer(_ server: ATTServer, wrote characteristic: Characteristic, request: WriteRequest, prepared: Bool) {
        if logger.logLevel <= .info, let leftOut = requestLog.take(now: scheduler.nowNanoseconds, for: logger) {
            let what = request.withResponse ? "write" : "write command"
            logger.event(.write, .info, "\(what) of \(request.value.count) bytes to \(characteristic.uuid)\(LogBudget.note(leftOut))", [
                LogKey.peer: .string(server.peer.address.description),
                LogKey.connHandle: .string("\(server.peer.connectionHandle)"),
                LogKey.attHandle: .string(Hex.word(characteristic.valueHandle)),
            ])
        }
        eventObserver?(.write(peer: server.peer, characteristic: EventCharacteristic(characteristic), offset: request.offset,
                              value: Array(request.value), withResponse: request.withResponse, prepared: prepared))
    }
}

/// The faults of the device's fault stages, logged as they are applied.
extension Peripheral: FaultStageDelegate {
    public func faultStage(_ stage: FaultStage, injected fault: FaultPlan.Action, handle: UInt16, opcode: UInt8) {
        if let observer = eventObserver {
            let characteristic = database.characteristics.first { $0.valueHandle == handle }.map(EventCharacteristic.init)
            observer(.fault(peer: stage.server.peer, characteristic: characteristic, handle: handle, opcode: opcode, action: fault))
        }
        logger.event(.faultInjected, .notice, "fault injected: \(fault) for opcode \(Hex.byte(opcode)), handle \(Hex.word(handle))\(attributeNote(handle))", [
            LogKey.peer: .string(stage.server.peer.address.description),
            LogKey.connHandle: .string("\(stage.server.peer.connectionHandle)"),
            LogKey.attOpcode: .string(Hex.byte(opcode)), LogKey.attHandle: .string(Hex.word(handle)),
        ])
    }
}
