import Foundation
import StoreKitModel

/// What the simulated users of the apps do.
public struct AppBehavior: Sendable, Hashable, Codable {
    public var purchasesPerDevice = 5
    /// Time between one user action and the next.
    public var thinkTime: LatencyDistribution = .exponential(minimumMilliseconds: 100, meanMilliseconds: 800)
    /// Chance, per purchase step, that the user also restores purchases (R-R1: a user action).
    public var restoreProbability: Double = 0.05
    /// Chance, per purchase step, that the app is quit and launched again (R-Q4).
    public var relaunchProbability: Double = 0.05
    /// Observers attached on every launch, in this order (R-Q5).
    public var observers: [ObserverBehavior] = [.downloadThenFinish, .audit]
    public var ordering: ObserverOrdering = .seededShuffle
    /// Devices signed in to the same account; every device after the first restores
    /// once its own purchases are done (R-Q9: restoring on a new device).
    public var devicesPerAccount = 2

    public init() {}

    public func validate() throws(ConfigurationError) {
        guard purchasesPerDevice >= 0 else { throw ConfigurationError("purchasesPerDevice must be 0 or more") }
        guard devicesPerAccount >= 1 else { throw ConfigurationError("devicesPerAccount must be 1 or more") }
        guard !observers.isEmpty else { throw ConfigurationError("at least one observer per device is needed to complete purchases") }
        for (name, value) in [("restoreProbability", restoreProbability), ("relaunchProbability", relaunchProbability)]
        where !(0...1).contains(value) {
            throw ConfigurationError("apps.\(name) is \(value); a probability must be between 0 and 1")
        }
    }
}

/// One simulated app install: its queue, its observers, and the user's script.
public final class DeviceApp {
    public let device: String
    public let account: String
    public let queue: PaymentQueue
    public let observers: [BuiltInObserver]
    private let behavior: AppBehavior
    private let catalog: Catalog
    private let isAdditionalDevice: Bool
    private let choices: ChoiceSource
    private var purchasesLeft: Int
    private var stage: Stage = .register
    private var restoredAsNewDevice = false

    private enum Stage { case register, launch, shopping, relaunching, done }

    public init(device: String, account: String, isAdditionalDevice: Bool, behavior: AppBehavior, catalog: Catalog,
                choices: ChoiceSource, storage: ContentStorage?) {
        self.device = device
        self.account = account
        self.behavior = behavior
        self.catalog = catalog
        self.isAdditionalDevice = isAdditionalDevice
        self.choices = choices
        self.purchasesLeft = behavior.purchasesPerDevice
        self.queue = PaymentQueue(device: device, catalog: catalog, ordering: behavior.ordering, choices: choices)
        self.observers = behavior.observers.enumerated().map { index, observerBehavior in
            BuiltInObserver(name: "\(observerBehavior.rawValue)-\(index + 1)", behavior: observerBehavior,
                            storage: storage, persistentFolder: "apps/\(device)")
        }
    }

    public var isDone: Bool { stage == .done }

    /// True when the user's script is done and the queue holds nothing unfinished for
    /// this device: nothing more will happen unless someone acts.
    public var isSettled: Bool {
        guard isDone, let state = queue.state else { return isDone && queue.state == nil }
        return state.pending.isEmpty && state.restoresInProgress.isEmpty
    }

    /// Picks the script up after the app's process was restarted, from what the queue
    /// recorded (`catchUp` first). A device still marked running was killed without
    /// quitting: it is terminated and launched again, so every unfinished transaction
    /// is delivered again to the new observers (R-Q4).
    public func resumeAfterRestart() {
        guard let state = queue.state else { return }
        purchasesLeft = max(0, behavior.purchasesPerDevice - state.paymentsAdded)
        restoredAsNewDevice = state.nextRestoreNumber > 1
        if state.isRunning { queue.terminateApp() }
        stage = .relaunching
    }

