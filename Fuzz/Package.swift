// swift-tools-version:6.1
// Coverage-guided fuzz targets (libFuzzer), one per decoder of outside input. A package of its own so
// the main build and CI never see `-sanitize=fuzzer`; build and run them with `scripts/fuzz`.
import PackageDescription

/// One executable per target; each calls the project's real decoder (see docs/fuzzing.md).
let targetDependencies: [String: [Target.Dependency]] = [
    "FuzzCommand": [.product(name: "StoreKitModel", package: "StoreKitSim")],
    "FuzzEvent": [.product(name: "StoreKitModel", package: "StoreKitSim"), .product(name: "StoreKitRuntime", package: "StoreKitSim"),
                  .product(name: "Bus", package: "StoreKitSim")],
    "FuzzAcknowledgement": [.product(name: "Bus", package: "StoreKitSim")],
    "FuzzQueueRequests": [.product(name: "Bus", package: "StoreKitSim"), .product(name: "EventLog", package: "StoreKitSim"),
                          .product(name: "ZeroMQ", package: "StoreKitSim"), .product(name: "StoreKitModel", package: "StoreKitSim")],
    "FuzzSubscriber": [.product(name: "Bus", package: "StoreKitSim"), .product(name: "ZeroMQ", package: "StoreKitSim")],
    "FuzzSegment": [.product(name: "EventLog", package: "StoreKitSim"), .product(name: "StoreKitModel", package: "StoreKitSim"),
                    .product(name: "StoreKitRuntime", package: "StoreKitSim")],
    "FuzzCatalog": [.product(name: "StoreKitModel", package: "StoreKitSim")],
    "FuzzStoreKit": [.product(name: "StoreKitModel", package: "StoreKitSim")],
    "FuzzTopology": [.product(name: "StoreKitLive", package: "StoreKitSim"), .product(name: "StoreKitLoad", package: "StoreKitSim")],
    "FuzzLoadReport": [.product(name: "StoreKitLoad", package: "StoreKitSim")],
    "FuzzReproduce": [.product(name: "StoreKitExplore", package: "StoreKitSim")],
]

let package = Package(
    name: "StoreKitSimFuzz",
    platforms: [.macOS(.v15)],
    dependencies: [.package(name: "StoreKitSim", path: "..")],
    targets: [.target(name: "CFuzzerDriver"), .target(name: "FuzzSupport", dependencies: ["CFuzzerDriver"])] + targetDependencies.keys.sorted().map { name in
        .executableTarget(name: name, dependencies: ["FuzzSupport"] + targetDependencies[name]!)
    },
    swiftLanguageModes: [.v6]
)
