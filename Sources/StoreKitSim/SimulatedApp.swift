import Foundation
import StoreKitModel
import StoreKitRoles

/// Your app's own StoreKit code on every simulated device: `makeApp` is called at every launch of
/// every device, as that device's app code (so `SKPaymentQueue.default()` and
/// `Bundle.main.appStoreReceiptURL` are the device's), and makes the app's objects, which attach
/// their observers themselves, as at an iOS app's launch. Quitting or a kill loses them.
///
/// Hand `launch` to the explorer (`Explorer(scenario:app:)`) or to any runtime's `AppHooks.appLaunch`.
public struct SimulatedApp: Sendable {
    /// Makes a launch's objects, given the device's persistent storage; and reads the app's belief from that storage.
    private let makeApp: @Sendable (_ storage: AnyObject?) -> AnyObject
    private let makeStorage: (@Sendable () -> AnyObject)?
    private let readBelief: (@Sendable (_ storage: AnyObject) -> AppBelief)?

    /// An app whose state the explorer does not read: the invariants about grants then see none.
    public init(_ makeApp: @escaping @Sendable () -> AnyObject) {
        self.makeApp = { _ in makeApp() }
        makeStorage = nil
        readBelief = nil
    }

    /// An app with persistent storage of its own (what it keeps on disk: its entitlements, its
    /// credits), made once per device and kept across launches and kills; `launch` makes a launch's
    /// objects over it, and `belief` reads from it what the app believes it credited, for the invariants.
    public init<Storage: AnyObject>(storage: @escaping @Sendable () -> Storage,
                                    belief: @escaping @Sendable (_ storage: Storage) -> AppBelief,
                                    launch: @escaping @Sendable (_ storage: Storage) -> AnyObject) {
        // Each closure is given only the storage its own `storage` made.
        makeApp = { stored in launch(stored as! Storage) }
        makeStorage = storage
        readBelief = { stored in belief(stored as! Storage) }
    }

    /// Launches the app on the device of `queue`.
    public var launch: @Sendable (_ queue: PaymentQueue) -> Void {
        let makeApp = makeApp, makeStorage = makeStorage, readBelief = readBelief
        return { queue in
            let host = DeviceHost.of(queue)
            if host.appStorage == nil { host.appStorage = makeStorage?() }
            let stored = host.appStorage
            let device = SimulatedDevice(queue: queue, storage: host.storage,
                                         readBelief: readBelief.flatMap { read in stored.map { stored in { read(stored) } } })
            host.current = device
            host.app = device.run { makeApp(stored) }
        }
    }

    /// The storage of the app on `queue`'s device (nil before its first launch, or without one).
    public static func storage(on queue: PaymentQueue) -> AnyObject? {
        (queue.appHost as? DeviceHost)?.appStorage
    }

    /// The app object of the launch now running on `queue`'s device (nil before the first launch).
    public static func app(on queue: PaymentQueue) -> AnyObject? {
        (queue.appHost as? DeviceHost)?.app
    }

    /// Runs `body` as the app code of the device of `queue` (its current launch): for a test that
    /// reads the app's state the way the app reads it, e.g. through `Bundle.main.appStoreReceiptURL`.
    public static func run<Result>(on queue: PaymentQueue, _ body: () throws -> Result) rethrows -> Result {
        let host = DeviceHost.of(queue)
        let device = host.current ?? SimulatedDevice(queue: queue, storage: host.storage)
        return try device.run(body)
    }
}

/// What a device keeps for the app's code, in its `PaymentQueue` (one per device and run).
final class DeviceHost {
    let storage: DeviceStorage
    var current: SimulatedDevice?
    var app: AnyObject?
    /// The app's own persistent storage, made at its first launch.
    var appStorage: AnyObject?

    private init(device: String) {
        storage = DeviceStorage(device: device, root: FileManager.default.temporaryDirectory
            .appendingPathComponent("StoreKitSim-\(UUID().uuidString)", isDirectory: true))
    }

    static func of(_ queue: PaymentQueue) -> DeviceHost {
        if let host = queue.appHost as? DeviceHost { return host }
        let host = DeviceHost(device: queue.device)
        queue.appHost = host
        return host
    }
}
