#if canImport(Glibc)
import Glibc
#endif

/// Where blemu keeps what outlives a run (bonds, identities, passkeys, counters): one rule for
/// every command and front end.
public enum StateDirectory {
    /// The state directory: `given` (--state-dir), else systemd's $STATE_DIRECTORY (its first
    /// entry: it may list several, colon-separated), else ~/.local/state/blemu (XDG_STATE_HOME's
    /// default); nil when there is none of them.
    public static func path(given: String?,
                            environment: (String) -> String? = { getenv($0).map { String(cString: $0) } }) -> String? {
        if let given { return given }
        if let text = environment("STATE_DIRECTORY"), let first = text.split(separator: ":").first, !first.isEmpty {
            return String(first)
        }
        if let home = environment("HOME"), !home.isEmpty {
            return home + "/.local/state/blemu"
        }
        return nil
    }
}
