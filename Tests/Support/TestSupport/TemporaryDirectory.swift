#if canImport(Glibc)
import Glibc
#endif

/// A fresh directory under /tmp for one test, removed with the files in it by `remove()` or when
/// the last reference goes: tests never write to the checkout or the user's state directory.
public final class TemporaryDirectory {
    public let path: String

    public init(prefix: String = "blemu-test") {
        var template = Array("/tmp/\(prefix)-XXXXXX".utf8CString)
        path = template.withUnsafeMutableBufferPointer { String(cString: mkdtemp($0.baseAddress!)!) }
    }

    public func file(_ name: String) -> String { "\(path)/\(name)" }

    /// Writes `text` to the file `name` in the directory (created or truncated, mode 0600).
    public func write(_ name: String, _ text: String) {
        let fd = open(file(name), O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        guard fd >= 0 else { return }
        _ = text.utf8CString.withUnsafeBufferPointer { Glibc.write(fd, $0.baseAddress, $0.count - 1) }
        close(fd)
    }

    /// Removes the files in the directory and the directory (FIFOs, links and device nodes are
    /// unlinked, never opened). Safe to call twice.
    public func remove() {
        if let directory = opendir(path) {
            while let entry = readdir(directory) {
                let name = withUnsafeBytes(of: entry.pointee.d_name) { String(cString: $0.bindMemory(to: CChar.self).baseAddress!) }
                if name != "." && name != ".." { unlink(file(name)) }
            }
            closedir(directory)
        }
        rmdir(path)
    }

    deinit { remove() }
}
