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
        // Domain: commands, events, states, rules, projections. Pure; no I/O but catalog files.
        .target(name: "StoreKitModel"),
        // The four roles and the StoreKit-shaped API; transport and clock are injected.
        .target(name: "StoreKitRoles", dependencies: ["StoreKitModel"]),
        .testTarget(name: "StoreKitModelTests", dependencies: ["StoreKitModel"]),
        .testTarget(name: "StoreKitRolesTests", dependencies: ["StoreKitRoles", "StoreKitModel"]),
    ],
    swiftLanguageModes: [.v6]
)
