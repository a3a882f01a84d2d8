// swift-tools-version: 6.1
import PackageDescription

// One module per layer (see Docs/ARCHITECTURE.md): a layer imports only the layers below it.
let package = Package(
    name: "blemu",
    platforms: [.macOS(.v13)],
    products: [
        .executable(name: "blemu", targets: ["blemu"]),
        // The stack as a library, for the benchmarks (Benchmarks/) and fuzz (Fuzz/) packages and embedding.
        .library(name: "BlemuKit", targets: ["BlemuCore", "BlemuHCI", "BlemuL2CAP", "BlemuChannels", "BlemuATT", "BlemuEATT", "BlemuGATT", "BlemuGATTClient", "BlemuConnection", "BlemuCentral", "BlemuDevice", "BlemuHost",
                                             "BlemuCrypto", "BlemuSMP", "BlemuSecurity", "BlemuBroadcast", "BlemuObserver",
                                             "BlemuAssignedNumbers", "BlemuChatProtocol", "BlemuDevices", "BlemuTransport", "BlemuControl", "BlemuSimulator", "BlemuBenchRig", "BlemuBench", "BlemuBenchProtocol"]),
        // What Fuzz/'s targets drive, and no more: the layers up to Host, Devices, Transport and
        // Control, the simulated controller, the bench codecs. Not Stack and what only it
        // assembles (Chat, Scenario, Profile, Config, ...), Central or Bench: the fuzz build
        // (release, AddressSanitizer, in scripts/test's smoke run) compiles every module of the
        // products it depends on.
        .library(name: "BlemuFuzzKit", targets: ["BlemuCore", "BlemuHCI", "BlemuL2CAP", "BlemuChannels", "BlemuATT", "BlemuEATT", "BlemuGATT",
                                                  "BlemuGATTClient", "BlemuConnection", "BlemuDevice", "BlemuHost", "BlemuCrypto", "BlemuSMP", "BlemuSecurity", "BlemuBroadcast",
                                                  "BlemuChatProtocol", "BlemuDevices", "BlemuRunLoop", "BlemuTransport", "BlemuControl", "BlemuSimulator",
                                                  "BlemuBenchProtocol"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-collections", from: "1.6.0"),
        // 4.x imports FoundationEssentials only (3.x linked Foundation with ICU): see Docs/PERFORMANCE.md, Footprint.
        .package(url: "https://github.com/apple/swift-crypto", from: "4.5.2"),
    ],
    targets: [
        // C: what Glibc's Swift module lacks (epoll, timerfd, signalfd, termios flags).
        .target(name: "CLinux", path: "Sources/CLinux"),
        // C: a constructor in `blemu` only, before the Swift runtime starts: single-page faults
        // from the start, for the peak RSS (Docs/PERFORMANCE.md, "The peak at start-up").
        .target(name: "CStartup", dependencies: ["CLinux"], path: "Sources/CStartup"),
        // libbluetooth-dev: sockaddr_hci and the user-channel constants.
        .systemLibrary(name: "CBlueZ", path: "Sources/CBlueZ", pkgConfig: "bluez",
                       providers: [.apt(["libbluetooth-dev"])]),
        // libsystemd-dev: the journal backend.
        .systemLibrary(name: "CSystemd", path: "Sources/CSystemd", pkgConfig: "libsystemd",
                       providers: [.apt(["libsystemd-dev"])]),
        // libyaml-dev: the --config file parser (YAML events; Sources/Config/YAMLTree.swift makes the tree).
        .systemLibrary(name: "CYAML", path: "Sources/CYAML", pkgConfig: "yaml-0.1",
                       providers: [.apt(["libyaml-dev"])]),

        .target(name: "BlemuCore", dependencies: [
            .product(name: "Logging", package: "swift-log"),
        ], path: "Sources/Core"),
        // The names of the SIG's assigned numbers (generated tables, binary search) and the
        // Characteristic Presentation Format: for output people read (`gatt`, `scan`). Beside Core.
        .target(name: "BlemuAssignedNumbers", dependencies: ["BlemuCore"], path: "Sources/AssignedNumbers"),
        .target(name: "BlemuRunLoop", dependencies: ["BlemuCore", "CLinux"], path: "Sources/RunLoop"),
        // HCITransport and the H4 packet type are HCI's: a transport is handed to HCI once.
        .target(name: "BlemuTransport", dependencies: ["BlemuCore", "BlemuHCI", "BlemuRunLoop", "CLinux", "CBlueZ"],
                path: "Sources/Transport"),
        .target(name: "BlemuHCI", dependencies: [
            "BlemuCore",
            .product(name: "DequeModule", package: "swift-collections"),
        ], path: "Sources/HCI"),
        // The link layer: an L2CAPLink per ACL link (reassembly, framing, fixed channels, LE signalling).
        .target(name: "BlemuL2CAP", dependencies: [
            "BlemuCore", "BlemuHCI",
            .product(name: "Logging", package: "swift-log"),
        ], path: "Sources/L2CAP"),
        // Credit based channels (Vol 3, Part A, 3.4.3, 4.22-4.28, 10.1): the channels of both credit
        // based modes of a link, on its LE signalling and dynamic CIDs. Above L2CAP, beside ATT.
        .target(name: "BlemuChannels", dependencies: ["BlemuCore", "BlemuHCI", "BlemuL2CAP"], path: "Sources/Channels"),
        // ATT PDUs and the ATTBearer, a fixed channel of an L2CAPLink.
        .target(name: "BlemuATT", dependencies: ["BlemuCore", "BlemuHCI", "BlemuL2CAP"], path: "Sources/ATT"),
        // The one crypto module (Vol 3, Part H, 2.2 and 2.4.5): AES-CMAC, the SMP toolbox, P-256
        // keys, data signing. The only user of swift-crypto; below SMP and GATT, beside ATT.
        .target(name: "BlemuCrypto", dependencies: [
            "BlemuCore",
            .product(name: "Crypto", package: "swift-crypto"),
            .product(name: "_CryptoExtras", package: "swift-crypto"),
        ], path: "Sources/Crypto"),
        // Enhanced ATT (Vol 3, Part G, 3.6; Part F, 3.2.11), what both roles share: ATT bearers over
        // Enhanced Credit Based channels on the EATT PSM, a link's set of them, the PSM served,
        // and requests spread over them one at a time each. Above ATT and Channels, below Host and Central.
        .target(name: "BlemuEATT", dependencies: ["BlemuCore", "BlemuATT", "BlemuChannels"], path: "Sources/EATT"),
        // The Security Manager (Vol 3, Part H): SMP PDUs, the pairing state machines of both roles.
        // Pure (no I/O, no timers of its own); beside ATT, below GATT and Host.
        // Connectionless sensors' payloads (BTHome v2, plain and AES-CCM encrypted, iBeacon,
        // Eddystone): encoders and total decoders, the BTHome counter in the state directory. Pure
        // but for that file; beside SMP, above Crypto (the AES-CCM), below the devices and the scan.
        .target(name: "BlemuBroadcast", dependencies: ["BlemuCore", "BlemuCrypto"], path: "Sources/Broadcast"),
        .target(name: "BlemuSMP", dependencies: ["BlemuCore", "BlemuCrypto"], path: "Sources/SMP"),
        // Pairing and bonding of a peripheral's links: an SMPResponder per link, the LTK request,
        // encryption state, bonds in a file. Above SMP, below Host.
        .target(name: "BlemuSecurity", dependencies: [
            "BlemuCore", "BlemuCrypto", "BlemuSMP",
            .product(name: "Logging", package: "swift-log"),
        ], path: "Sources/Security"),
        .target(name: "BlemuGATT", dependencies: [
            "BlemuCore", "BlemuATT", "BlemuCrypto",
            .product(name: "DequeModule", package: "swift-collections"),
        ], path: "Sources/GATT"),
        // The client side of ATT, beside the server: the same PDU types and GATT vocabulary.
        .target(name: "BlemuGATTClient", dependencies: [
            "BlemuCore", "BlemuATT", "BlemuGATT",
            .product(name: "DequeModule", package: "swift-collections"),
        ], path: "Sources/GATTClient"),
        // One ACL link whichever role made it (`LEConnection`): its L2CAP link, the one LinkSecurity,
        // the unenhanced and enhanced ATT bearers, the GATT server session, the credit based channels,
        // SMP's channel, the peer and the link's parameters; the roles attach their endpoints (a server
        // behind the role's stage, a client) and keep no per-link object beside it. Below Host and Central.
        .target(name: "BlemuConnection", dependencies: [
            "BlemuCore", "BlemuHCI", "BlemuL2CAP", "BlemuChannels", "BlemuATT", "BlemuEATT", "BlemuGATT", "BlemuGATTClient",
        ], path: "Sources/Connection"),
        // The central role beside the peripheral host: scanning, connecting, links with a GATT client.
        .target(name: "BlemuCentral", dependencies: [
            "BlemuCore", "BlemuConnection", "BlemuHCI", "BlemuL2CAP", "BlemuChannels", "BlemuATT", "BlemuEATT", "BlemuGATT", "BlemuGATTClient", "BlemuCrypto", "BlemuSMP", "BlemuSecurity",
            .product(name: "Logging", package: "swift-log"),
        ], path: "Sources/Central"),
        // The API a device is written against (`Device`, `DeviceContext`, `BroadcastingDevice`,
        // `BroadcastContext`, their value types): protocols only, so a device compiles against
        // GATT's declarations and Channels' channel API, never against the host that runs it.
        // Above GATT, Channels and HCI; Host implements it, Devices/ import it.
        .target(name: "BlemuDevice", dependencies: [
            "BlemuCore", "BlemuChannels", "BlemuGATT", "BlemuHCI",
            .product(name: "Logging", package: "swift-log"),
        ], path: "Sources/Device"),
        .target(name: "BlemuHost", dependencies: [
            "BlemuCore", "BlemuDevice", "BlemuConnection", "BlemuHCI", "BlemuL2CAP", "BlemuChannels", "BlemuATT", "BlemuEATT", "BlemuGATT", "BlemuCrypto", "BlemuSMP", "BlemuSecurity",
            .product(name: "Logging", package: "swift-log"),
            .product(name: "DequeModule", package: "swift-collections"),
        ], path: "Sources/Host"),
        // The chat protocol between nodes (Docs/CHAT.md): its frames, their reassembly, the signed and
        // sealed message's proof, and a node's trust in a room. Pure (no GATT, no I/O); below both the
        // chat device (Devices/Chat) and the member (Chat), above Crypto.
        .target(name: "BlemuChatProtocol", dependencies: [
            "BlemuCore", "BlemuCrypto",
            .product(name: "Logging", package: "swift-log"), .product(name: "DequeModule", package: "swift-collections"),
        ], path: "Sources/ChatProtocol"),
        .target(name: "BlemuDevices", dependencies: ["BlemuCore", "BlemuATT", "BlemuGATT", "BlemuHCI", "BlemuDevice", "BlemuCrypto", "BlemuBroadcast", "BlemuChannels", "BlemuChatProtocol",
            .product(name: "Logging", package: "swift-log"), .product(name: "DequeModule", package: "swift-collections"),
        ], path: "Devices"),
        // Configuration files: devices and their options, checked before anything starts.
        // GATT profiles: a cloned device's database and values, read from JSON and served as a device,
        // and written from what a GATT client discovered and read (the exporter).
        .target(name: "BlemuProfile", dependencies: [
            "BlemuCore", "BlemuATT", "BlemuGATT", "BlemuGATTClient", "BlemuHost", "BlemuDevice", "BlemuDevices",
            .product(name: "Logging", package: "swift-log"),
        ], path: "Sources/Profile"),
        // `blemu gatt ... record` and `dump --profile`: what a central's GATT workflow found (a dump,
        // a timeline) made a recording or a clone, for any front end. Above Central and Profile.
        .target(name: "BlemuRecording", dependencies: ["BlemuCentral", "BlemuCore", "BlemuGATTClient", "BlemuProfile"],
                path: "Sources/Recording"),
        // Values as a person reads them (`blemu gatt`): names, the devices' own decoders, the
        // Presentation Format, a dump's text and JSON; how a characteristic is named. Above
        // Central, Profile and the devices, whose decoders it uses; any front end shows values with it.
        .target(name: "BlemuGATTText", dependencies: [
            "BlemuAssignedNumbers", "BlemuCentral", "BlemuControl", "BlemuCore", "BlemuDevices", "BlemuGATT", "BlemuGATTClient", "BlemuHost", "BlemuProfile",
        ], path: "Sources/GATTText"),
        .target(name: "BlemuConfig", dependencies: [
            "BlemuCore", "BlemuHCI", "BlemuTransport", "CYAML",
        ], path: "Sources/Config"),
        // The programmable host (`blemu host`, Docs/CONTROL.md "The programmable host"): both roles
        // on one controller driven by requests (advertise, scan, connect, secure, bonds), the links
        // of both in one table whose ids are a test framework's connection tokens. Above Host,
        // Central and Security; Control runs its requests, Stack assembles it.
        .target(name: "BlemuProgrammableHost", dependencies: [
            "BlemuCore", "BlemuHCI", "BlemuConnection", "BlemuL2CAP", "BlemuChannels", "BlemuGATT", "BlemuSMP", "BlemuSecurity",
            "BlemuDevice", "BlemuHost", "BlemuCentral",
            .product(name: "Logging", package: "swift-log"),
        ], path: "Sources/ProgrammableHost"),
        // The control socket (`blemu run --control PATH`): above Host, below the CLI.
        .target(name: "BlemuControl", dependencies: [
            "BlemuCore", "BlemuRunLoop", "BlemuATT", "BlemuGATT", "BlemuHCI", "BlemuHost", "BlemuSMP", "BlemuSecurity", "BlemuCentral", "BlemuProgrammableHost", "BlemuChannels", "CLinux",
            .product(name: "Logging", package: "swift-log"),
        ], path: "Sources/Control"),
        // Scenario files (`blemu run --scenario`): the YAML steps and their runner on the run
        // loop's scheduler, acting through the control API and watching the devices' events.
        .target(name: "BlemuScenario", dependencies: [
            "BlemuCore", "BlemuConfig", "BlemuControl", "BlemuHost",
            .product(name: "Logging", package: "swift-log"),
        ], path: "Sources/Scenario"),
        // `blemu attach`: the kernel's virtual adapter (/dev/vhci) bridged to a controller on another
        // radio, and the commands answered for that controller. Above Transport, beside the stack.
        .target(name: "BlemuAttach", dependencies: ["BlemuCore", "BlemuRunLoop", "BlemuHCI", "BlemuTransport"], path: "Sources/Attach"),
        // --btsnoop: the HCI packet capture (btsnoop files, rotation). Beside Transport: it sees packets as bytes.
        .target(name: "BlemuCapture", dependencies: ["BlemuCore"], path: "Sources/Capture"),
        // systemd integration: sd_notify readiness, status, watchdog (Type=notify units).
        .target(name: "BlemuService", dependencies: [
            "BlemuCore", "BlemuRunLoop", "CSystemd",
            .product(name: "Logging", package: "swift-log"),
        ], path: "Sources/Service"),
        // The systemd journal log handler (`--log journal`): sd_journal_sendv through libsystemd.
        .target(name: "BlemuJournal", dependencies: [
            "BlemuCore", "CSystemd",
            .product(name: "Logging", package: "swift-log"),
        ], path: "Sources/Journal"),
        // The chat between nodes (Docs/CHAT.md): a node's rooms, one per controller, as host or
        // member, and the bridge between them. Above the central and the chat device.
        .target(name: "BlemuChat", dependencies: [
            "BlemuCore", "BlemuCentral", "BlemuChannels", "BlemuChatProtocol", "BlemuGATT", "BlemuGATTClient", "BlemuHost", "BlemuDevice", "BlemuDevices", "BlemuCrypto", "BlemuSecurity",
            .product(name: "Logging", package: "swift-log"),
        ], path: "Sources/Chat"),
        // The observer of `blemu scan`: an advertiser's AD structures decoded into a report
        // (BTHome, iBeacon, Eddystone, known service and manufacturer data), its text and JSON,
        // and `--watch`'s one-reading-once memory. Above Broadcast and Central; the CLI prints.
        .target(name: "BlemuObserver", dependencies: ["BlemuCore", "BlemuAssignedNumbers", "BlemuCrypto", "BlemuBroadcast", "BlemuCentral"],
                path: "Sources/Observer"),
        // What phones drop (`blemu lint`): named rules, each a pure function of one advertisement's
        // bytes and settings, with the spec or vendor document it comes from. Above Broadcast and
        // HCI, whose decoders it reads the bytes with; Stack collects the advertisements.
        .target(name: "BlemuLint", dependencies: ["BlemuCore", "BlemuHCI", "BlemuBroadcast"], path: "Sources/Lint"),
        // A controller's stack assembled from a plan (devices, roles, options) for `run`, `chat`,
        // `gatt` and `scan`: what any front end reuses. Above every layer it assembles, below the CLI.
        .target(name: "BlemuStack", dependencies: [
            "BlemuCore", "BlemuRunLoop", "BlemuTransport", "BlemuHCI", "BlemuATT", "BlemuGATT", "BlemuGATTClient",
            "BlemuCrypto", "BlemuSMP", "BlemuSecurity", "BlemuHost", "BlemuCentral", "BlemuDevice", "BlemuDevices", "BlemuProfile", "BlemuConfig", "BlemuBroadcast",
            "BlemuChat", "BlemuChatProtocol", "BlemuControl", "BlemuScenario", "BlemuCapture", "BlemuService", "BlemuLint", "BlemuProgrammableHost",
            .product(name: "Logging", package: "swift-log"),
        ], path: "Sources/Stack"),
        // bumble-bench's packets and their stream framing: pure codecs on Core alone, below Stack, so
        // Fuzz/'s `decoders` target reaches them without building the whole stack.
        .target(name: "BlemuBenchProtocol", dependencies: ["BlemuCore"], path: "Sources/BenchProtocol"),
        // `blemu bench` (bumble-bench's protocol, scenarios and statistics, and the run on one
        // controller in either role). Above Stack (it assembles a central session or a device's
        // controller stack), below the CLI.
        .target(name: "BlemuBench", dependencies: [
            "BlemuCore", "BlemuRunLoop", "BlemuTransport", "BlemuHCI", "BlemuATT", "BlemuGATT", "BlemuGATTClient", "BlemuChannels",
            "BlemuDevice", "BlemuHost", "BlemuCentral", "BlemuStack", "BlemuBenchProtocol",
            .product(name: "Logging", package: "swift-log"),
        ], path: "Sources/Bench"),
        .executableTarget(name: "blemu", dependencies: [
            "BlemuCore", "BlemuRunLoop", "BlemuAttach", "BlemuBench", "BlemuTransport", "BlemuHost", "BlemuDevice", "BlemuDevices", "BlemuControl", "BlemuConfig", "BlemuStack", "BlemuScenario",
            "BlemuJournal",
            "BlemuCapture", "BlemuService", "BlemuCentral", "BlemuGATTClient", "BlemuGATT", "BlemuProfile", "BlemuRecording", "BlemuGATTText", "BlemuChat", "BlemuChatProtocol",
            "BlemuSecurity", "BlemuSMP", "BlemuCrypto", "BlemuATT", "BlemuBroadcast", "BlemuObserver", "BlemuAssignedNumbers", "BlemuLint", "BlemuHCI", "CLinux", "CStartup",
            .product(name: "ArgumentParser", package: "swift-argument-parser"),
            .product(name: "Logging", package: "swift-log"),
        ], path: "Sources/CLI",
        // With the Swift runtime linked in (--static-swift-stdlib, the board build), the
        // toolchain's static-stdlib-args.lnk passes -export-dynamic: 20 000 symbols of our own
        // modules and BoringSSL in .dynsym/.dynstr/.gnu.hash (2.1 MB), all of which the runtime's
        // start walks (its backtracer's set-up asks dladdr for its own path, and glibc's dladdr
        // looks at every exported symbol of the object). Nothing looks our symbols up by name;
        // an unstripped binary's backtrace still names every function from .symtab
        // (Docs/PERFORMANCE.md, "The peak at start-up"). No effect on a dynamically linked build.
        // -z now: every library symbol bound by the loader, before the start-up pages are given
        // back, so no lazy binding's lookups (ld.so's resolver, the libraries' hash tables) fault
        // pages in later that then stay: 100 KiB less resident while advertising.
        linkerSettings: [.unsafeFlags(["-Xlinker", "--no-export-dynamic", "-Xlinker", "-z", "-Xlinker", "now"])]),

        // The one simulated controller (scripted, queued, and two joined in process by
        // SimulatedAir) that the unit tests, the fuzz targets and the benchmarks run the host
        // against. Test support, but a library: Fuzz/ and Benchmarks/ are packages of their own.
        .target(name: "BlemuSimulator", dependencies: ["BlemuCore", "BlemuHCI"], path: "Sources/Simulator"),
        // Devices connected in process on a simulated controller, for the benchmarks and the performance gate.
        .target(name: "BlemuBenchRig", dependencies: [
            "BlemuCore", "BlemuHCI", "BlemuGATT", "BlemuHost", "BlemuCentral", "BlemuDevice", "BlemuDevices", "BlemuSimulator",
            .product(name: "Logging", package: "swift-log"),
        ], path: "Sources/BenchRig"),
        // The hot paths for the performance gate (scripts/perf-gate): counted by callgrind.
        .executableTarget(name: "blemu-perf-gate", dependencies: [
            "BlemuBenchRig", "BlemuCore", "BlemuHCI", "BlemuGATT", "BlemuHost", "BlemuDevices", "CLinux",
            .product(name: "Logging", package: "swift-log"),
        ], path: "Sources/PerfGate"),

        // Counts the heap allocations of a hot path (Tests/AllocationTests): zero per request.
        .target(name: "CAllocationCounter", path: "Tests/Support/CAllocationCounter"),
        // What several test targets share: the spec's sample data, temporary directories, captured log lines.
        .target(name: "BlemuTestSupport", dependencies: ["BlemuCore", "BlemuCrypto", .product(name: "Logging", package: "swift-log")],
                path: "Tests/Support/TestSupport"),
        .testTarget(name: "AllocationTests", dependencies: ["CAllocationCounter", "BlemuCore", "BlemuBench", "BlemuBenchProtocol", "BlemuBenchRig", "BlemuHost", "BlemuDevice", "BlemuDevices", "BlemuChannels", "BlemuL2CAP",
                                                         "BlemuGATT", "BlemuGATTClient", "BlemuATT", "BlemuCrypto", "BlemuHCI", "BlemuRunLoop",
                                                         "BlemuCentral", "BlemuTransport"],
                    path: "Tests/AllocationTests"),
        .testTarget(name: "ChatTests", dependencies: ["BlemuTestSupport", "BlemuChat", "BlemuChatProtocol", "BlemuDevices", "BlemuCrypto", "BlemuCore",
                                                "BlemuCentral", "BlemuHost", "BlemuHCI", "BlemuSimulator",
                                                .product(name: "Logging", package: "swift-log")], path: "Tests/ChatTests"),
        .testTarget(name: "AssignedNumbersTests", dependencies: ["BlemuAssignedNumbers", "BlemuCore"], path: "Tests/AssignedNumbersTests"),
        .testTarget(name: "CoreTests", dependencies: ["BlemuTestSupport", "BlemuCore"], path: "Tests/CoreTests"),
        .testTarget(name: "JournalTests", dependencies: ["BlemuJournal", "BlemuCore", .product(name: "Logging", package: "swift-log")],
                    path: "Tests/JournalTests"),
        .testTarget(name: "ConfigTests", dependencies: ["BlemuTestSupport", "BlemuConfig", "BlemuHCI", "BlemuTransport", "BlemuCore"],
                    path: "Tests/ConfigTests"),
        .testTarget(name: "RunLoopTests", dependencies: ["BlemuCore", "BlemuRunLoop", "BlemuTransport", "BlemuHCI", "BlemuAttach", "CLinux"],
                    path: "Tests/RunLoopTests"),
        .testTarget(name: "HCITests", dependencies: ["BlemuTestSupport", "BlemuHCI", "BlemuL2CAP", "BlemuSimulator", "BlemuCore", .product(name: "Logging", package: "swift-log")],
                    path: "Tests/HCITests"),
        // The link layer alone: reassembly, framing, fixed channels, LE signalling of an L2CAPLink.
        .testTarget(name: "L2CAPTests", dependencies: ["BlemuTestSupport", "BlemuL2CAP", "BlemuHCI", "BlemuCore", .product(name: "Logging", package: "swift-log")],
                    path: "Tests/L2CAPTests"),
        .testTarget(name: "ChannelsTests", dependencies: ["BlemuTestSupport", "BlemuChannels", "BlemuL2CAP", "BlemuHCI", "BlemuCore", "BlemuSimulator",
                                                   .product(name: "Logging", package: "swift-log")],
                    path: "Tests/ChannelsTests"),
        .testTarget(name: "EATTTests", dependencies: ["BlemuEATT"], path: "Tests/EATTTests"),
        .testTarget(name: "ATTTests", dependencies: ["BlemuATT", "BlemuL2CAP", "BlemuHCI", "BlemuCore"], path: "Tests/ATTTests"),
        // The devices' models alone (no GATT, no scheduler: time handed in).
        .testTarget(name: "DevicesTests", dependencies: ["BlemuATT", "BlemuBroadcast", "BlemuChat", "BlemuChatProtocol", "BlemuCore", "BlemuCrypto", "BlemuDevice", "BlemuDevices", "BlemuGATT", "BlemuHCI", "BlemuHost", "BlemuL2CAP", "BlemuSecurity", "BlemuSimulator", "BlemuTestSupport", "HostTestSupport",
                                                      .product(name: "Logging", package: "swift-log")],
                    path: "Tests/DevicesTests"),
        .testTarget(name: "ChatProtocolTests", dependencies: ["BlemuChatProtocol", "BlemuCore", "BlemuCrypto",
                                                        .product(name: "Logging", package: "swift-log")],
                    path: "Tests/ChatProtocolTests"),
        .testTarget(name: "CryptoTests", dependencies: ["BlemuTestSupport", "BlemuCrypto", "BlemuCore"], path: "Tests/CryptoTests"),
        .testTarget(name: "BroadcastTests", dependencies: ["BlemuTestSupport", "BlemuBroadcast", "BlemuCrypto", "BlemuCore"],
                    path: "Tests/BroadcastTests"),
        .testTarget(name: "ObserverTests", dependencies: ["BlemuTestSupport", "BlemuObserver", "BlemuBroadcast", "BlemuCentral",
                                                       "BlemuCrypto", "BlemuCore"],
                    path: "Tests/ObserverTests"),
        .testTarget(name: "SMPTests", dependencies: ["BlemuTestSupport", "BlemuSMP", "BlemuCrypto", "BlemuCore"], path: "Tests/SMPTests"),
        .testTarget(name: "SecurityTests", dependencies: ["BlemuSecurity", "BlemuSMP", "BlemuCrypto", "BlemuCore",
                                                       .product(name: "Logging", package: "swift-log")],
                    path: "Tests/SecurityTests"),
        .testTarget(name: "GATTTests", dependencies: ["BlemuGATT", "BlemuATT", "BlemuCrypto", "BlemuCore"], path: "Tests/GATTTests"),
        .testTarget(name: "ProfileTests", dependencies: ["BlemuTestSupport", "BlemuProfile", "BlemuGATT", "BlemuGATTClient", "BlemuATT", "BlemuCore"], path: "Tests/ProfileTests"),
        .testTarget(name: "GATTTextTests", dependencies: ["BlemuGATTText", "BlemuAssignedNumbers", "BlemuCentral", "BlemuCore", "BlemuDevices",
                                                       "BlemuGATTClient"], path: "Tests/GATTTextTests"),
        .testTarget(name: "RecordingTests", dependencies: ["BlemuRecording", "BlemuProfile", "BlemuCentral", "BlemuGATTClient", "BlemuGATT",
                                                        "BlemuCore", "BlemuHCI", "BlemuL2CAP", "BlemuSecurity", "HostTestSupport",
                                                        .product(name: "Logging", package: "swift-log")],
                    path: "Tests/RecordingTests"),
        .testTarget(name: "GATTClientTests", dependencies: ["BlemuGATTClient", "BlemuGATT", "BlemuATT", "BlemuCore"],
                    path: "Tests/GATTClientTests"),
        .testTarget(name: "ControlTests", dependencies: ["BlemuControl", "BlemuCore", "BlemuRunLoop", "BlemuGATT", "BlemuATT", "BlemuHost",
                                                      "CLinux", .product(name: "Logging", package: "swift-log")],
                    path: "Tests/ControlTests"),
        // The command line itself (`@testable import blemu`): the real argument parser and its
        // validation, and every blemu command the README and Docs/ show.
        .testTarget(name: "CLITests", dependencies: ["blemu", "BlemuTransport", "BlemuCore", "BlemuLint",
                                                  "BlemuCentral", "BlemuGATTClient", "BlemuGATTText",
                                                  .product(name: "ArgumentParser", package: "swift-argument-parser")],
                    path: "Tests/CLITests"),
        .testTarget(name: "StackTests", dependencies: ["BlemuTestSupport", "BlemuStack", "BlemuCentral", "BlemuGATTClient", "BlemuGATT", "BlemuATT",
                                                    "BlemuProfile", "BlemuTransport", "BlemuRunLoop", "BlemuCore", "BlemuConfig",
                                                    "BlemuHost", "BlemuDevice", "BlemuDevices", "BlemuSecurity", "BlemuChat", "BlemuLint", "BlemuHCI", "BlemuScenario", "BlemuBroadcast",
                                                    .product(name: "Logging", package: "swift-log")],
                    path: "Tests/StackTests"),
        .testTarget(name: "LintTests", dependencies: ["BlemuLint", "BlemuHCI", "BlemuBroadcast", "BlemuCore"], path: "Tests/LintTests"),
        .testTarget(name: "ScenarioTests", dependencies: ["BlemuTestSupport", "BlemuScenario", "BlemuControl", "BlemuHost", "BlemuGATT", "BlemuCore",
                                                       .product(name: "Logging", package: "swift-log")],
                    path: "Tests/ScenarioTests"),
        .testTarget(name: "BenchTests", dependencies: ["BlemuBench", "BlemuBenchProtocol", "BlemuCore", "BlemuSimulator"], path: "Tests/BenchTests"),
        .testTarget(name: "CaptureTests", dependencies: ["BlemuTestSupport", "BlemuCapture", "BlemuCore"], path: "Tests/CaptureTests"),
        .testTarget(name: "ServiceTests", dependencies: ["BlemuService"], path: "Tests/ServiceTests"),
        .testTarget(name: "HostTests", dependencies: ["BlemuATT", "BlemuBenchRig", "BlemuCentral", "BlemuChannels", "BlemuControl", "BlemuCore", "BlemuCrypto", "BlemuDevice", "BlemuDevices", "BlemuEATT", "BlemuGATT", "BlemuGATTClient", "BlemuHCI", "BlemuHost", "BlemuL2CAP", "BlemuProfile", "BlemuSMP", "BlemuSecurity", "BlemuSimulator", "BlemuTestSupport", "HostTestSupport",
                                                   .product(name: "Logging", package: "swift-log")],
                    path: "Tests/HostTests"),
        // The peripheral's, the central's and the devices' benches (a device on a scripted
        // controller, several on one, a central, a hand-made channel peer), shared by the three
        // test targets below as a library of their own.
        .target(name: "HostTestSupport", dependencies: ["BlemuATT", "BlemuCentral", "BlemuChatProtocol", "BlemuCore", "BlemuCrypto", "BlemuDevice", "BlemuDevices", "BlemuGATT", "BlemuGATTClient", "BlemuHCI", "BlemuHost", "BlemuL2CAP", "BlemuSMP", "BlemuSecurity", "BlemuSimulator", "BlemuTestSupport",
                                                        .product(name: "Logging", package: "swift-log")],
                path: "Tests/HostSupport"),
        .testTarget(name: "CentralTests", dependencies: ["BlemuATT", "BlemuBenchRig", "BlemuCentral", "BlemuCore", "BlemuCrypto", "BlemuDevices", "BlemuGATT", "BlemuGATTClient", "BlemuHCI", "BlemuHost", "BlemuL2CAP", "BlemuSMP", "BlemuSecurity", "BlemuSimulator", "HostTestSupport",
                                                      .product(name: "Logging", package: "swift-log")],
                    path: "Tests/CentralTests"),
        // The programmable host on a scripted controller and on SimulatedAir, and its requests on the control socket.
        .testTarget(name: "ProgrammableHostTests", dependencies: ["BlemuProgrammableHost", "BlemuControl", "BlemuATT", "BlemuCentral", "BlemuConnection", "BlemuCore",
                                                               "BlemuGATTClient", "BlemuHCI", "BlemuHost", "BlemuL2CAP", "BlemuGATT", "BlemuChannels",
                                                               "BlemuSimulator", "BlemuTestSupport", "BlemuSMP", "BlemuSecurity", .product(name: "Logging", package: "swift-log")],
                    path: "Tests/ProgrammableHostTests"),
    ]
)

// Release builds leave out the run-time exclusivity checks of Swift's own targets: on the request
// path they were a third of the instructions (each access of a class's stored property checked
// against every access in progress, Docs/PERFORMANCE.md). Debug builds, which every test runs,
// keep them, so an overlapping access still traps there.
for target in package.targets where target.name.hasPrefix("Blemu") || target.name.hasPrefix("blemu") {
    target.swiftSettings = (target.swiftSettings ?? [])
        + [.unsafeFlags(["-enforce-exclusivity=unchecked"], .when(configuration: .release))]
}

// The fuzz builds of Fuzz/ (scripts/fuzz) with libFuzzer's coverage only on the modules named in
// BLEMU_FUZZ_COVERAGE_MODULES: -sanitize=fuzzer on the command line would instrument every module
// (the harness and the dependencies too), and libFuzzer scans every counter of the binary after
// each input and keeps features of all of them (Docs/TESTING.md, Fuzzing, Speed). The throughput
// build (BLEMU_FUZZ_THROUGHPUT=1) has no sanitizer on the command line, and swiftc takes
// -sanitize-coverage only beside a sanitizer, so the named modules get -sanitize=fuzzer itself
// (the same instrumentation: edges, indirect calls, comparisons, 8-bit counters, the PC table);
// beside -sanitize=address on the command line they get SanitizerCoverage alone. Unset: no change.
if let modules = Context.environment["BLEMU_FUZZ_COVERAGE_MODULES"] {
    let covered = Set(modules.split(separator: ",").map(String.init))
    let coverage = Context.environment["BLEMU_FUZZ_THROUGHPUT"] == "1"
        ? ["-sanitize=fuzzer"]
        : ["-sanitize-coverage=edge,indirect-calls,trace-cmp,inline-8bit-counters,pc-table"]
    for target in package.targets where covered.contains(target.name) {
        target.swiftSettings = (target.swiftSettings ?? []) + [.unsafeFlags(coverage)]
    }
}