    /// The user's next action; returns the delay until the one after, or nil when done.
    public func step() -> Int64? {
        switch stage {
        case .register:
            queue.enqueue(.registerDevice(device: device, account: account))
            stage = .launch
            return 0
        case .launch, .relaunching:
            queue.enqueue(.launchApp(device: device))
            for observer in observers { queue.add(observer) }
            stage = .shopping
            return behavior.thinkTime.sampleNanoseconds(choices)
        case .shopping:
            if purchasesLeft > 0 {
                purchasesLeft -= 1
                buy()
                if choices.chance(.userRestore, behavior.restoreProbability) {
                    queue.restoreCompletedTransactions(applicationUsername: account)
                }
                if choices.chance(.userRelaunch, behavior.relaunchProbability) {
                    relaunch()
                    return behavior.thinkTime.sampleNanoseconds(choices)
                }
                return behavior.thinkTime.sampleNanoseconds(choices)
            }
            if isAdditionalDevice && !restoredAsNewDevice {
                restoredAsNewDevice = true
                queue.restoreCompletedTransactions(applicationUsername: account)
                return behavior.thinkTime.sampleNanoseconds(choices)
            }
            stage = .done
            return nil
        case .done:
            return nil
        }
    }

    private func buy() {
        let products = catalog.products
        guard !products.isEmpty else { return }
        let product = products[choices.index(.product, count: products.count)]
        let quantity = product.kind == .consumable ? 1 + choices.index(.quantity, count: 3) : 1
        do {
            try queue.add(Payment(productIdentifier: product.identifier, quantity: quantity, applicationUsername: account))
        } catch {
            preconditionFailure("a catalog product with a positive quantity was refused locally: \(error)")
        }
    }

    /// The app quits and comes back: observers detach with it and attach again on
    /// launch, when every unfinished transaction is delivered again (R-Q4).
    private func relaunch() {
        queue.terminateApp()
        stage = .relaunching
    }
}

/// The observer role: hosts the apps of many devices, each with its queue, observers
/// and user script.
public final class AppRole: Role {
    public let name: String
    public private(set) var apps: [String: DeviceApp] = [:]
    public let deviceNames: [String]

    public init(name: String = "apps", devices: [DeviceApp]) {
        self.name = name
        self.deviceNames = devices.map(\.device)
        for app in devices { apps[app.device] = app }
    }

    /// Applies history silently (a restarted process catching up), without callbacks.
    public func catchUp(_ recorded: RecordedEvent) {
        guard let device = recorded.event.device, let app = apps[device] else { return }
        app.queue.catchUp(recorded)
    }

    /// Starts (or, after catching up, resumes) every device's script: the commands and
    /// timers that set them going.
    public func resume(now: Int64) -> [Effect] {
        var effects: [Effect] = []
        for device in deviceNames {
            guard let app = apps[device] else { continue }
            app.resumeAfterRestart()
            effects += app.queue.drainOutbox().map { .send($0) }
            effects.append(.timer(afterNanoseconds: 0, .deviceStep(device: device)))
        }
        return effects
    }

    /// Every device's script is done and nothing is left unfinished.
    public var isSettled: Bool { apps.values.allSatisfy(\.isSettled) }

    public func receive(_ recorded: RecordedEvent, now: Int64) -> [Effect] {
        guard let device = recorded.event.device, let app = apps[device] else { return [] }
        app.queue.deliver(recorded)
        return app.queue.drainOutbox().map { .send($0) }
    }

    public func timerFired(_ token: TimerToken, now: Int64) -> [Effect] {
        guard case .deviceStep(let device) = token, let app = apps[device] else { return [] }
        let delay = app.step()
        var effects: [Effect] = app.queue.drainOutbox().map { .send($0) }
        if let delay { effects.append(.timer(afterNanoseconds: delay, .deviceStep(device: device))) }
        return effects
    }
}
