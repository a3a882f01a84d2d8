#if canImport(Glibc)
import Glibc
import BlemuCore
import BlemuCrypto

/// A BTHome bindkey from its file (`--bindkey-file PATH`; never on the command line, where `ps`
/// and the shell's history would show it): 32 hex digits (the form Home Assistant asks for),
/// surrounding whitespace allowed. The file is opened as `RegularFile` does (a FIFO or device
/// node refused at once) and may be a symbolic link (the user's own file).
public enum BTHomeBindkey {
    /// The key, and a warning when the file is readable by group or others (the key is as
    /// secret as a bond's). Failure: why the file or its contents are refused, without the
    /// contents (they may be most of a key).
    public static func read(path: String) -> Result<(key: AESCCMKey, warning: String?), BindkeyFileError> {
        let bytes: [UInt8]
        switch RegularFile.read(path, maximumBytes: 1024, followSymlinks: true) {
        case .success(let read): bytes = read
        case .failure(let error): return .failure(BindkeyFileError("cannot read the bindkey file \(path): \(error.description)"))
        }
        guard let key = parse(bytes) else {
            return .failure(BindkeyFileError("the bindkey file \(path) does not hold a BTHome bindkey: 32 hex digits (16 bytes) expected"))
        }
        var status = stat()
        let exposed = stat(path, &status) == 0 && status.st_mode & 0o077 != 0
        return .success((key, exposed ? "the bindkey file \(path) is readable by others (mode \(String(status.st_mode & 0o777, radix: 8))): chmod 600 it" : nil))
    }

    /// 32 hex digits with optional surrounding whitespace → the key; nil for anything else.
    public static func parse(_ bytes: [UInt8]) -> AESCCMKey? {
        let isSpace: (UInt8) -> Bool = { $0 == 0x20 || $0 == 0x09 || $0 == 0x0A || $0 == 0x0D }
        let trimmed = bytes.drop(while: isSpace).reversed().drop(while: isSpace).reversed()
        guard trimmed.count == 32, trimmed.allSatisfy({ Hex.digit($0) != nil }) else { return nil }
        let digits = Array(trimmed)
        let key = stride(from: 0, to: 32, by: 2).map { Hex.digit(digits[$0])! << 4 | Hex.digit(digits[$0 + 1])! }
        return AESCCMKey(key)
    }
}

/// Why a bindkey file was refused (for the usage error that stops the start).
public struct BindkeyFileError: Error, Equatable, Sendable, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
#endif
