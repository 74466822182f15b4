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
    /// The user's own app code (StoreKitSim's `SimulatedApp`) that runs on every device instead of the
    /// built-in observers, by the name an executable registered it under (`SKSim.main(apps:)`); the
    /// runtime finds it there (`AppHooks.appLaunch`). nil: the built-in `observers`, and nothing is recorded.
    public var app: String?
    public var ordering: ObserverOrdering = .seededShuffle
    /// Devices signed in to the same account; every device after the first restores
    /// once its own purchases are done (R-Q9: restoring on a new device).
    public var devicesPerAccount = 2
    /// Choice points that exploration turns on (app kills, duplicate deliveries, late
    /// `removedTransactions`, attach order); nil in ordinary runs, so their logs stay as they were.
    public var choicePoints: ChoicePoints?
    /// How long a piece of the app's own asynchronous work takes (a server reply, StoreKitSim's
    /// `SimulatedWork`); nil: 20 ms plus an exponential of mean 300 ms.
    public var asynchronousWorkLatency: LatencyDistribution?
    /// Share of devices whose user may not authorise payments (parental restrictions, R-Q1):
    /// their payments fail with `paymentNotAllowed`. nil (none) keeps older scenarios' logs as they were.
    public var restrictedDeviceShare: Double?
    /// Chance, per purchase step, that the app refreshes its receipt (SKReceiptRefreshRequest, R-R2).
    /// nil: 0, and nothing is drawn, so older scenarios' logs stay as they were.
    public var receiptRefreshProbability: Double?
    /// Chance, per purchase of a subscription with promotional offers in a group the device has bought
    /// in before, that the app attaches a signed discount for one of them (SKPaymentDiscount, F-O5).
    /// nil: 0, and nothing is drawn, so older scenarios' logs stay as they were.
    public var promotionalOfferProbability: Double?

    public init() {}

    public func validate() throws(ConfigurationError) {
        guard purchasesPerDevice >= 0 else { throw ConfigurationError("purchasesPerDevice must be 0 or more", code: .outOfRange) }
        guard devicesPerAccount >= 1 else { throw ConfigurationError("devicesPerAccount must be 1 or more", code: .outOfRange) }
        guard !observers.isEmpty || app != nil else { throw ConfigurationError("at least one observer per device is needed to complete purchases", code: .missingValue) }
        if let app, app.isEmpty { throw ConfigurationError("apps.app is empty; name an app the executable registered", code: .missingValue) }
        for (name, value) in [("restoreProbability", restoreProbability), ("relaunchProbability", relaunchProbability),
                              ("restrictedDeviceShare", restrictedDeviceShare ?? 0),
                              ("receiptRefreshProbability", receiptRefreshProbability ?? 0),
                              ("promotionalOfferProbability", promotionalOfferProbability ?? 0)]
        where !(0...1).contains(value) {
            throw ConfigurationError("apps.\(name) is \(value); a probability must be between 0 and 1", code: .outOfRange)
        }
        try choicePoints?.validate()
    }
}

/// The choice points exploration controls on the app side, beyond observer order (R-Q5), user
/// relaunches and restores (`AppBehavior`) and the store's outcomes (`StoreBehavior`). Each
/// draw is a recorded choice whose zero is "nothing unusual happens".
public struct ChoicePoints: Sendable, Hashable, Codable {
    /// Chance, after the app handled one update, that it is killed between two of the commands it
    /// made (or after all of them): the rest are never sent, and it is launched again (R-Q4).
    public var killProbability: Double = 0
    /// Chance that the observers hear one transaction update twice.
    public var duplicateDeliveryProbability: Double = 0
    /// Chance that the app hears of a finished transaction (`removedTransactions`) late, and how late.
    public var removalDelayProbability: Double = 0
    public var removalDelayMilliseconds: Double = 400
    /// Attach the observers in an order drawn at every launch, rather than the listed order.
    public var shuffleAttachOrder = false
    /// Chance that a piece of the app's own asynchronous work that can fail (a server request) fails;
    /// nil: 0, and nothing is drawn.
    public var asynchronousWorkFailureProbability: Double?

