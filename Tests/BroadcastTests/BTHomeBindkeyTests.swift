import Testing
import Glibc
import BlemuCore
import BlemuCrypto
import BlemuTestSupport
@testable import BlemuBroadcast

@Suite struct BTHomeBindkeyTests {
    @Test func readsHexWithWhitespaceAndWarnsWhenExposed() throws {
        let directory = TemporaryDirectory()
        directory.write("key", "  231d39c1d7cc1ab1aee224cd096db932\n")
        let read = try BTHomeBindkey.read(path: directory.file("key")).get()
        #expect(read.warning == nil)
        // The key is bthome.io's example key: it opens the published encrypted payload.
        let payload = BTHomeEncryptionTests.publishedPayload
        #expect((try? BTHome.decode(payload: payload[...], key: read.key, address: BluetoothAddress("54:48:E6:8F:80:A5")!)) != nil)
        chmod(directory.file("key"), 0o644)
        #expect(try BTHomeBindkey.read(path: directory.file("key")).get().warning?.contains("644") == true)
    }

    @Test func refusesOtherContentsWithoutShowingThem() {
        let directory = TemporaryDirectory()
        for text in ["231d39c1d7cc1ab1aee224cd096db93", "231d39c1d7cc1ab1aee224cd096db9320", "231d39c1d7cc1ab1aee224cd096db93g",
                     "231d39c1 d7cc1ab1aee224cd096db932", ""] {
            directory.write("key", text)
            guard case .failure(let error) = BTHomeBindkey.read(path: directory.file("key")) else {
                Issue.record("accepted \(text)")
                continue
            }
            #expect(error.description.contains("32 hex digits"))
            #expect(text.isEmpty || !error.description.contains(text))
        }
        #expect(throws: BindkeyFileError.self) { try BTHomeBindkey.read(path: directory.file("missing")).get() }
        #expect(mkfifo(directory.file("fifo"), 0o600) == 0)
        #expect(throws: BindkeyFileError.self) { try BTHomeBindkey.read(path: directory.file("fifo")).get() }
    }
}
