// swift-tools-version:6.1
import PackageDescription

let package = Package(
    name: "StoreKitSim",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "sksim", targets: ["sksim"]),
        .library(name: "StoreKitModel", targets: ["StoreKitModel"]),
        .library(name: "StoreKitRoles", targets: ["StoreKitRoles"]),
        .library(name: "StoreKitRuntime", targets: ["StoreKitRuntime"]),
        .library(name: "StoreKitSimulation", targets: ["StoreKitSimulation"]),
        .library(name: "StoreKitReplay", targets: ["StoreKitReplay"]),
        .library(name: "StoreKitTestKit", targets: ["StoreKitTestKit"]),
        .library(name: "StoreKitExplore", targets: ["StoreKitExplore"]),
        .library(name: "EventLog", targets: ["EventLog"]),
        .library(name: "ZeroMQ", targets: ["ZeroMQ"]),
        // For the fuzz targets in Fuzz/ (a separate package): the bus's and the live roles' decoders.
        .library(name: "Bus", targets: ["Bus"]),
        .library(name: "StoreKitLive", targets: ["StoreKitLive"]),
        .library(name: "StoreKitLoad", targets: ["StoreKitLoad"]),
        .library(name: "StoreKitSim", targets: ["StoreKitSim"]),
        .library(name: "AppStoreServer", targets: ["AppStoreServer"]),
        .library(name: "AppStoreSigning", targets: ["AppStoreSigning"]),
        // A team's own `sksim` that registers its app (`SKSim.main(apps:)`, Examples/StoreKitApp).
        .library(name: "SKSimCommands", targets: ["SKSimCommands"]),
        // A team's own load driver: its users' behaviour and its app, run by `sksim load --driver` (Examples/LoadDriver).
        .library(name: "StoreKitLoadKit", targets: ["StoreKitLoadKit"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.6.0"),
        .package(url: "https://github.com/jpsim/Yams", from: "5.0.0"),
        .package(url: "https://github.com/HdrHistogram/hdrhistogram-swift", from: "0.2.0"),
        .package(url: "https://github.com/apple/swift-crypto", from: "4.5.2"),
        .package(url: "https://github.com/apple/swift-certificates", from: "1.21.1"),
        .package(url: "https://github.com/apple/swift-asn1", from: "1.7.4"),
        .package(url: "https://github.com/vapor/jwt-kit", from: "5.8.0"),
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.1"),
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.37.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.4.1"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.0"),
    ],
    targets: [
        // libzmq, the system library (Debian: libzmq3-dev).
        .systemLibrary(name: "CZeroMQ", providers: [.apt(["libzmq3-dev"]), .brew(["zeromq"])]),
        // A small, safe Swift wrapper over libzmq; no domain knowledge.
        .target(name: "ZeroMQ", dependencies: ["CZeroMQ"]),
        // CRC-32C by the CPU's instruction where it has one (x86-64 SSE4.2), chosen at run time.
        .target(name: "CChecksum"),
        // The durable append-only log: segments, CRC32C, sparse index, durability policies. Knows no StoreKit.
        .target(name: "EventLog", dependencies: ["CChecksum"]),
        // Domain: commands, events, states, rules, projections, catalog. Pure.
        .target(name: "StoreKitModel"),
        // The four roles and the StoreKit-shaped API; transport and clock are injected.
        .target(name: "StoreKitRoles", dependencies: ["StoreKitModel"]),
        // What every runtime shares: the one queue engine, log storage (disk or memory), the
        // scheduler, log projection, role factory and run report.
        .target(name: "StoreKitRuntime", dependencies: ["StoreKitRoles", "StoreKitModel", "EventLog"]),
        // The deterministic runtime: virtual clock, network model, recorded choices.
        .target(name: "StoreKitSimulation", dependencies: ["BusProtocol", "StoreKitRuntime", "StoreKitRoles", "StoreKitModel"]),
        // Replay of a recorded run through the one engine, compared with the recording event by event.
        .target(name: "StoreKitReplay", dependencies: ["StoreKitRuntime", "StoreKitRoles", "StoreKitModel", "EventLog"]),
        // Test helpers that this project's tests and users' own tests share: the queue engine over
        // an in-memory log, a device wired straight to it, an observer that records every callback.
        .target(name: "StoreKitTestKit", dependencies: ["StoreKitRuntime", "StoreKitRoles", "StoreKitModel"]),
        // This project's own test plumbing, not a product: programs run to their end, headless
        // Chromium, the live replay topology, a role fed events by hand.
        .target(name: "StoreKitTestSupport", dependencies: ["StoreKitRoles", "StoreKitModel"]),
        // Observer-ordering exploration: strategies over recorded choices, invariants over the log,
        // shrinking, traces (Mermaid, HTML), reproduce files. Users' `swift test` depends on it.
        .target(name: "StoreKitExplore", dependencies: ["StoreKitSimulation", "StoreKitRuntime", "StoreKitRoles", "StoreKitModel"]),
        // The bus over ZeroMQ: wire format, publishing after durability, gap-free subscriptions, command retries.
        // The bus's protocol logic as state machines with no socket and no clock: live and simulated runtimes run it.
        .target(name: "BusProtocol", dependencies: ["StoreKitModel"]),
        .target(name: "Bus", dependencies: ["BusProtocol", "ZeroMQ", "StoreKitModel", "EventLog"]),
        // Roles as OS processes: topology files, the queue and role processes, the supervisor of `sksim run`.
        .target(name: "StoreKitLive", dependencies: [
            "Bus", "ZeroMQ", "StoreKitRuntime", "StoreKitRoles", "StoreKitModel", "EventLog",
            .product(name: "Logging", package: "swift-log"), .product(name: "Yams", package: "Yams"),
        ]),
        // zlib, the system library, for HdrHistogram's compressed log format.
        .systemLibrary(name: "CZlib", pkgConfig: "zlib", providers: [.apt(["zlib1g-dev"]), .brew(["zlib"])]),
        // Load testing: driver processes, the coordinator, stage histograms merged exactly, thresholds, reports.
        .target(name: "StoreKitLoad", dependencies: [
            "StoreKitLive", "Bus", "ZeroMQ", "StoreKitRuntime", "StoreKitRoles", "StoreKitModel", "CZlib",
            .product(name: "Histogram", package: "hdrhistogram-swift"), .product(name: "Logging", package: "swift-log"),
            .product(name: "Yams", package: "Yams"),
            .product(name: "AsyncHTTPClient", package: "async-http-client"),
            .product(name: "Prometheus", package: "swift-prometheus"),
            .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOPosix", package: "swift-nio"),
            .product(name: "NIOHTTP1", package: "swift-nio"),
        ]),
        // The App Store's signing, with no HTTP: the chain, signed objects (ES256 JWS), app receipts (CMS). The
        // server and StoreKitSim's devices (their receipts) share it.
        .target(name: "AppStoreSigning", dependencies: [
            .product(name: "Crypto", package: "swift-crypto"), .product(name: "X509", package: "swift-certificates"),
            .product(name: "SwiftASN1", package: "swift-asn1"), .product(name: "JWTKit", package: "jwt-kit"),
        ]),
        // Apple's StoreKit 1 API over the simulator's queue: users' own app code, unchanged (docs/explore.md).
        .target(name: "StoreKitSim", dependencies: ["StoreKitRoles", "StoreKitModel", "AppStoreSigning"]),
        // The App Store's server side, projected from the log: the signing chain, signed transactions and
        // renewal info (JWS), app receipts (CMS), the App Store Server API and Server Notifications V2.
        .target(name: "AppStoreServer", dependencies: [
            "AppStoreSigning", "StoreKitRuntime", "StoreKitRoles", "StoreKitModel", "EventLog",
            .product(name: "Crypto", package: "swift-crypto"), .product(name: "X509", package: "swift-certificates"),
            .product(name: "SwiftASN1", package: "swift-asn1"), .product(name: "JWTKit", package: "jwt-kit"),
            .product(name: "Hummingbird", package: "hummingbird"), .product(name: "AsyncHTTPClient", package: "async-http-client"),
            .product(name: "NIOCore", package: "swift-nio"), .product(name: "Logging", package: "swift-log"),
        ]),
        // The command line as a library, so tests can call it.
        .target(name: "SKSimCommands", dependencies: [
            "StoreKitLive", "StoreKitLoad", "AppStoreServer", "Bus", "ZeroMQ", "StoreKitSimulation", "StoreKitReplay", "StoreKitExplore", "StoreKitRuntime", "StoreKitRoles", "StoreKitModel", "EventLog",
            "StoreKitSim", "AppStoreSigning",
            .product(name: "ArgumentParser", package: "swift-argument-parser"),
            .product(name: "Logging", package: "swift-log"),
        ]),
        // `sksim bench`: the benchmarks and their harnesses, each beside a baseline. No product module depends on it.
        .target(name: "Benchmarks", dependencies: [
            "SKSimCommands", "StoreKitLive", "StoreKitLoad", "Bus", "ZeroMQ", "StoreKitSimulation", "StoreKitReplay", "StoreKitExplore", "StoreKitRuntime", "StoreKitRoles", "StoreKitModel", "EventLog", "AppStoreSigning",
            .product(name: "ArgumentParser", package: "swift-argument-parser"),
            .product(name: "Logging", package: "swift-log"),
        ]),
        .executableTarget(name: "sksim", dependencies: ["SKSimCommands", "Benchmarks", .product(name: "Logging", package: "swift-log")]),
        // A team's load driver: behaviour and app over `sksim driver` (docs/load-testing.md, "Your own driver").
        .target(name: "StoreKitLoadKit", dependencies: ["StoreKitLoad", "StoreKitSim", "SKSimCommands"]),
        // The example driver, built here too so that LoadTests runs `sksim load --driver` with it.
        .executableTarget(name: "shop-load-driver", dependencies: ["StoreKitLoadKit"], path: "Examples/LoadDriver/Sources/shop-load-driver"),
        .testTarget(name: "ZeroMQTests", dependencies: ["ZeroMQ"]),
        .testTarget(name: "EventLogTests", dependencies: ["EventLog"]),
        .testTarget(name: "BenchmarksTests", dependencies: ["Benchmarks", "EventLog", "AppStoreSigning"]),
        .testTarget(name: "StoreKitModelTests", dependencies: ["StoreKitModel", "StoreKitTestKit", "StoreKitRuntime", "StoreKitRoles"],
                    exclude: ["Golden", "Fixtures"]),
        .testTarget(name: "BusTests", dependencies: ["Bus", "BusProtocol", "ZeroMQ", "StoreKitModel", "EventLog"]),
        .testTarget(name: "StoreKitLiveTests", dependencies: ["StoreKitTestSupport", "StoreKitLive", "StoreKitSimulation", "StoreKitRuntime", "StoreKitModel", "EventLog", "Bus",
                                                             .product(name: "Logging", package: "swift-log")]),
        .testTarget(name: "ExploreTests", dependencies: ["StoreKitTestKit", "StoreKitTestSupport", "StoreKitExplore", "StoreKitSimulation", "StoreKitRuntime", "StoreKitRoles", "StoreKitModel", "SKSimCommands"]),
        .testTarget(name: "LoadTests", dependencies: ["StoreKitTestKit", "StoreKitTestSupport", "StoreKitLoad", "StoreKitLive", "StoreKitModel", "SKSimCommands", "ZeroMQ",
                                                     .product(name: "Histogram", package: "hdrhistogram-swift"),
                                                     .product(name: "Logging", package: "swift-log")]),
        .testTarget(name: "StoreKitRolesTests", dependencies: ["StoreKitRoles", "StoreKitModel", "StoreKitSimulation", "StoreKitRuntime", "StoreKitTestKit", "StoreKitTestSupport", "EventLog", "SKSimCommands", "Benchmarks"]),
        .testTarget(name: "AppStoreServerTests", dependencies: ["AppStoreServer", "StoreKitTestKit", "StoreKitTestSupport", "StoreKitLive", "StoreKitRuntime", "StoreKitModel", "SKSimCommands",
                                                            .product(name: "X509", package: "swift-certificates"),
                                                            .product(name: "JWTKit", package: "jwt-kit")]),
        .testTarget(name: "ReplayTests", dependencies: ["StoreKitTestSupport", "StoreKitReplay", "StoreKitSimulation", "StoreKitExplore", "StoreKitRuntime", "StoreKitRoles", "StoreKitModel",
                                                      "EventLog", "SKSimCommands", "StoreKitLive", .product(name: "Logging", package: "swift-log")],
                    exclude: ["Fixtures"]),
        .testTarget(name: "StoreKitSimTests", dependencies: ["StoreKitSim", "StoreKitExplore", "StoreKitTestKit", "StoreKitTestSupport", "StoreKitRoles", "StoreKitModel",
                                                           "SKSimCommands", "StoreKitReplay", "StoreKitRuntime", "StoreKitSimulation", "EventLog"]),
    ],
    swiftLanguageModes: [.v6]
)
