import Foundation
import StoreKitModel

/// What a run simulates: devices and accounts, the catalog, and how users, the store
/// and the content servers behave. Topology files name one; `simulate` builds one
/// from its options.
public struct Scenario: Sendable {
    public var seed: UInt64
    public var devices: Int
    public var catalog: Catalog
    /// Where the catalog came from, for the log's run record ("built-in sample" or a file name).
    public var catalogSource: String
    public var apps = AppBehavior()
    public var store = StoreBehavior()
    public var downloader = DownloaderBehavior()
    /// Upper bound on simulated time, so that a run always ends.
    public var maximumSimulatedSeconds: Double = 24 * 3600

    public init(seed: UInt64, devices: Int, catalog: Catalog = .sample, catalogSource: String = "built-in sample") {
        self.seed = seed
        self.devices = devices
        self.catalog = catalog
        self.catalogSource = catalogSource
    }

    public static let maximumDevices = 100_000

    public func validate() throws(ConfigurationError) {
        guard (1...Self.maximumDevices).contains(devices) else {
            throw ConfigurationError("devices is \(devices); use 1 to \(Self.maximumDevices)")
        }
        guard maximumSimulatedSeconds > 0 else { throw ConfigurationError("maximumSimulatedSeconds must be greater than 0") }
        try apps.validate()
        try store.validate()
        try downloader.validate()
    }

    /// Device names, stable and sortable: device-0001, device-0002, …
    public var deviceNames: [String] {
        let width = max(4, String(devices).count)
        return (1...devices).map { "device-" + String(repeating: "0", count: width - String($0).count) + String($0) }
    }

    /// The account a device is signed in to: consecutive devices share one.
    public func account(ofDeviceAt index: Int) -> String {
        let number = index / apps.devicesPerAccount + 1
        return "account-" + String(repeating: "0", count: max(0, 4 - String(number).count)) + String(number)
    }

    /// The apps of the devices at `indices` (all by default), ready to run their scripts.
    public func makeApps(indices: [Int]? = nil, storage: URL?) -> [DeviceApp] {
        let names = deviceNames
        return (indices ?? Array(names.indices)).map { index in
            DeviceApp(device: names[index], account: account(ofDeviceAt: index),
                      isAdditionalDevice: index % apps.devicesPerAccount != 0,
                      behavior: apps, catalog: catalog, seed: seed, storage: storage)
        }
    }

    /// What the log's first event records besides the seed: enough to tell runs apart.
    public var summary: String {
        "devices=\(devices) purchasesPerDevice=\(apps.purchasesPerDevice) devicesPerAccount=\(apps.devicesPerAccount) "
            + "observers=\(apps.observers.map(\.rawValue).joined(separator: ",")) catalog=\(catalogSource) products=\(catalog.products.count)"
    }
}
