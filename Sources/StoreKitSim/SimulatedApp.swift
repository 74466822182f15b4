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
    private let makeApp: @Sendable () -> AnyObject

    public init(_ makeApp: @escaping @Sendable () -> AnyObject) {
        self.makeApp = makeApp
    }

    /// Launches the app on the device of `queue`.
    public var launch: @Sendable (_ queue: PaymentQueue) -> Void {
        let makeApp = makeApp
        return { queue in
            let host = DeviceHost.of(queue)
            let device = SimulatedDevice(queue: queue, storage: host.storage)
            host.current = device
            host.app = device.run { makeApp() }
        }
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
