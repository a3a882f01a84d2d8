// swift-tools-version: 6.1
import Foundation
import PackageDescription

// A local package's identity is its folder's name, which depends on where blemu was cloned.
let blemuFolder = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
let blemuIdentity = blemuFolder.lastPathComponent.lowercased()

// Coverage-guided libFuzzer targets that drive the whole stack in process (Docs/TESTING.md).
// Each executable defines LLVMFuzzerTestOneInput and a `<module>_main` that runs libFuzzer's
// driver on it: build them only with the sanitizers, which instrument every Swift module
// (blemu's too) and link libFuzzer, one product at a time:
//
//     swift build --package-path Fuzz --scratch-path .build-fuzz -c debug \
//         -Xswiftc -sanitize=fuzzer,address -Xswiftc -parse-as-library --product att-server
//
// scripts/fuzz does that and runs them; a plain `swift build` here fails at link time.
// The throughput build of scripts/fuzz (no AddressSanitizer, BLEMU_FUZZ_THROUGHPUT=1, in
// <scratch>-throughput; -sanitize=fuzzer only on the stack's modules, BLEMU_FUZZ_COVERAGE_MODULES in
// blemu's Package.swift): the driver counts allocations itself for the memory oracle, as
// AddressSanitizer's allocator does in the other build.
let throughput = Context.environment["BLEMU_FUZZ_THROUGHPUT"] == "1"
// libFuzzer's runtime, for the builds that do not give -sanitize=fuzzer on the command line
// (the throughput build: coverage on the stack's modules only). With it on the command
// line (the asan build) this changes nothing.
let libFuzzer: [LinkerSetting] = [.unsafeFlags(["-sanitize=fuzzer"])]

let package = Package(
    name: "blemu-fuzz",
    platforms: [.macOS(.v13)],
    dependencies: [
        .package(path: ".."),
    ],
    targets: [
        // libFuzzer's driver behind the `<module>_main` that SwiftPM links as each executable's main.
        .target(name: "CFuzzDriver", path: "Sources/CFuzzDriver",
                cSettings: throughput ? [.define("BLEMU_FUZZ_COUNT_MALLOC")] : []),
        // What the targets share: the controller, the input reader, the fuzz device.
        .target(name: "FuzzSupport", dependencies: ["CFuzzDriver", .product(name: "BlemuFuzzKit", package: blemuIdentity)],
                path: "Sources/FuzzSupport"),
        .executableTarget(name: "h4-host", dependencies: ["FuzzSupport"], path: "Sources/h4-host",
                          linkerSettings: libFuzzer),
        .executableTarget(name: "l2cap", dependencies: ["FuzzSupport"], path: "Sources/l2cap",
                          linkerSettings: libFuzzer),
        .executableTarget(name: "att-server", dependencies: ["FuzzSupport"], path: "Sources/att-server",
                          linkerSettings: libFuzzer),
        .executableTarget(name: "decoders", dependencies: ["FuzzSupport"], path: "Sources/decoders",
                          linkerSettings: libFuzzer),
        .executableTarget(name: "control", dependencies: ["FuzzSupport"], path: "Sources/control",
                          linkerSettings: libFuzzer),
        .executableTarget(name: "gatt-client", dependencies: ["FuzzSupport"], path: "Sources/gatt-client",
                          linkerSettings: libFuzzer),
        .executableTarget(name: "smp", dependencies: ["FuzzSupport"], path: "Sources/smp",
                          linkerSettings: libFuzzer),
        .executableTarget(name: "chat-frames", dependencies: ["FuzzSupport"], path: "Sources/chat-frames",
                          linkerSettings: libFuzzer),
    ]
)
