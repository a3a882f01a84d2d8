import BlemuCore
import BlemuTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A FIFO, a device node or a symbolic link planted where blemu keeps a file: refused at once,
/// never waited on (open(2) of a FIFO without O_NONBLOCK blocks until the other end opens).
@Suite struct RegularFileTests {
    typealias Directory = TemporaryDirectory

    private func elapsed(_ body: () -> Void) -> Duration {
        let clock = ContinuousClock()
        return clock.measure(body)
    }

    @Test func aFIFOIsRefusedForReadingWithoutBlocking() throws {
        let directory = Directory()
        let path = directory.file("bonds.json")
        #expect(mkfifo(path, 0o600) == 0)
        var result: Result<[UInt8], RegularFileError>?
        let time = elapsed { result = RegularFile.read(path, maximumBytes: 1 << 20, followSymlinks: false) }
        #expect(time < .seconds(1))
        guard case .failure(let error)? = result else { Issue.record("read a FIFO: \(String(describing: result))"); return }
        #expect(error.kind == .notRegular)
        #expect(error.description == "a FIFO, not a regular file")
    }

    @Test func aFIFOIsRefusedForWritingWithAndWithoutAReader() throws {
        let directory = Directory()
        let path = directory.file("capture.btsnoop")
        #expect(mkfifo(path, 0o600) == 0)
        // No reader: open(O_WRONLY | O_NONBLOCK) fails with ENXIO instead of blocking.
        guard case .failure(let alone) = RegularFile.open(path, flags: O_WRONLY | O_CREAT | O_TRUNC) else {
            Issue.record("opened a FIFO for writing"); return
        }
        #expect(alone.kind == .notRegular)
        #expect(alone.description == "a FIFO, not a regular file")
        // With a reader the open succeeds; fstat refuses it.
        let reader = open(path, O_RDONLY | O_NONBLOCK)
        defer { close(reader) }
        #expect(reader >= 0)
        guard case .failure(let read) = RegularFile.open(path, flags: O_WRONLY | O_CREAT | O_TRUNC) else {
            Issue.record("opened a FIFO with a reader for writing"); return
        }
        #expect(read.kind == .notRegular)
        #expect(read.description == "a FIFO, not a regular file")
    }

    @Test func deviceNodesDirectoriesAndSocketsAreRefused() {
        for (path, kind) in [("/dev/null", "a character device"), ("/dev/zero", "a character device"), ("/tmp", "a directory")] {
            guard case .failure(let error) = RegularFile.read(path, maximumBytes: 1024, followSymlinks: true) else {
                Issue.record("read \(path)"); continue
            }
            #expect(error.kind == .notRegular)
            #expect(error.description == "\(kind), not a regular file", "\(path)")
        }
        let directory = Directory()
        guard case .failure(let error) = RegularFile.open(directory.path, flags: O_WRONLY | O_CREAT) else {
            Issue.record("opened a directory for writing"); return
        }
        #expect(error.kind == .notRegular)
    }

    @Test func aSymbolicLinkIsFollowedOnlyWhenAsked() throws {
        let directory = Directory()
        directory.write("target", "secret")
        #expect(symlink(directory.file("target"), directory.file("link")) == 0)
        guard case .failure(let error) = RegularFile.read(directory.file("link"), maximumBytes: 1024, followSymlinks: false) else {
            Issue.record("followed a link"); return
        }
        #expect(error.kind == .notRegular)
        #expect(error.description.contains("symbolic link"))
        #expect(try RegularFile.read(directory.file("link"), maximumBytes: 1024, followSymlinks: true).get() == Array("secret".utf8))
        // A link to a FIFO, followed: still refused, still at once.
        #expect(mkfifo(directory.file("fifo"), 0o600) == 0)
        #expect(symlink(directory.file("fifo"), directory.file("fifo-link")) == 0)
        guard case .failure(let linked) = RegularFile.read(directory.file("fifo-link"), maximumBytes: 1024, followSymlinks: true) else {
            Issue.record("read a FIFO through a link"); return
        }
        #expect(linked.description == "a FIFO, not a regular file")
    }

    @Test func regularFilesAreReadWrittenAndTruncatedAfterTheCheck() throws {
        let directory = Directory()
        directory.write("config.yaml", "devices: []\n")
        #expect(try RegularFile.read(directory.file("config.yaml"), maximumBytes: 1024, followSymlinks: false).get()
            == Array("devices: []\n".utf8))
        guard case .failure(let big) = RegularFile.read(directory.file("config.yaml"), maximumBytes: 4, followSymlinks: false) else {
            Issue.record("read past the limit"); return
        }
        #expect(big.kind == .tooLarge)
        guard case .failure(let missing) = RegularFile.read(directory.file("none"), maximumBytes: 4, followSymlinks: false) else {
            Issue.record("read a missing file"); return
        }
        #expect(missing.kind == .missing)

        let fd = try RegularFile.open(directory.file("config.yaml"), flags: O_WRONLY | O_TRUNC).get()
        let flags = fcntl(fd, F_GETFL)
        #expect(flags & O_NONBLOCK == 0, "O_NONBLOCK cleared for the regular file")
        #expect(fcntl(fd, F_GETFD) & FD_CLOEXEC != 0)
        close(fd)
        #expect(try RegularFile.read(directory.file("config.yaml"), maximumBytes: 1024, followSymlinks: false).get() == [])
        let created = try RegularFile.open(directory.file("new"), flags: O_WRONLY | O_CREAT, mode: 0o600).get()
        var status = stat()
        #expect(fstat(created, &status) == 0 && status.st_mode & 0o777 == 0o600)
        close(created)
    }
}
