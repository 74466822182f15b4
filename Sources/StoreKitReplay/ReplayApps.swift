import StoreKitModel
import StoreKitRoles
import StoreKitRuntime

/// The environment a replay gives the roles it hosts (its apps, its downloader): no network, so a
/// command a role sends and a timer it sets are collected here, and the session hands them to the
/// engine (a replay decides where each goes: `ReplaySession`) or to its timer list.
struct ReplayTransport: RoleTransport {
    typealias Failure = Never
    var now: Int64 = 0
    /// A replay has no window: the engine answers every command at once.
    var hasCapacity: Bool { true }
    var sent: [CommandBody] = []
    var timers: [(delay: Int64, token: TimerToken)] = []

    mutating func submit(_ body: CommandBody) { sent.append(body) }

    mutating func setTimer(afterNanoseconds delay: Int64, _ token: TimerToken) { timers.append((delay, token)) }

    /// What was sent and set since the last call, emptied.
    mutating func take() -> (sent: [CommandBody], timers: [(delay: Int64, token: TimerToken)]) {
        defer {
            sent = []
            timers = []
        }
        return (sent, timers)
    }
}

/// The apps of a what-if replay: one `InstalledApp` per device (the app side every runtime runs),
/// hosted in a `RoleHost`, with the observers under test, hearing every event of its device as it is
/// appended. The users' actions come from the recording, so a launch runs the app's launch code after
/// the recorded `launchApp`, a quit ends the launch before the recorded `terminateApp`, and late
/// observers attach at the user's step their launch drew (or, before a slice, where the recording
/// attached them).
final class ReplayApps {
    private let code: AppCode
    private let ordering: ObserverOrdering
    private let shufflesAttachOrder: Bool
    private let catalog: Catalog
    private let choices: ChoiceSource
    /// How long the app's asynchronous work takes, and whether work that can fail fails.
    private let workLatency: LatencyDistribution
    private let workFailureProbability: Double
    private var hosts: [String: (host: RoleHost, app: InstalledApp)] = [:]
    /// The app found last: a command's events mostly concern one device.
    private var last: (name: String, host: RoleHost, app: InstalledApp)?

    init(scenario: Scenario, choices: ChoiceSource, appLaunch: (@Sendable (PaymentQueue) -> Void)?) {
        // Built-in observers without content storage: a replay keeps no content (`VirtualContentStorage` is the downloader's).
        if let appLaunch {
            code = .app(appLaunch)
        } else {
            code = .builtIn(scenario.apps.observers, storage: nil)
        }
        ordering = scenario.apps.ordering
        shufflesAttachOrder = scenario.apps.choicePoints?.shuffleAttachOrder == true
        catalog = scenario.catalog
        self.choices = choices
        // The simulator's apps' default (`DeviceApp.asynchronousWorkDelay`).
        workLatency = scenario.apps.asynchronousWorkLatency ?? .exponential(minimumMilliseconds: 20, meanMilliseconds: 300)
        workFailureProbability = scenario.apps.choicePoints?.asynchronousWorkFailureProbability ?? 0
    }

    /// The device's app and its host, made when the device first shows up.
    func app(_ name: String) -> (host: RoleHost, app: InstalledApp) {
        if let last, last.name == name { return (last.host, last.app) }
        let found: (host: RoleHost, app: InstalledApp)
        if let existing = hosts[name] {
            found = existing
        } else {
            found = makeApp(name)
            hosts[name] = found
        }
        last = (name, found.host, found.app)
        return found
    }

    private func makeApp(_ name: String) -> (host: RoleHost, app: InstalledApp) {
        // Each device's queue and app draw from its own observer stream (`ChoiceStream.observers`), as
        // `simulate`'s do; its work's timing and failures from a stream of the replay's own, so they move no other draw.
        let observerChoices = choices.stream(ChoiceStream.observers(name))
        let workChoices = choices.stream("app work " + name)
        let queue = PaymentQueue(device: name, catalog: catalog, ordering: ordering, choices: observerChoices)
        let app = InstalledApp(queue: queue, code: code, observerChoices: observerChoices, shufflesAttachOrder: shufflesAttachOrder)
        let latency = workLatency, failure = workFailureProbability
        app.workDelay = { latency.sampleNanoseconds(workChoices, .appWorkDelay) }
        if failure > 0 { app.workFails = { canFail in canFail && workChoices.chance(.appWorkFailure, failure) } }
        return (RoleHost(role: app), app)
    }

    /// Delivers one appended event to its device's app, calling the observers as StoreKit would;
    /// what they make goes to `transport`. Returns false when the event concerns no device.
    @discardableResult
    func deliver(_ recorded: RecordedEvent, over transport: inout ReplayTransport) -> Bool {
        guard let name = recorded.event.device, !name.isEmpty else { return false }
        app(name).host.deliver(recorded, over: &transport)
        return true
    }

    /// Runs `action` on the device's app and hands what it made to `transport` (an `InstalledApp`
    /// resumes by handing over what it made).
    func act(on name: String, over transport: inout ReplayTransport, _ action: (InstalledApp) -> Void) {
        let (host, app) = app(name)
        action(app)
        host.resume(over: &transport)
    }

    /// A work timer is due: the app's work completes and its code runs.
    func fire(_ token: TimerToken, device name: String, over transport: inout ReplayTransport) {
        app(name).host.fire(token, over: &transport)
    }

    /// The devices whose late observers are still waiting, in name order.
    func devicesWithLateObservers() -> [String] {
        hosts.filter { $0.value.app.hasLateObservers }.keys.sorted()
    }

    /// A command made by `device`'s app that the replay does not send.
    func withdraw(_ body: CommandBody) {
        hosts[body.device]?.app.queue.withdraw(body)
    }
}