    public init() {}

    public func validate() throws(ConfigurationError) {
        for (name, value) in [("killProbability", killProbability), ("duplicateDeliveryProbability", duplicateDeliveryProbability),
                              ("removalDelayProbability", removalDelayProbability),
                              ("asynchronousWorkFailureProbability", asynchronousWorkFailureProbability ?? 0)] where !(0...1).contains(value) {
            throw ConfigurationError("apps.choicePoints.\(name) is \(value); a probability must be between 0 and 1", code: .outOfRange)
        }
        guard removalDelayMilliseconds >= 0 else { throw ConfigurationError("apps.choicePoints.removalDelayMilliseconds must be 0 or more", code: .outOfRange) }
    }
}

/// One simulated app install and its user: the app side (`InstalledApp`: its queue, launches,
/// observers) and the user's script.
public final class DeviceApp {
    public let device: String
    public let account: String
    public var queue: PaymentQueue { installed.queue }
    /// The app side, written once for every runtime.
    package let installed: InstalledApp
    // Unchecked exclusivity on the script's state: changed only by this app's own methods, one access
    // at a time (observers call into the queue, never into the app), so the checks only cost time.
    /// The observers of the current launch (new instances at every launch: quitting loses them).
    package var observers: [BuiltInObserver] { installed.observers }
    /// Whether a `deviceStep` timer is set, so a kill does not start a second chain of steps.
    @exclusivity(unchecked) var stepTimerPending = false
    private let behavior: AppBehavior
    private let catalog: Catalog
    private let isAdditionalDevice: Bool
    /// The user's stream: what the user does does not depend on the observers.
    private let choices: ChoiceSource
    /// The stream of this device's observers and app: their order, attachments, duplicates, kills.
    let observerChoices: ChoiceSource
    /// The key the developer's server signs promotional offers with, which the store checks (F-O6).
    private let promotionalOfferKey: PromotionalOfferKey
    /// Subscription groups this app has bought in: its users are the current and lapsed subscribers a
    /// promotional offer is for, as far as the app knows (the store decides, F-O6).
    private var subscribedGroups: Set<String> = []
    /// Discounts signed so far, numbering each one's nonce.
    private var discountsSigned = 0
    @exclusivity(unchecked) private var purchasesLeft: Int
    @exclusivity(unchecked) private var stage: Stage = .register
    private var restoredAsNewDevice = false

    private enum Stage { case register, launch, shopping, relaunching, done }

    private let storage: ContentStorage?
    /// The app's own code that adds the user's payments, if it has one (issue 28).
    private let appPurchase: ((_ queue: PaymentQueue, _ payment: Payment) -> Bool)?

    public init(device: String, account: String, isAdditionalDevice: Bool, behavior: AppBehavior, catalog: Catalog,
                choices: ChoiceSource, storage: ContentStorage?, hooks: AppHooks? = nil,
                promotionalOfferKey: PromotionalOfferKey = .simulator) {
        self.device = device
        self.promotionalOfferKey = promotionalOfferKey
        self.account = account
        self.behavior = behavior
        self.catalog = catalog
        self.isAdditionalDevice = isAdditionalDevice
        self.choices = choices.stream(ChoiceStream.user(device))
        observerChoices = choices.stream(ChoiceStream.observers(device))
        self.purchasesLeft = behavior.purchasesPerDevice
        self.storage = storage
        appPurchase = hooks?.appPurchase
        let queue = PaymentQueue(device: device, catalog: catalog, ordering: behavior.ordering, choices: observerChoices)
        queue.duplicateDeliveryProbability = behavior.choicePoints?.duplicateDeliveryProbability ?? 0
        queue.trace = hooks?.trace
        installed = InstalledApp(queue: queue, code: Self.code(device: device, behavior: behavior, hooks: hooks, storage: storage),
                                 observerChoices: observerChoices,
                                 shufflesAttachOrder: behavior.choicePoints?.shuffleAttachOrder == true)
        installed.trace = hooks?.trace
        // The user's stream times the app's work, as before the app side was its own type.
        installed.workDelay = { [unowned self] in asynchronousWorkDelay() }
    }

