import StoreKitModel
import StoreKitRoles

/// The apps of a replayed run: each device's `PaymentQueue` with the observers under test,
/// hearing every event of its device as it is appended. The users' actions come from the
/// recording, so only what the observer code sends is kept (`CommandSource.observer`); the
/// app-side effects of the users' actions are applied here (a quit drops the observers, a
/// launch attaches them again).
final class ReplayApps {
    let behaviors: [ObserverBehavior]
    private let ordering: ObserverOrdering
    private let catalog: Catalog
    private let choices: ChoiceSource
    private var devices: [String: Device] = [:]

    final class Device {
        let queue: PaymentQueue
        let observers: [BuiltInObserver]

        init(queue: PaymentQueue, observers: [BuiltInObserver]) {
            self.queue = queue
            self.observers = observers
        }
    }

    init(behaviors: [ObserverBehavior], ordering: ObserverOrdering, catalog: Catalog, choices: ChoiceSource) {
        self.behaviors = behaviors
        self.ordering = ordering
        self.catalog = catalog
        self.choices = choices
    }

    private func device(_ name: String) -> Device {
        if let existing = devices[name] { return existing }
        // Named as the simulator's apps name them, so unchanged observers attach under the recorded names.
        let observers = behaviors.enumerated().map { index, behavior in
            BuiltInObserver(name: "\(behavior.rawValue)-\(index + 1)", behavior: behavior, storage: nil)
        }
        let created = Device(queue: PaymentQueue(device: name, catalog: catalog, ordering: ordering, choices: choices), observers: observers)
        devices[name] = created
        return created
    }

    /// The app-side half of a user's action that happens before the queue hears it: quitting
    /// drops the observers at once.
    func beforeUserAction(_ body: CommandBody) {
        if case .terminateApp(let name) = body { device(name).queue.terminateApp() }
    }

    /// After a launch reached the queue, the app attaches its observers (as the simulator's
    /// apps do on every launch).
    func afterUserAction(_ body: CommandBody) {
        guard case .launchApp(let name) = body else { return }
        let app = device(name)
        for observer in app.observers { app.queue.add(observer) }
    }

    /// Delivers one appended event to its device's app, calling the observers as StoreKit would.
    func deliver(_ recorded: RecordedEvent) {
        guard let name = recorded.event.device, !name.isEmpty else { return }
        device(name).queue.deliver(recorded)
    }

    /// What the observer code of `device` sent since the last call, in order.
    func drainObserverCommands(_ name: String) -> [CommandBody] {
        guard let app = devices[name] else { return [] }
        return app.queue.drainOutbox().filter { CommandSource.of($0) == .observer }
    }

    /// The devices whose outbox may hold commands.
    var deviceNames: Dictionary<String, Device>.Keys { devices.keys }
}
