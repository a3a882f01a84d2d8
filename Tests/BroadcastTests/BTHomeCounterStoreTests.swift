import Testing
import Glibc
import BlemuCore
import BlemuTestSupport
@testable import BlemuBroadcast

@Suite struct BTHomeCounterStoreTests {
    private func contents(_ path: String) -> String? {
        guard case .success(let bytes) = RegularFile.read(path, maximumBytes: 1024, followSymlinks: false) else { return nil }
        return String(decoding: bytes, as: UTF8.self)
    }

    @Test func reservesInBlocksAndNeverRepeatsAcrossRestarts() throws {
        let directory = TemporaryDirectory()
        let path = directory.file("state/bthome-counter")
        let first = BTHomeCounterStore(path: path, blockSize: 4)
        #expect(first.damage == nil)
        #expect(try (0..<3).map { _ in try first.take() } == [0, 1, 2])
        #expect(contents(path) == "blemu-bthome-counter 1 next 4\n")
        // A restart (the process ended after counter 2): nothing below 4 comes again.
        let second = BTHomeCounterStore(path: path, blockSize: 4)
        #expect(try (0..<5).map { _ in try second.take() } == [4, 5, 6, 7, 8])
        #expect(contents(path) == "blemu-bthome-counter 1 next 12\n")
        var status = stat()
        #expect(stat(path, &status) == 0 && status.st_mode & 0o777 == 0o600)
    }

    @Test func damagedFileIsMovedAsideAndCountingRestartsFromTheClock() throws {
        let directory = TemporaryDirectory()
        let path = directory.file("bthome-counter")
        directory.write("bthome-counter", "blemu-bthome-counter 1 next 99999999999\n")
        let store = BTHomeCounterStore(path: path, blockSize: 8, clock: { 1_700_000_000 })
        #expect(store.damage?.contains("damaged") == true)
        #expect(contents(path + ".damaged-1") == "blemu-bthome-counter 1 next 99999999999\n")
        #expect(try store.take() == 1_700_000_000)
        #expect(contents(path) == "blemu-bthome-counter 1 next 1700000008\n")
    }

    @Test func parseIsStrict() {
        #expect(BTHomeCounterStore.parse(Array("blemu-bthome-counter 1 next 42\n".utf8)) == 42)
        #expect(BTHomeCounterStore.parse(Array("blemu-bthome-counter 1 next 42".utf8)) == nil)
        #expect(BTHomeCounterStore.parse(Array("blemu-bthome-counter 1 next -1\n".utf8)) == nil)
        #expect(BTHomeCounterStore.parse(Array("blemu-bthome-counter 1 next \n".utf8)) == nil)
        #expect(BTHomeCounterStore.parse(Array("blemu-bthome-counter 1 next 4294967296\n".utf8)) == nil)
        #expect(BTHomeCounterStore.parse(Array("blemu-bthome-counter 1 next ４２\n".utf8)) == nil)
        #expect(BTHomeCounterStore.parse([0xFF, 0xFE]) == nil)
    }

    @Test func aFIFOAtThePathIsNotWaitedOn() throws {
        let directory = TemporaryDirectory()
        let path = directory.file("bthome-counter")
        #expect(mkfifo(path, 0o600) == 0)
        let store = BTHomeCounterStore(path: path, blockSize: 8, clock: { 77 })
        #expect(store.damage?.contains("FIFO") == true)
        // The FIFO stays (it is not a file of ours); writing the reservation replaces it by rename.
        #expect(try store.take() == 77)
    }

    @Test func unwritableReservationHandsOutNothing() {
        let directory = TemporaryDirectory()
        directory.write("file", "x")
        // The state "directory" is a regular file: the reservation cannot be written.
        let store = BTHomeCounterStore(path: directory.file("file/bthome-counter"), blockSize: 8)
        #expect(throws: BTHomeCounterStore.Failure.self) { try store.take() }
    }

    @Test func theLastCounterEndsTheKey() throws {
        let directory = TemporaryDirectory()
        let path = directory.file("bthome-counter")
        directory.write("bthome-counter", "blemu-bthome-counter 1 next 4294967293\n")
        let store = BTHomeCounterStore(path: path, blockSize: 256)
        #expect(try store.take() == 4_294_967_293)
        #expect(try store.take() == 4_294_967_294)
        #expect(throws: BTHomeCounterStore.Failure.exhausted) { try store.take() }
    }
}
