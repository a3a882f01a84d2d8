#if canImport(Glibc)
import Glibc

/// Why a file blemu reads or writes was not used. `description` says what is at the path
/// (without the path: the caller's message names the file).
public struct RegularFileError: Error, Equatable, Sendable, CustomStringConvertible {
    public enum Kind: Equatable, Sendable {
        /// Nothing is there (ENOENT).
        case missing
        /// Something that is not a regular file is there: a FIFO, a device node, a socket, a
        /// directory, or a symbolic link where links are not followed.
        case notRegular
        /// A regular file larger than the caller reads.
        case tooLarge
        /// open, fstat or read failed otherwise (permissions, I/O).
        case failed
    }

    public let kind: Kind
    public let errnoCode: Int32
    public let description: String

    public init(_ kind: Kind, errnoCode: Int32 = 0, _ description: String) {
        self.kind = kind
        self.errnoCode = errnoCode
        self.description = description
    }
}

/// Opens the files blemu keeps or is given (bonds, identities, passkeys, profiles,
/// configurations, captures) so that whatever is planted at the path cannot stop the run loop:
/// open(2) with O_NONBLOCK, so a FIFO (which would block until a peer opens the other end) or a
/// device node returns at once, then fstat on the descriptor itself, so what is checked is what
/// was opened, and anything but a regular file is refused before a byte is read or written.
/// O_TRUNC is applied only after that check (truncating is for regular files). O_NONBLOCK is
/// cleared again, so reads and writes of the regular file behave as usual.
public enum RegularFile {
    /// Opens `path` with `flags` (O_RDONLY, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, O_NOFOLLOW
    /// for a path nobody should have linked elsewhere, …) and `mode` for a file it creates.
    /// Returns the descriptor (O_CLOEXEC) or why not.
    public static func open(_ path: String, flags: Int32, mode: mode_t = 0o600) -> Result<Int32, RegularFileError> {
        let truncate = flags & O_TRUNC != 0
        let fd = Glibc.open(path, (flags & ~O_TRUNC) | O_NONBLOCK | O_CLOEXEC | O_NOCTTY, mode)
        guard fd >= 0 else {
            let code = errno
            switch code {
            case ENOENT:
                return .failure(RegularFileError(.missing, errnoCode: code, String(cString: strerror(code))))
            case ELOOP where flags & O_NOFOLLOW != 0:
                return .failure(RegularFileError(.notRegular, errnoCode: code, "a symbolic link, not a regular file (not followed)"))
            case ENXIO, EISDIR, ENODEV, EOPNOTSUPP:
                // ENXIO: a FIFO opened for writing with no reader, or a device node with no
                // device; EISDIR: a directory opened for writing; the others: a socket.
                return .failure(RegularFileError(.notRegular, errnoCode: code, "\(kindAt(path, following: flags & O_NOFOLLOW == 0)), not a regular file"))
            default:
                return .failure(RegularFileError(.failed, errnoCode: code, "\(String(cString: strerror(code))) (errno \(code))"))
            }
        }
        var status = stat()
        guard fstat(fd, &status) == 0 else {
            let code = errno
            Glibc.close(fd)
            return .failure(RegularFileError(.failed, errnoCode: code, "fstat: \(String(cString: strerror(code)))"))
        }
        guard status.st_mode & S_IFMT == S_IFREG else {
            Glibc.close(fd)
            return .failure(RegularFileError(.notRegular, "\(kindName(status.st_mode)), not a regular file"))
        }
        let current = fcntl(fd, F_GETFL)
        if current >= 0 { _ = fcntl(fd, F_SETFL, current & ~O_NONBLOCK) }
        if truncate, ftruncate(fd, 0) != 0 {
            let code = errno
            Glibc.close(fd)
            return .failure(RegularFileError(.failed, errnoCode: code, "truncate: \(String(cString: strerror(code)))"))
        }
        return .success(fd)
    }

    /// Reads the whole regular file at `path`, refusing one larger than `maximumBytes` (checked
    /// on the size first, and again while reading, for a file that grows).
    public static func read(_ path: String, maximumBytes: Int, followSymlinks: Bool) -> Result<[UInt8], RegularFileError> {
        let fd: Int32
        switch open(path, flags: O_RDONLY | (followSymlinks ? 0 : O_NOFOLLOW)) {
        case .success(let opened): fd = opened
        case .failure(let error): return .failure(error)
        }
        defer { Glibc.close(fd) }
        var status = stat()
        if fstat(fd, &status) == 0, Int(status.st_size) > maximumBytes {
            return .failure(RegularFileError(.tooLarge, "\(status.st_size) bytes, more than \(maximumBytes)"))
        }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 16 * 1024)
        while true {
            let n = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if n < 0 {
                let code = errno
                if code == EINTR { continue }
                return .failure(RegularFileError(.failed, errnoCode: code, "read: \(String(cString: strerror(code)))"))
            }
            if n == 0 { break }
            bytes.append(contentsOf: chunk[..<n])
            guard bytes.count <= maximumBytes else {
                return .failure(RegularFileError(.tooLarge, "more than \(maximumBytes) bytes"))
            }
        }
        return .success(bytes)
    }

    /// "a FIFO", "a character device", … for a file's st_mode.
    public static func kindName(_ mode: mode_t) -> String {
        switch mode & S_IFMT {
        case S_IFREG: return "a regular file"
        case S_IFIFO: return "a FIFO"
        case S_IFCHR: return "a character device"
        case S_IFBLK: return "a block device"
        case S_IFSOCK: return "a socket"
        case S_IFDIR: return "a directory"
        case S_IFLNK: return "a symbolic link"
        default: return "a special file"
        }
    }

    private static func kindAt(_ path: String, following: Bool) -> String {
        var status = stat()
        let found = following ? stat(path, &status) : lstat(path, &status)
        return found == 0 ? kindName(status.st_mode) : "a special file"
    }
}
#endif
