import StoreKitModel

/// An app's code at each launch, written on Apple's StoreKit 1 API: the user's own (`SimulatedApp`:
/// it attaches its observers itself, as at an iOS app's launch), or the built-in behaviours'
/// observers, made anew for each launch, which the launch attaches (some a few user steps later).
package enum AppCode {
    case app((_ queue: PaymentQueue) -> Void)
    case builtInObservers(() -> [BuiltInObserver])
}

extension AppCode {
    /// The built-in behaviours' code: new `BuiltInObserver`s at every launch, named `behaviour-N`
    /// in their order, over the app's storage on the device (`BuiltInAppStorage`). Every runtime
    /// (simulation, live apps, replay, load drivers) makes built-in apps here.
    package static func builtIn(_ behaviors: [ObserverBehavior], storage: ContentStorage?, persistentFolder: String = "apps") -> AppCode {
        // Concatenated rather than interpolated, and once per device rather than per launch: every
        // schedule of an exploration makes its apps anew.
        let names = behaviors.enumerated().map { index, behavior in behavior.rawValue + "-" + String(index + 1) }
        return .builtInObservers {
            behaviors.indices.map { index in
                BuiltInObserver(name: names[index], behavior: behaviors[index], storage: storage, persistentFolder: persistentFolder)
            }
        }
    }
}

