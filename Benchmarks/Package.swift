// swift-tools-version: 6.1
import PackageDescription

// Benchmarks live in their own package so that building and testing blemu does not build the
// benchmark harness. Run: `cd Benchmarks && swift package benchmark` (see Docs/PERFORMANCE.md).
let package = Package(
    name: "blemu-benchmarks",
    platforms: [.macOS(.v13)],
    dependencies: [
        // The package is named by its folder: a CI clone may call it anything but main, so keep
        // the checkout folder name in mind when running this outside the repo root.
        .package(name: "main", path: ".."),
        .package(url: "https://github.com/ordo-one/benchmark", from: "1.38.1", traits: ["MallocInterposer"]),
    ],
    targets: [
        .executableTarget(
            name: "ATTRequests",
            dependencies: [
                .product(name: "Benchmark", package: "benchmark"),
                .product(name: "BlemuKit", package: "main"),
            ],
            path: "Benchmarks/ATTRequests",
            plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
        ),
    ]
)