    /// The app's code at each launch: the user's own, or new observer instances (a test's, or the
    /// built-in behaviours).
    private static func code(device: String, behavior: AppBehavior, hooks: AppHooks?, storage: ContentStorage?) -> AppCode {
        if let appLaunch = hooks?.appLaunch { return .app(appLaunch) }
        return .builtIn(behavior.observers, storage: storage, persistentFolder: "apps/" + device)
    }

    /// True when the app is up with its observers, so a kill means something.
    var canBeKilled: Bool { stage == .shopping || stage == .done }

    /// The app is killed: its observers go, commands not yet sent are lost, and it is launched
    /// again at the next step, when every unfinished transaction is delivered again (R-Q4).
    func kill() {
        installed.terminate()
        stage = .relaunching
    }

    /// The queue recorded this app's termination without the app asking for it (another client's
    /// `terminateApp`): like a kill, its observers are gone and it is launched again at its next
    /// step, when every unfinished transaction is delivered again (R-Q4). Without this it went on
    /// as if running, while the queue held its transactions for observers that never came back.
    func terminatedElsewhere() {
        installed.terminatedElsewhere()
        stage = .relaunching
    }

    public var isDone: Bool { stage == .done }

    /// True when the user's script is done and the queue holds nothing unfinished for
    /// this device: nothing more will happen unless someone acts.
    public var isSettled: Bool {
        guard isDone, let state = queue.state else { return isDone && queue.state == nil }
        return state.onlyDeclinedPending && state.restoresInProgress.isEmpty && state.receiptRefreshesInProgress.isEmpty
            && !queue.hasPendingWork
    }

    /// How long one piece of the app's asynchronous work takes: a choice.
    func asynchronousWorkDelay() -> Int64 {
        (behavior.asynchronousWorkLatency ?? .exponential(minimumMilliseconds: 20, meanMilliseconds: 300)).sampleNanoseconds(choices, .appWorkDelay)
    }

