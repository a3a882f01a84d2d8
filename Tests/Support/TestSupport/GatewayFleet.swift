import BlemuCore

/// Issue 38's gateway fleet as one configuration file, Docs/examples/gateway-fleet.yaml: 1,000
/// BTHome thermometers and 100 heart-rate sensors, both spread over 10 s. ConfigTests expands
/// it; StackTests plans and checks every member on its device; `scripts/fleet-cost --file` runs
/// it for PERFORMANCE.md.
public enum GatewayFleet {
    public static let path: String = {
        // Tests/Support/TestSupport/GatewayFleet.swift → the repository.
        var parts = "\(#filePath)".split(separator: "/", omittingEmptySubsequences: false)
        parts.removeLast(4)
        return parts.joined(separator: "/") + "/Docs/examples/gateway-fleet.yaml"
    }()

    /// The file's text ("" when it cannot be read: the tests that use it then fail on it).
    public static var configuration: String {
        switch RegularFile.read(path, maximumBytes: 64 * 1024, followSymlinks: false) {
        case .success(let bytes): return String(decoding: bytes, as: UTF8.self)
        case .failure: return ""
        }
    }
}
