// swift-tools-version:6.1
// An app's own StoreKit code, written as for iOS, explored from its own `swift test` on Linux.
import PackageDescription

let package = Package(
    name: "StoreKitApp",
    platforms: [.macOS(.v15)],
    dependencies: [.package(name: "StoreKitSim", path: "../..")],
    targets: [
        .target(name: "StoreKitApp", dependencies: [.product(name: "StoreKitSim", package: "StoreKitSim")]),
        // The team's own `sksim`, with the app registered (README.md).
        .executableTarget(name: "my-sksim", dependencies: [
            "StoreKitApp", .product(name: "SKSimCommands", package: "StoreKitSim"),
        ]),
        .testTarget(name: "StoreKitAppTests", dependencies: [
            "StoreKitApp",
            .product(name: "StoreKitSim", package: "StoreKitSim"),
            .product(name: "StoreKitExplore", package: "StoreKitSim"),
            .product(name: "StoreKitRoles", package: "StoreKitSim"),
            .product(name: "StoreKitModel", package: "StoreKitSim"),
        ]),
    ],
    swiftLanguageModes: [.v6]
)
