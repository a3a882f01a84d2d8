/// The commands `blemu attach` answers for the controller instead of passing them on: those a
/// controller it bridges to cannot take, although the kernel's host stack sends them.
///
/// Core 5.4, Vol 4, Part E, 7.3.94 HCI_Write_Authenticated_Payload_Timeout (OGF 0x03, OCF
/// 0x007C): the kernel sends it once an LE link is encrypted (BlueZ pairing), and rootcanal
/// 1.10 aborts on it ("Unimplemented command WRITE_AUTHENTICATED_PAYLOAD_TIMEOUT"), taking the
/// whole radio down. It only arms LE Ping's timer (Vol 6, Part B, 5.1.12), which none of the
/// emulated controllers need, so the answer is success and the timeout is not applied.
public enum ControllerStandIn {
    public static let writeAuthenticatedPayloadTimeout: UInt16 = 0x0C7C

    /// The commands answered here, with their names and why.
    public static let answered: [UInt16: (name: String, why: String)] = [
        writeAuthenticatedPayloadTimeout: ("HCI_Write_Authenticated_Payload_Timeout",
                                           "rootcanal 1.10 aborts on it; the timeout (LE Ping) is not applied"),
    ]

    /// The HCI event (without H4 indicator) answering `command` (an HCI command packet without
    /// its indicator: opcode, length, parameters), or nil when it goes to the controller.
    public static func answer(_ command: ArraySlice<UInt8>) -> [UInt8]? {
        guard command.count >= 3 else { return nil }
        let start = command.startIndex
        let opcode = UInt16(command[start]) | UInt16(command[start + 1]) << 8
        guard answered[opcode] != nil else { return nil }
        let parameters = command.dropFirst(3)
        let opcodeBytes: [UInt8] = [UInt8(opcode & 0xFF), UInt8(opcode >> 8)]
        // Command Complete (7.7.14): event 0x0E, length, Num_HCI_Command_Packets 1, the opcode,
        // then the return parameters: Status, Connection_Handle (7.3.94).
        guard parameters.count == 4, Int(command[start + 2]) == 4 else {
            return [0x0E, 4, 1] + opcodeBytes + [0x12]  // Invalid HCI Command Parameters (Vol 1, Part F, 2.18)
        }
        let p = parameters.startIndex
        let handle = (UInt16(parameters[p]) | UInt16(parameters[p + 1]) << 8) & 0x0FFF
        return [0x0E, 6, 1] + opcodeBytes + [0x00, UInt8(handle & 0xFF), UInt8(handle >> 8)]
    }
}
