import BlemuATT
import BlemuCore
import BlemuGATT
import BlemuHCI
import BlemuL2CAP
import Logging

/// L2CAP fixed channels of each link: ATT, LE signalling, SMP (Vol 3, Part A, 2.1).
extension Peripheral {
    /// How long the fragments of one L2CAP PDU may take: well above the longest connection
    /// interval (4 s, Vol 6, Part B, 4.5.1), so only a central that stopped mid-PDU hits it.
    static let reassemblyTimeout: Duration = .seconds(10)

    func sendFrame(cid: UInt16, payload: ArraySlice<UInt8>, on handle: UInt16, priority: TransmitPriority) -> Bool {
        frame.removeAll(keepingCapacity: true)
        appendL2CAPFrame(cid: cid, payload: payload, to: &frame)
        return hci.sendL2CAP(handle: handle, pdu: frame[...], priority: priority)
    }

    func sendSignaling(_ command: SignalingCommand, on connection: Connection) {
        var payload: [UInt8] = []
        command.encode(into: &payload)
        _ = sendFrame(cid: L2CAPChannel.leSignaling, payload: payload[...], on: connection.handle, priority: .required)
    }

    func receiveACL(_ packet: ACLPacket) {
        // The host routes only this device's links here.
        guard let connection = connections[packet.handle] else { return }
        do {
            try connection.reassembler.receive(packet) { cid, payload in
                self.deliver(cid: cid, payload: payload, on: connection)
            }
        } catch {
            if let leftOut = peerLog.take(now: scheduler.nowNanoseconds, for: logger) {
                logger.warning("L2CAP: \(error)\(LogBudget.note(leftOut))", metadata: [LogKey.connHandle: "\(packet.handle)"])
            }
        }
        // A PDU left half-gathered is dropped after a while rather than kept forever.
        if connection.reassembler.isIncomplete {
            if connection.reassemblyTimer == nil {
                connection.reassemblyTimer = scheduler.schedule(after: Self.reassemblyTimeout, reassemblyExpired(connection))
            }
        } else if let timer = connection.reassemblyTimer {
            scheduler.cancel(timer)
            connection.reassemblyTimer = nil
        }
    }

    /// The action of `connection`'s reassembly timer, made once per link: a closure made per
    /// fragmented PDU would be an allocation per request.
    private func reassemblyExpired(_ connection: Connection) -> () -> Void {
        if let action = connection.reassemblyExpired { return action }
        let action = { [weak self, weak connection] in
            guard let self, let connection else { return }
            connection.reassemblyTimer = nil
            guard connection.reassembler.isIncomplete else { return }
            connection.reassembler.reset()
            self.logger.warning("L2CAP: incomplete PDU dropped after \(Self.reassemblyTimeout) without its last fragment",
                                metadata: [LogKey.connHandle: "\(connection.handle)"])
        }
        connection.reassemblyExpired = action
        return action
    }

    func deliver(cid: UInt16, payload: ArraySlice<UInt8>, on connection: Connection) {
        switch cid {
        case L2CAPChannel.att:
            connection.server.receive(payload)
        case L2CAPChannel.leSignaling:
            handleSignaling(payload, on: connection)
        case L2CAPChannel.securityManager:
            security.receive(payload, on: connection.handle)
        default:
            if let leftOut = peerLog.take(now: scheduler.nowNanoseconds, for: logger) {
                logger.warning("L2CAP frame for unknown channel \(Hex.word(cid)) dropped\(LogBudget.note(leftOut))",
                               metadata: [LogKey.connHandle: "\(connection.handle)"])
            }
        }
    }

    func handleSignaling(_ payload: ArraySlice<UInt8>, on connection: Connection) {
        let command: SignalingCommand
        do {
            command = try SignalingCommand(frame: payload)
        } catch {
            if let leftOut = peerLog.take(now: scheduler.nowNanoseconds, for: logger) {
                logger.warning("malformed LE signalling command: \(error)\(LogBudget.note(leftOut))",
                               metadata: [LogKey.connHandle: "\(connection.handle)"])
            }
            // Vol 3, Part A, 4.1: reject what cannot be understood, with its identifier when it has one.
            if payload.count >= 2, payload[payload.startIndex + 1] != 0 {
                sendSignaling(.commandReject(identifier: payload[payload.startIndex + 1]), on: connection)
            }
            return
        }
        // Vol 3, Part A, 4: identifier 0x00 is illegal; such a command is dropped.
        guard command.identifier != 0 else { return }
        switch command.code {
        case SignalingCode.connectionParameterUpdateResponse:
            guard command.identifier == connection.pendingParameterUpdate else { return }
            connection.pendingParameterUpdate = nil
            var r = ByteReader(command.data)
            let result = (try? r.u16()) ?? 0xFFFF
            logger.info(result == 0 ? "central accepted the connection parameters" : "central rejected the connection parameters",
                        metadata: [LogKey.connHandle: "\(connection.handle)"])
        case SignalingCode.commandReject:
            if command.identifier == connection.pendingParameterUpdate {
                connection.pendingParameterUpdate = nil
                logger.info("central does not support connection parameter updates")
            }
        case SignalingCode.leCreditBasedConnectionRequest:
            sendSignaling(.leCreditBasedConnectionRefused(identifier: command.identifier), on: connection)
        case SignalingCode.creditBasedConnectionRequest:
            let channels = max(0, (command.data.count - 8) / 2)
            sendSignaling(.creditBasedConnectionRefused(identifier: command.identifier, channels: channels), on: connection)
        case SignalingCode.disconnectionRequest where command.data.count == 4:
            // No dynamic channel exists: Invalid CID in request, echoing the two CIDs (4.1).
            let cids = Array(command.data)
            sendSignaling(.commandReject(identifier: command.identifier, reason: 0x0002,
                                         data: [cids[2], cids[3], cids[0], cids[1]]), on: connection)
        default:
            if !SignalingCode.isResponse(command.code) {
                sendSignaling(.commandReject(identifier: command.identifier), on: connection)
            }
        }
    }

    func disconnect(_ connection: Connection, reason: UInt8) {
        hci.send(.disconnect(handle: connection.handle, reason: reason))
    }
}
