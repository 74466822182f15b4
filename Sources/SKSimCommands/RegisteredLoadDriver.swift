import Foundation
import StoreKitLoad
import StoreKitSim

/// A team's load driver (`StoreKitLoadKit`): the behaviour its users follow and, optionally, the app
/// whose StoreKit code runs on every device. Written once, before the command line is parsed;
/// `sksim driver` (this executable's `driver` command, which `sksim load --driver PATH` starts) reads it.
public enum RegisteredLoadDriver {
    private final class Slot: @unchecked Sendable {
        let lock = NSLock()
        var behavior: (any LoadUserBehavior)?
        var app: SimulatedApp?
    }

    private static let slot = Slot()

    public static func register(behavior: any LoadUserBehavior, app: SimulatedApp?) {
        slot.lock.withLock {
            slot.behavior = behavior
            slot.app = app
        }
    }

    static var behavior: (any LoadUserBehavior)? { slot.lock.withLock { slot.behavior } }
    static var app: SimulatedApp? { slot.lock.withLock { slot.app } }
}
