import BlemuCore
import Testing
@testable import BlemuATT

/// Multiple Handle Value Notification (Vol 3, Part F, 3.4.7.4): opcode 0x23, then (handle,
/// length, value) tuples, two or more.
@Suite struct MultipleNotificationPDUTests {
    @Test func twoTuplesRoundTrip() throws {
        // Handle 0x0003 with 2 bytes AA BB, handle 0x0010 with nothing.
        let pdu = try decodeRoundTrip(ATTMultipleHandleValueNotification.self, bytes("23 0300 0200 AABB 1000 0000"))
        #expect(pdu.tuples.count == 2)
        #expect(pdu.tuples[0].handle == 0x0003 && Array(pdu.tuples[0].value) == [0xAA, 0xBB])
        #expect(pdu.tuples[1].handle == 0x0010 && pdu.tuples[1].value.isEmpty)
    }

    @Test func malformedListsAreDecodeErrors() {
        // One tuple only: the list holds two or more.
        expectDecodeError(ATTMultipleHandleValueNotification.self, bytes("23 0300 0100 AA"), .lengthMismatch)
        // A length past the end of the PDU.
        expectDecodeError(ATTMultipleHandleValueNotification.self, bytes("23 0300 0100 AA 0400 0500 01"), .truncated)
        // A tuple cut inside its length field.
        expectDecodeError(ATTMultipleHandleValueNotification.self, bytes("23 0300 0100 AA 04"), .truncated)
        // Handle 0x0000 is no attribute.
        expectDecodeError(ATTMultipleHandleValueNotification.self, bytes("23 0000 0100 AA 0400 0000"), .invalidValue)
        // Another opcode.
        expectDecodeError(ATTMultipleHandleValueNotification.self, bytes("1B 0300 0100 AA 0400 0000"), .unknownType)
    }
}