/// The app side of one device, written once: its `PaymentQueue`, a launch (the `launchApp` command,
/// new observers attached, late ones a few user steps later), the end of a launch (a quit, a kill,
/// a termination the queue recorded), the events delivered to it, and what it made (commands,
/// asynchronous work) collected as a runtime's effects. The simulator's and the live observer
/// processes' apps (`DeviceApp`) and the test kit's `LoopbackDevice` run it.
///
/// It is a `Role` of its own (one device, no user script: the users' actions come from outside), so
/// a runtime hosts it in a `RoleHost` as it hosts any role.
package final class InstalledApp: Role {
    package let queue: PaymentQueue
    package var device: String { queue.device }
    package var name: String { queue.device }
    /// The built-in observers of the current launch (new instances at every launch: quitting loses them).
    @exclusivity(unchecked) package private(set) var observers: [BuiltInObserver] = []
    /// Observers that attach only after `lateSteps` more user steps (the attach time choice).
    @exclusivity(unchecked) private var lateObservers: [BuiltInObserver] = []
    @exclusivity(unchecked) private var lateSteps = 0
    /// Observers of this launch held back until `attachHeldObservers()` (a live replay attaches them
    /// where its recording did).
    @exclusivity(unchecked) private var heldObservers: [BuiltInObserver] = []
    private let code: AppCode
    /// The stream of this device's observers and app: attach order and time.
    private let observerChoices: ChoiceSource
    private let shufflesAttachOrder: Bool
    /// Whether a launch draws after how many user steps its late observers attach (the simulator's
    /// apps); false: they wait for `attachLate(named:)` (a replay attaching them when its recording did).
    private let drawsLateSteps: Bool
    /// How long each piece of the app's asynchronous work takes, drawn when it starts; nil: the work
    /// waits in the queue for whoever completes it.
    package var workDelay: (() -> Int64)?
    /// Whether a piece of work that can fail (`canFail`) fails, drawn by a host that simulates
    /// failures; nil: work always succeeds.
    package var workFails: ((_ canFail: Bool) -> Bool)?
    package var trace: AppTrace?

    package init(queue: PaymentQueue, code: AppCode, observerChoices: ChoiceSource, shufflesAttachOrder: Bool = false,
                 drawsLateSteps: Bool = true, workDelay: (() -> Int64)? = nil) {
        self.queue = queue
        self.code = code
        self.observerChoices = observerChoices
        self.shufflesAttachOrder = shufflesAttachOrder
        self.drawsLateSteps = drawsLateSteps
        self.workDelay = workDelay
    }

    /// Launches the app: the `launchApp` command, then its code.
    package func launch(holdingAttachment: Bool = false) {
        queue.enqueue(.launchApp(device: device))
        runLaunchCode(holdingAttachment: holdingAttachment)
    }

    /// The code of a launch whose `launchApp` was sent already (a replay sends the recorded one): new
    /// observers, attached now, in their order (or one drawn), and late ones after a drawn number of steps.
    /// `holdingAttachment`: the observers attached at launch wait for `attachHeldObservers()`.
    package func runLaunchCode(holdingAttachment: Bool = false) {
        switch code {
        case .app(let launch):
            // The app's own code attaches its observers through the queue.
            launch(queue)
            observers = []
        case .builtInObservers(let make):
            observers = make()
        }
        var atLaunch = observers.filter { !$0.behavior.attachesLate }
        lateObservers = observers.filter(\.behavior.attachesLate)
        if shufflesAttachOrder { atLaunch = observerChoices.shuffled(atLaunch, .observerAttach) }
        if holdingAttachment {
            heldObservers = atLaunch
        } else {
            for observer in atLaunch { queue.add(observer) }
        }
        lateSteps = lateObservers.isEmpty || !drawsLateSteps ? 0 : 1 + observerChoices.index(.observerAttach, count: 2)
    }

    /// Whether observers of this launch still wait to attach.
    package var hasLateObservers: Bool { !lateObservers.isEmpty }

    /// A user's step (a purchase, a restore): late observers attach once their steps have passed.
    /// True if some attached.
    @discardableResult
    package func userStepped() -> Bool {
        guard !lateObservers.isEmpty else { return false }
        lateSteps -= 1
        guard lateSteps <= 0 else { return false }
        attachLateObservers()
        return true
    }

    /// Attaches the late observer named `observer`, if this launch has one; true if so.
    package func attachLate(named observer: String) -> Bool {
        guard let index = lateObservers.firstIndex(where: { $0.observerName == observer }) else { return false }
        queue.add(lateObservers.remove(at: index))
        return true
    }

    /// Attaches the observers this launch held back (`runLaunchCode(holdingAttachment: true)`).
    package func attachHeldObservers() {
        for observer in heldObservers { queue.add(observer) }
        heldObservers.removeAll()
    }

    /// Attaches every late observer of this launch now.
    package func attachLateObservers() {
        for observer in lateObservers { queue.add(observer) }
        lateObservers.removeAll()
    }

    /// The app quits or is killed: its observers go, and commands not yet drained are lost. It
    /// is launched again later, when every unfinished transaction is delivered again (R-Q4).
    package func terminate() {
        queue.terminateApp()
        endLaunch()
    }

    /// The queue recorded this app's termination without the app asking for it (another client's
    /// `terminateApp`): like a kill, its observers are gone.
    package func terminatedElsewhere() {
        queue.terminatedElsewhere()
        endLaunch()
    }

    private func endLaunch() {
        observers.removeAll()
        lateObservers.removeAll()
        heldObservers.removeAll()
    }

    /// What the app made since the last call, as a runtime's effects: its commands (the first `count`
    /// of them: a kill drops the rest; each in the trace with who made it), and a timer for each piece
    /// of asynchronous work it started.
    package func collect(keepingFirst count: Int = .max, into effects: inout [Effect]) {
        let trace = self.trace, device = self.device
        queue.drainOutbox(keepingFirst: count) { body, sender in
            trace?.sent(device: device, sender: sender, body: body)
            effects.append(.send(body))
        }
        guard let workDelay else { return }
        for started in queue.takeStartedWork() {
            effects.append(.timer(afterNanoseconds: workDelay(), .appWork(device: device, work: started.number)))
        }
    }

    // As a role of its own: events are delivered as StoreKit tells them, and what the app makes is sent.

    // Another device's events are not this app's; those of no device (the run's start) are everyone's.
    package func catchUp(_ recorded: RecordedEvent) {
        if let other = recorded.event.device, other != device { return }
        queue.catchUp(recorded)
    }

    package func resume(now: Int64) -> [Effect] {
        var effects: [Effect] = []
        collect(into: &effects)
        return effects
    }

    package func receive(_ recorded: RecordedEvent, now: Int64) -> [Effect] {
        var effects: [Effect] = []
        receive(recorded, now: now, into: &effects)
        return effects
    }

    package func receive(_ recorded: RecordedEvent, now: Int64, into effects: inout [Effect]) {
        if let other = recorded.event.device, other != device {} else { queue.deliver(recorded) }
        collect(into: &effects)
    }

    package func timerFired(_ token: TimerToken, now: Int64) -> [Effect] {
        var effects: [Effect] = []
        timerFired(token, now: now, into: &effects)
        return effects
    }

    /// Completes the app's work (succeeded unless `workFails` draws a failure); work of a launch that
    /// ended is gone with it, and nothing is drawn for it.
    package func timerFired(_ token: TimerToken, now: Int64, into effects: inout [Effect]) {
        guard case .appWork(device, let number) = token, let canFail = queue.awaitedWorkCanFail(number) else { return }
        queue.completeWork(number, succeeded: !(workFails?(canFail) ?? false))
        collect(into: &effects)
    }
}
