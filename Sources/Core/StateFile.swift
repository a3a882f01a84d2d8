#if canImport(Glibc)
import Glibc

/// The state directory's files (bonds, identities, chat keys and names): written whole or not at all.
extension RegularFile {
    /// Writes `bytes` to `path` so that a crash leaves the old file or the new one: a temporary
    /// file beside it (0600), fsync, rename, fsync of the directory. Creates the directory (0700)
    /// when missing. Returns what failed, or nil.
    public static func writeAtomically(_ bytes: [UInt8], to path: String) -> String? {
        let directory = path.lastIndex(of: "/").map { String(path[..<$0]) } ?? "."
        if let failure = makeDirectories(directory.isEmpty ? "/" : directory) { return failure }
        let temporary = "\(path).tmp-\(getpid())"
        let fd: Int32
        switch RegularFile.open(temporary, flags: O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW, mode: 0o600) {
        case .success(let opened): fd = opened
        case .failure(let error): return "cannot create \(temporary): \(error)"
        }
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + offset, bytes.count - offset) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else {
                let reason = String(cString: strerror(errno))
                close(fd)
                unlink(temporary)
                return "cannot write \(temporary): \(reason)"
            }
            offset += n
        }
        // A file created earlier with a wider mode is narrowed too.
        _ = fchmod(fd, 0o600)
        guard fsync(fd) == 0 else {
            let reason = String(cString: strerror(errno))
            close(fd)
            unlink(temporary)
            return "cannot fsync \(temporary): \(reason)"
        }
        close(fd)
        guard rename(temporary, path) == 0 else {
            let reason = String(cString: strerror(errno))
            unlink(temporary)
            return "cannot rename \(temporary) to \(path): \(reason)"
        }
        let directoryFD = Glibc.open(directory.isEmpty ? "/" : directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if directoryFD >= 0 {
            _ = fsync(directoryFD)
            close(directoryFD)
        }
        return nil
    }

    /// `mkdir -p` with mode 0700 for what it creates.
    public static func makeDirectories(_ path: String) -> String? {
        var status = stat()
        if stat(path, &status) == 0 {
            return status.st_mode & S_IFMT == S_IFDIR ? nil : "\(path) is not a directory"
        }
        if let slash = path.lastIndex(of: "/"), slash != path.startIndex {
            if let failure = makeDirectories(String(path[..<slash])) { return failure }
        }
        if mkdir(path, 0o700) != 0 && errno != EEXIST {
            return "cannot create the directory \(path): \(String(cString: strerror(errno)))"
        }
        return nil
    }

    /// Renames a damaged file to `PATH.damaged-N` (the first N free), so it is kept for a look
    /// and never read again. Returns the new path, or nil when it could not be moved.
    public static func moveAside(_ path: String) -> String? {
        for attempt in 1...1000 {
            let aside = "\(path).damaged-\(attempt)"
            var status = stat()
            if lstat(aside, &status) == 0 { continue }
            return rename(path, aside) == 0 ? aside : nil
        }
        return nil
    }
}
#endif
