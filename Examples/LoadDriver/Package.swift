// swift-tools-version:6.1
// A team's own load driver: its users' behaviour and its app's StoreKit code, run by `sksim load --driver`.
import PackageDescription

let package = Package(
    name: "LoadDriver",
    platforms: [.macOS(.v15)],
    dependencies: [.package(name: "StoreKitSim", path: "../..")],
    targets: [
        .executableTarget(name: "shop-load-driver", dependencies: [.product(name: "StoreKitLoadKit", package: "StoreKitSim")]),
    ],
    swiftLanguageModes: [.v6]
)
