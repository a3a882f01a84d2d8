// swift-tools-version: 6.1
import Foundation
import PackageDescription

// A local package's identity is its folder's name, which depends on where blemu was cloned.
let blemuFolder = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
let blemuIdentity = blemuFolder.lastPathComponent.lowercased()

// Benchmarks live in their own package so that building and testing blemu does not build the
// benchmark harness. Run: `cd Benchmarks && swift package benchmark` (see Docs/PERFORMANCE.md).
let package = Package(
    name: "blemu-benchmarks",
    platforms: [.macOS(.v13)],
    dependencies: [
        .package(path: ".."),
        .package(url: "https://github.com/ordo-one/benchmark", from: "1.38.1", traits: ["MallocInterposer"]),
    ],
    targets: [
        .executableTarget(
            name: "ATTRequests",
            dependencies: [
                .product(name: "Benchmark", package: "benchmark"),
                .product(name: "BlemuKit", package: blemuIdentity),
            ],
            path: "Benchmarks/ATTRequests",
            plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
        ),
    ]
)
