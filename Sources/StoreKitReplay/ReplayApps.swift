import StoreKitModel
import StoreKitRoles

/// The apps of a what-if replay: each device's `PaymentQueue` with the observers under test,
/// hearing every event of its device as it is appended. The users' actions come from the
/// recording, so only what the observer code sends is kept (`CommandSource.observer`); the
/// app-side effects of the users' actions are applied here (a quit drops the observers, a
/// launch attaches them again).
final class ReplayApps {
    let behaviors: [ObserverBehavior]
    /// The user's own app code, launched on every launch instead of the built-in observers (what-if replays).
    private let appLaunch: (@Sendable (PaymentQueue) -> Void)?
    /// How long the app's asynchronous work takes, and whether work that can fail fails.
    private let workLatency: LatencyDistribution
    private let workFailureProbability: Double
    private let ordering: ObserverOrdering
    private let catalog: Catalog
    private let choices: ChoiceSource
    private var devices: [String: Device] = [:]
    /// The app found last: a command's events, and the reactions drained after them, are its.
    private var last: (name: String, app: Device)?

    final class Device {
        let queue: PaymentQueue
        /// Late observers (`attachesLate`) of the current launch not attached yet: the simulator's
        /// app attaches them a drawn number of user steps after launch, which the log shows only
        /// by their recorded `attachObserver`; the replay attaches them when that command is due.
        var lateObservers: [BuiltInObserver] = []
        /// User steps until late observers attach (what-if replays, drawn as the simulator's app draws it).
        var lateSteps = 0
        /// The device's observer stream (what-if replays), which the simulator's app draws the attach time from.
        let observerChoices: ChoiceSource

        init(queue: PaymentQueue, observerChoices: ChoiceSource) {
            self.queue = queue
            self.observerChoices = observerChoices
        }
    }

    init(behaviors: [ObserverBehavior], ordering: ObserverOrdering, catalog: Catalog, choices: ChoiceSource,
         appLaunch: (@Sendable (PaymentQueue) -> Void)? = nil, workLatency: LatencyDistribution? = nil, workFailureProbability: Double = 0) {
        self.appLaunch = appLaunch
        // The simulator's apps' default (`DeviceApp.asynchronousWorkDelay`).
        self.workLatency = workLatency ?? .exponential(minimumMilliseconds: 20, meanMilliseconds: 300)
        self.workFailureProbability = workFailureProbability
        self.behaviors = behaviors
        self.ordering = ordering
        self.catalog = catalog
        self.choices = choices
    }

    private func device(_ name: String) -> Device {
        if let last, last.name == name { return last.app }
        let app: Device
        if let existing = devices[name] {
            app = existing
        } else {
            // Each device's queue draws from its own observer stream (`ChoiceStream.observers`), as `simulate`'s do.
            let source = choices.stream(ChoiceStream.observers(name))
            app = Device(queue: PaymentQueue(device: name, catalog: catalog, ordering: ordering, choices: source), observerChoices: source)
            devices[name] = app
        }
        last = (name, app)
        return app
    }

    /// The app of `name` if it has one (made by a delivery or a user's action).
    private func existingDevice(_ name: String) -> Device? {
        if let last, last.name == name { return last.app }
        return devices[name]
    }

    /// New observer instances for a launch, as the simulator's apps make them (quitting loses
    /// the old ones and their memory), named as it names them so unchanged observers attach
    /// under the recorded names.
    static func makeObservers(_ behaviors: [ObserverBehavior]) -> [BuiltInObserver] {
        behaviors.enumerated().map { index, behavior in
            BuiltInObserver(name: "\(behavior.rawValue)-\(index + 1)", behavior: behavior, storage: nil)
        }
    }

    /// The app-side half of a user's action that happens before the queue hears it: quitting
    /// drops the observers at once.
    func beforeUserAction(_ body: CommandBody) {
        guard case .terminateApp(let name) = body else { return }
        let app = device(name)
        app.queue.terminateApp()
        app.lateObservers.removeAll()
    }

    /// After a launch reached the queue, the app attaches new observers (as the simulator's apps
    /// do on every launch); late ones wait for their recorded attachment (`attachLate`).
    func afterUserAction(_ body: CommandBody) {
        guard case .launchApp(let name) = body else { return }
        let app = device(name)
        if let appLaunch {
            // The app's own code attaches its observers itself, through the queue, as at an iOS app's launch.
            appLaunch(app.queue)
            return
        }
        let observers = Self.makeObservers(behaviors)
        app.lateObservers = observers.filter(\.behavior.attachesLate)
        for observer in observers where !observer.behavior.attachesLate { app.queue.add(observer) }
        // The simulator's app draws, after attaching, after how many steps the late ones attach.
        if !app.lateObservers.isEmpty { app.lateSteps = 1 + app.observerChoices.index(.observerAttach, count: 2) }
    }

