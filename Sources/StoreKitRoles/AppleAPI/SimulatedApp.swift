import Foundation
import StoreKitModel

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
    /// The app's purchase screen: the user taps "buy" on a product, in the launch's objects.
    private let buy: (@Sendable (_ app: AnyObject, _ product: SKProduct, _ quantity: Int) -> Void)?

    /// An app whose state the explorer does not read: the invariants about grants then see none.
    public init(_ makeApp: @escaping @Sendable () -> AnyObject) {
        self.makeApp = { _ in makeApp() }
        makeStorage = nil
        readBelief = nil
        buy = nil
    }

    /// An app with persistent storage of its own (what it keeps on disk: its entitlements, its
    /// credits), made once per device and kept across launches and kills; `launch` makes a launch's
    /// objects over it, and `belief` reads from it what the app believes it credited, for the invariants.
    ///
    /// With `buy`, the simulated user buys through the app's own code: at each of the user's purchases
    /// it is called with the launch's objects (what `launch` made), the product and the quantity, as
    /// the app's purchase screen would be, and adds the payment itself (`SKPaymentQueue.add(_:)`).
    /// Without it, the user's payments are added for the app.
    public init<Storage: AnyObject, App: AnyObject>(storage: @escaping @Sendable () -> Storage,
                                                    belief: @escaping @Sendable (_ storage: Storage) -> AppBelief,
                                                    launch: @escaping @Sendable (_ storage: Storage) -> App,
                                                    buy: (@Sendable (_ app: App, _ product: SKProduct, _ quantity: Int) -> Void)? = nil) {
        // Each closure is given only the storage its own `storage` made, and the app its own `launch` made.
        makeApp = { stored in launch(stored as! Storage) }
        makeStorage = storage
        readBelief = { stored in belief(stored as! Storage) }
        if let buy {
            self.buy = { app, product, quantity in buy(app as! App, product, quantity) }
        } else {
            self.buy = nil
        }
    }

    /// The user's purchase, made by the app's own code (`buy`): hand it to the explorer
    /// (`Explorer(scenario:appLaunch:appPurchase:)`) or to any runtime's `AppHooks.appPurchase`.
    /// nil without `buy`.
    public var purchase: (@Sendable (_ queue: PaymentQueue, _ payment: Payment) -> Bool)? {
        guard let buy else { return nil }
        return { queue, payment in
            guard let host = queue.appHost as? DeviceHost, let device = host.current, let app = host.app,
                  let product = queue.catalog.product(payment.productIdentifier) else { return false }
            let locale = Locale(identifier: queue.catalog.testSettings.locale ?? "en_US")
            device.run { buy(app, SKProduct(product, locale: locale), payment.quantity) }
            return true
        }
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

    /// The device of the launch now running on `queue`'s device, made for that launch if it has none
    /// yet (the built-in app attaches its observers through it), over the app storage that `storage`
    /// makes at the device's first launch, and that storage. `generation` counts the storage's changes
    /// to its belief, so that the belief is read again only when it moved.
    package static func launchDevice<Storage: AnyObject>(on queue: PaymentQueue, storage: () -> Storage,
                                                         belief: @escaping (_ storage: Storage) -> AppBelief,
                                                         generation: @escaping (_ storage: Storage) -> UInt64,
                                                         owns: @escaping (_ storage: Storage, _ transaction: PaymentTransaction) -> Bool)
    -> (device: SimulatedDevice, storage: Storage) {
        let host = DeviceHost.of(queue)
        if let current = host.current, current.launch == queue.launchNumber { return (current, host.appStorage as? Storage ?? storage()) }
        let stored: Storage
        if let existing = host.appStorage as? Storage {
            stored = existing
        } else {
            stored = storage()
            host.appStorage = stored
            // What the storage already holds (a restarted process's disk) is not new.
            host.storage.lastBelief = belief(stored)
            host.storage.lastBeliefGeneration = generation(stored)
        }
        let device = SimulatedDevice(queue: queue, storage: host.storage, readBelief: { belief(stored) },
                                     beliefGeneration: { generation(stored) }, owns: { owns(stored, $0) })
        host.current = device
        return (device, stored)
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
