import BlemuCore
import Testing

@Suite struct HandleTableTests {
    /// Random inserts, updates, removals and in-place changes give what a Dictionary gives,
    /// through growth and backward-shift deletion, with sequential handles (as controllers
    /// assign them) and scattered ones.
    @Test(arguments: [UInt16(64), 4096, 0xFFFF])
    func behavesAsADictionary(keySpace: UInt16) {
        var random = SeededRandom(seed: UInt64(keySpace))
        var table = HandleTable<Int>()
        var reference: [UInt16: Int] = [:]
        for step in 0..<20_000 {
            let key = UInt16(truncatingIfNeeded: random.next() % UInt64(keySpace))
            switch random.next() % 4 {
            case 0, 1:
                table[key] = step
                reference[key] = step
            case 2:
                #expect(table.removeValue(forKey: key) == reference.removeValue(forKey: key))
            default:
                let changed = table.modify(key) { value -> Int in
                    value += 1
                    return value
                }
                if reference[key] != nil { reference[key]! += 1 }
                #expect(changed == reference[key])
            }
            #expect(table[key] == reference[key])
            #expect(table.count == reference.count)
        }
        #expect(table.keys.sorted() == reference.keys.sorted())
        #expect(table.values.sorted() == reference.values.sorted())
        #expect(Dictionary(uniqueKeysWithValues: table.map { ($0.key, $0.value) }) == reference)
        for key in reference.keys { #expect(table[key] == reference[key]) }
        table.removeAll()
        #expect(table.isEmpty && table[reference.keys.first ?? 0] == nil)
    }
}
