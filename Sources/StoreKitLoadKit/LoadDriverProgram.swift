// A team's own load driver: its users' behaviour as code and its app's StoreKit code, run by
// `sksim load --driver PATH` on every device of the load (docs/load-testing.md, "Your own driver").
@_exported import StoreKitLoad
@_exported import StoreKitSim
import SKSimCommands

/// The entry point of a team's driver executable:
///
/// ```swift
/// @main struct ShopLoadDriver {
///     static func main() async { await LoadDriverProgram.main(behavior: ShopUsers(), app: ShopObserver.simulatedApp()) }
/// }
/// ```
///
/// The executable is a whole `sksim` (`SKSim.main(apps:)`) whose `driver` command plays the users with
/// `behavior` and runs `app` (Apple's StoreKit names) on every device; `sksim load --driver PATH` starts
/// it as each local driver, and on another host it is started by hand as `sksim driver` would be.
public enum LoadDriverProgram {
    public static func main(behavior: some LoadUserBehavior, app: SimulatedApp? = nil, apps: [String: SimulatedApp] = [:]) async -> Never {
        RegisteredLoadDriver.register(behavior: behavior, app: app)
        await SKSim.main(apps: apps)
    }
}