    /// Whether a piece of asynchronous work that can fail fails: a choice, drawn only when the
    /// scenario gives it a chance.
    func asynchronousWorkFails(canFail: Bool) -> Bool {
        guard canFail, let probability = behavior.choicePoints?.asynchronousWorkFailureProbability, probability > 0 else { return false }
        return choices.chance(.appWorkFailure, probability)
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
            if let share = behavior.restrictedDeviceShare, choices.chance(.restrictedDevice, share) {
                // The user may not pay (R-Q1); the app does not check canMakePayments, so its payments fail.
                queue.enqueue(.setPaymentsAllowed(device: device, allowed: false))
            }
            stage = .launch
            return 0
        case .launch, .relaunching:
            installed.launch()
            stage = .shopping
            return behavior.thinkTime.sampleNanoseconds(choices)
        case .shopping:
            installed.userStepped()
            if purchasesLeft > 0 {
                purchasesLeft -= 1
                buy()
                if choices.chance(.userRestore, behavior.restoreProbability) {
                    queue.restoreCompletedTransactions(applicationUsername: account)
                }
                if let chance = behavior.receiptRefreshProbability, chance > 0, choices.chance(.receiptRefresh, chance) {
                    queue.refreshReceipt()
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
            if installed.hasLateObservers { return behavior.thinkTime.sampleNanoseconds(choices) }
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
        var payment = Payment(productIdentifier: product.identifier, quantity: quantity, applicationUsername: account)
        if let group = product.subscriptionGroup {
            if let offers = product.promotionalOffers, subscribedGroups.contains(group),
               let chance = behavior.promotionalOfferProbability, chance > 0, choices.chance(.promotionalOffer, chance) {
                payment.discount = signedDiscount(for: payment, at: offers[choices.index(.promotionalOffer, count: offers.count)])
            }
            subscribedGroups.insert(group)
        }
        // The app's own code adds the payment, when it takes the user's request (issue 28).
        if payment.discount == nil, let appPurchase, appPurchase(queue, payment) { return }
        do {
            try queue.add(payment)
        } catch {
            preconditionFailure("a catalog product with a positive quantity was refused locally: \(error)")
        }
    }

    /// What the developer's server gives the app for a promotional offer (F-O6): a discount signed with
    /// the scenario's key, its nonce made from the device and a count, its timestamp the count, so the
    /// same run signs the same discounts.
    private func signedDiscount(for payment: Payment, at offer: PromotionalOffer) -> PaymentDiscount {
        discountsSigned += 1
        return promotionalOfferKey.discount(for: payment, offerIdentifier: offer.identifier,
                                           nonce: PromotionalOfferKey.nonce(from: "\(device) \(discountsSigned)"),
                                           timestamp: Int64(discountsSigned))
    }

    /// The app quits and comes back: observers detach with it and attach again on
    /// launch, when every unfinished transaction is delivered again (R-Q4).
    private func relaunch() {
        installed.terminate()
        stage = .relaunching
    }
}

/// The observer role: hosts the apps of many devices, each with its queue, observers
/// and user script.
public final class AppRole: Role {
    public let name: String
    // Unchecked exclusivity: read for every event, changed only by this role, one access at a time.
    @exclusivity(unchecked) public private(set) var apps: [String: DeviceApp] = [:]
    public let deviceNames: [String]

    private let hooks: AppHooks?
    private let choicePoints: ChoicePoints?
    private let choices: ChoiceSource?
    /// The app of the last event heard: consecutive events mostly concern one device, and
    /// comparing a short name costs less than hashing it.
    @exclusivity(unchecked) private var lastApp: DeviceApp?

    @inline(__always)
    private func app(_ device: String) -> DeviceApp? {
        if let lastApp, lastApp.device == device { return lastApp }
        lastApp = apps[device]
        return lastApp
    }

    public init(name: String = "apps", devices: [DeviceApp], hooks: AppHooks? = nil, choicePoints: ChoicePoints? = nil,
                choices: ChoiceSource? = nil) {
        self.name = name
        self.hooks = hooks
        self.choicePoints = choicePoints
        self.choices = choices
        self.deviceNames = devices.map(\.device)
        for app in devices { apps[app.device] = app }
    }

    /// Applies history silently (a restarted process catching up), without callbacks.
    public func catchUp(_ recorded: RecordedEvent) {
        guard let device = recorded.event.device, let app = app(device) else { return noteRunStarted(recorded.event) }
        app.queue.catchUp(recorded)
    }

    /// A live run's header names its wall-clock start: the apps date their transactions and receipts
    /// from it, as the App Store server does (a deterministic run's start is the scenario's `startDate`).
    private func noteRunStarted(_ event: Event) {
        guard case .runStarted(let header) = event, header.startedAtUnixNanoseconds != 0 else { return }
        let start = Date(timeIntervalSince1970: Double(header.startedAtUnixNanoseconds / 1_000_000) / 1_000)
        for app in apps.values { app.queue.startDate = start }
    }

    /// Starts (or, after catching up, resumes) every device's script: the commands and
    /// timers that set them going.
    public func resume(now: Int64) -> [Effect] {
        var effects: [Effect] = []
        for device in deviceNames {
            guard let app = apps[device] else { continue }
            app.resumeAfterRestart()
            send(app, into: &effects)
            app.stepTimerPending = true
            effects.append(.timer(afterNanoseconds: 0, .deviceStep(device: device)))
        }
        return effects
    }

    /// The app's commands, as effects added to `effects` (and in the trace, with who made each).
    private func send(_ app: DeviceApp, keepingFirst count: Int = .max, into effects: inout [Effect]) {
        app.installed.collect(keepingFirst: count, into: &effects)
    }

    /// Every device's script is done and nothing is left unfinished.
    public var isSettled: Bool { apps.values.allSatisfy(\.isSettled) }

    public func receive(_ recorded: RecordedEvent, now: Int64) -> [Effect] {
        var effects: [Effect] = []
        receive(recorded, now: now, into: &effects)
        return effects
    }

    public func receive(_ recorded: RecordedEvent, now: Int64, into effects: inout [Effect]) {
        guard let device = recorded.event.device, let app = app(device) else { return noteRunStarted(recorded.event) }
        // Told by the case alone (no payload copied): this runs for every event of every device. The app's
        // own terminations (a quit, a kill, a restarted process's, any incarnation's) come from this role.
        let terminatedElsewhere: Bool
        if case .appTerminated = recorded.event {
            terminatedElsewhere = app.canBeKilled && !(recorded.commandID.map { isOwnOrigin($0.origin) } ?? true)
        } else {
            terminatedElsewhere = false
        }
        app.queue.deliver(recorded)
        if terminatedElsewhere {
            app.terminatedElsewhere()
            if !app.stepTimerPending {
                app.stepTimerPending = true
                effects.append(.timer(afterNanoseconds: 0, .deviceStep(device: device)))
            }
            return send(app, into: &effects)
        }
        guard let probability = choicePoints?.killProbability, probability > 0, choices != nil, app.canBeKilled,
              app.observerChoices.chance(.appKill, probability) else { return send(app, into: &effects) }
        // Killed after handling this update, between two of the commands it made (or after all).
        let made = app.queue.pendingCommandCount
        let kept = made == 0 ? 0 : app.observerChoices.index(.appKill, count: made + 1)
        // What the kill drops, named in traces only.
        let dropped = hooks?.trace == nil ? [] : Array(app.queue.pendingCommands.dropFirst(kept))
        send(app, keepingFirst: kept, into: &effects)
        hooks?.trace?.killed(device: device, dropped: dropped, afterCause: recorded.sequence)
        app.kill()
        send(app, into: &effects)
        if !app.stepTimerPending {
            app.stepTimerPending = true
            effects.append(.timer(afterNanoseconds: 0, .deviceStep(device: device)))
        }
    }

    /// Whether commands of `origin` are this role's: its name, then any incarnation (`apps.0`,
    /// `observer-1.4242`).
    private func isOwnOrigin(_ origin: String) -> Bool {
        origin.utf8.count > name.utf8.count && origin.hasPrefix(name) && origin.utf8.dropFirst(name.utf8.count).first == UInt8(ascii: ".")
    }

    public func timerFired(_ token: TimerToken, now: Int64) -> [Effect] {
        var effects: [Effect] = []
        timerFired(token, now: now, into: &effects)
        return effects
    }

    public func timerFired(_ token: TimerToken, now: Int64, into effects: inout [Effect]) {
        if case .appWork(let device, let number) = token {
            // Work of a launch that ended is gone with it: nothing is drawn for it.
            guard let app = app(device), let canFail = app.queue.awaitedWorkCanFail(number) else { return }
            app.queue.completeWork(number, succeeded: !app.asynchronousWorkFails(canFail: canFail))
            return send(app, into: &effects)
        }
        guard case .deviceStep(let device) = token, let app = app(device) else { return }
        app.stepTimerPending = false
        let delay = app.step()
        send(app, into: &effects)
        if let delay {
            app.stepTimerPending = true
            effects.append(.timer(afterNanoseconds: delay, .deviceStep(device: device)))
        }
    }
}
