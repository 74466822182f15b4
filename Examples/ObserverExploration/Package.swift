// swift-tools-version:6.1
// An app's own observer, explored from its own `swift test` with StoreKitSim's explorer.
import PackageDescription

let package = Package(
    name: "ObserverExploration",
    platforms: [.macOS(.v15)],
    dependencies: [.package(name: "StoreKitSim", path: "../..")],
    targets: [
        .target(name: "ShopObserver", dependencies: [.product(name: "StoreKitSim", package: "StoreKitSim")]),
        .testTarget(name: "ShopObserverTests", dependencies: [
            "ShopObserver",
            .product(name: "StoreKitSim", package: "StoreKitSim"),
            .product(name: "StoreKitExplore", package: "StoreKitSim"),
            .product(name: "StoreKitRoles", package: "StoreKitSim"),
            .product(name: "StoreKitModel", package: "StoreKitSim"),
        ]),
    ],
    swiftLanguageModes: [.v6]
)