    /// Attaches the late observer of this launch named `observer`, if there is one; true if so.
    func attachLate(device name: String, observer: String) -> Bool {
        guard let app = existingDevice(name), let index = app.lateObservers.firstIndex(where: { $0.observerName == observer }) else { return false }
        app.queue.add(app.lateObservers.remove(at: index))
        return true
    }

    /// In a what-if replay, late observers attach at the user's step they drew at launch, before the
    /// step's action, as the simulator's app attaches them (the recorded attachments are the recorded
    /// observers'). A step is a purchase or a restore. True if some attached.
    func attachLateAtStep(_ body: CommandBody) -> Bool {
        switch body {
        case .addPayment, .restoreCompletedTransactions: break
        default: return false
        }
        guard let app = existingDevice(body.device), !app.lateObservers.isEmpty else { return false }
        app.lateSteps -= 1
        guard app.lateSteps <= 0 else { return false }
        for observer in app.lateObservers { app.queue.add(observer) }
        app.lateObservers.removeAll()
        return true
    }

    /// The devices whose late observers are still waiting, in name order (what-if replays).
    func devicesWithLateObservers() -> [String] {
        devices.filter { !$0.value.lateObservers.isEmpty }.keys.sorted()
    }

    /// Attaches every late observer of the device now.
    func attachLate(device name: String) {
        guard let app = existingDevice(name) else { return }
        for observer in app.lateObservers { app.queue.add(observer) }
        app.lateObservers.removeAll()
    }

    /// Delivers one appended event to its device's app, calling the observers as StoreKit would;
    /// returns the device (nil: the event concerns none).
    @discardableResult
    func deliver(_ recorded: RecordedEvent) -> String? {
        guard let name = recorded.event.device, !name.isEmpty else { return nil }
        device(name).queue.deliver(recorded)
        return name
    }

    /// What the observer code of `device` sent since the last call, in order.
    func drainObserverCommands(_ name: String) -> [CommandBody] {
        guard let app = existingDevice(name) else { return [] }
        // Most events make the observers send nothing: no array is built for those.
        let drained = app.queue.drainOutbox(keepingFirst: .max)
        if drained.isEmpty { return [] }
        var commands: [CommandBody] = []
        commands.reserveCapacity(drained.count)
        for (body, _) in drained where CommandSource.of(body) == .observer { commands.append(body) }
        return commands
    }

    /// The asynchronous work the app of `device` started since the last call, each with the delay after
    /// which it completes, drawn from the device's own stream (`app work DEVICE`).
    func takeStartedWork(_ name: String) -> [(number: UInt64, delay: Int64)] {
        guard let app = existingDevice(name) else { return [] }
        let started = app.queue.takeStartedWork()
        guard !started.isEmpty else { return [] }
        let source = workChoices(name)
        return started.map { ($0.number, workLatency.sampleNanoseconds(source, .appWorkDelay)) }
    }

    /// Completes work `number` of `device`'s app (succeeded unless it can fail and the draw says so);
    /// false when the launch that started it ended.
    func completeWork(device name: String, work number: UInt64) -> Bool {
        guard let app = existingDevice(name), let canFail = app.queue.awaitedWorkCanFail(number) else { return false }
        let fails = canFail && workFailureProbability > 0 && workChoices(name).chance(.appWorkFailure, workFailureProbability)
        return app.queue.completeWork(number, succeeded: !fails)
    }

    /// Each device's stream for its app's work: the replay's own, so it moves no other draw.
    private var workStreams: [String: ChoiceSource] = [:]
    private func workChoices(_ name: String) -> ChoiceSource {
        if let stream = workStreams[name] { return stream }
        let stream = choices.stream("app work " + name)
        workStreams[name] = stream
        return stream
    }

    /// A command drained from `device`'s app that the replay does not send.
    func withdraw(_ body: CommandBody, device name: String) {
        existingDevice(name)?.queue.withdraw(body)
    }

    /// The devices whose outbox may hold commands.
    var deviceNames: Dictionary<String, Device>.Keys { devices.keys }
}
