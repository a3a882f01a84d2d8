/// What takes the ACL data of one open link: its L2CAP link (`L2CAPLink`, above HCI), handed to
/// `HCIHost.openLink(_:receiver:)` by the role that set the link up. Data of a link with a
/// receiver goes straight to it; the roles' routing (`HCIHostDelegate`) sees only the data of
/// links that have none yet (a peripheral's link waiting for its advertising set).
public protocol ACLReceiver: AnyObject {
    func receive(_ packet: ACLPacket)
}

/// The receivers of the open links by connection handle (12 bits, as the decoders take it;
/// Vol 4, Part E, 5.4.2). A lookup runs for every ACL packet: a slot number per handle, then
/// the slot, two loads and no hashing. 8 KiB of slot numbers and a slot per open link.
final class ACLReceiverTable {
    static let handleCount = 0x1000
    /// Per handle: 0, no receiver; otherwise its slot plus one.
    private let slotOfHandle: UnsafeMutablePointer<UInt16>
    private var slots: [ACLReceiver?] = []
    private var freeSlots: [Int] = []

    init() {
        slotOfHandle = .allocate(capacity: Self.handleCount)
        slotOfHandle.initialize(repeating: 0, count: Self.handleCount)
    }

    deinit { slotOfHandle.deallocate() }

    subscript(handle: UInt16) -> ACLReceiver? {
        guard Int(handle) < Self.handleCount else { return nil }
        let slot = Int(slotOfHandle[Int(handle)])
        return slot == 0 ? nil : slots[slot &- 1]
    }

    func set(_ receiver: ACLReceiver, for handle: UInt16) {
        guard Int(handle) < Self.handleCount else { return }
        if let slot = slotNumber(handle) { return slots[slot] = receiver }
        let slot: Int
        if let free = freeSlots.popLast() {
            slot = free
            slots[slot] = receiver
        } else {
            slot = slots.count
            slots.append(receiver)
        }
        slotOfHandle[Int(handle)] = UInt16(slot + 1)
    }

    func remove(_ handle: UInt16) {
        guard let slot = slotNumber(handle) else { return }
        slots[slot] = nil
        freeSlots.append(slot)
        slotOfHandle[Int(handle)] = 0
    }

    func removeAll() {
        slotOfHandle.update(repeating: 0, count: Self.handleCount)
        slots.removeAll()
        freeSlots.removeAll()
    }

    private func slotNumber(_ handle: UInt16) -> Int? {
        guard Int(handle) < Self.handleCount else { return nil }
        let stored = Int(slotOfHandle[Int(handle)])
        return stored == 0 ? nil : stored - 1
    }
}
