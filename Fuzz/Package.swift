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
    ] + ["h4-host", "l2cap", "att-server", "decoders", "control", "gatt-client", "smp", "chat-frames"].map {
        // The stack's modules each target imports come from the product, named here too: a target
        // imports only what it declares (scripts/check-layering).
        .executableTarget(name: $0, dependencies: ["FuzzSupport", .product(name: "BlemuFuzzKit", package: blemuIdentity)],
                          path: "Sources/\($0)", linkerSettings: libFuzzer)
    }
)
