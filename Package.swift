// swift-tools-version:6.1
import PackageDescription

let package = Package(
    name: "StoreKitSim",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "StoreKitModel", targets: ["StoreKitModel"]),
        .library(name: "StoreKitRoles", targets: ["StoreKitRoles"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
    ],
    targets: [
        // libzmq, the system library (Debian: libzmq3-dev).
        .systemLibrary(name: "CZeroMQ", pkgConfig: "libzmq", providers: [.apt(["libzmq3-dev"]), .brew(["zeromq"])]),
        // A small, safe Swift wrapper over libzmq; no domain knowledge.
        .target(name: "ZeroMQ", dependencies: ["CZeroMQ"]),
        // Domain: commands, events, states, rules, projections. Pure; no I/O but catalog files.
        .target(name: "StoreKitModel"),
        // The four roles and the StoreKit-shaped API; transport and clock are injected.
        .target(name: "StoreKitRoles", dependencies: ["StoreKitModel"]),
        .testTarget(name: "ZeroMQTests", dependencies: ["ZeroMQ"]),
        .testTarget(name: "StoreKitModelTests", dependencies: ["StoreKitModel"]),
        .testTarget(name: "StoreKitRolesTests", dependencies: ["StoreKitRoles", "StoreKitModel"]),
    ],
    swiftLanguageModes: [.v6]
)
