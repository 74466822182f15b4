import StoreKitModel
import StoreKitRoles

/// Keeps the recording's order between a device's events of one kind and what a live replay
/// sends: an action the recording logged after `n` of them waits until the live log has `n`, at
/// most `maximumNanoseconds` (past that it goes, and that count is no longer waited for: what
/// did not come is not coming). Replies wait for launches and quits, user actions for replies.
struct RecordedOrderHold {
    static let maximumNanoseconds: Int64 = 1_000_000_000
    /// Per device, the events counted so far in the live log, and the counts given up on.
    private var counts: [String: Int] = [:]
    private var forgiven: [String: Int] = [:]
    /// Since when each held action waits.
    private var since: [TimerToken: Int64] = [:]

    mutating func count(_ device: String) { counts[device, default: 0] += 1 }

    func counted(_ device: String) -> Int { counts[device] ?? 0 }

    func isHolding(_ key: TimerToken) -> Bool { since[key] != nil }

    /// nil: `key`'s action may go now; else how long it may still wait.
    mutating func wait(_ key: TimerToken, device: String, needs required: Int, now: Int64) -> Int64? {
        let wait = self.wait(key, until: max(counts[device] ?? 0, forgiven[device] ?? 0) >= required, now: now)
        if wait == nil, max(counts[device] ?? 0, forgiven[device] ?? 0) < required { forgiven[device] = required }
        return wait
    }

    /// The same for a condition other than a count (a receipt piece waits for the live purchases
    /// it lists): nil when `met` or after waiting the maximum; else how long it may still wait.
    mutating func wait(_ key: TimerToken, until met: Bool, now: Int64) -> Int64? {
        guard !met else {
            since[key] = nil
            return nil
        }
        let start = since[key] ?? now
        guard now - start < Self.maximumNanoseconds else {
            since[key] = nil
            return nil
        }
        since[key] = start
        return start + Self.maximumNanoseconds - now
    }
}

/// Replies planned from a recording, each sent after its recorded delay (scaled by the pace)
/// from what it answers; one chain per timer token.
struct ReplyChains {
    private var chains: [TimerToken: (start: Int64, replies: ArraySlice<PlannedReply>, key: TransactionKey?, original: OriginalTransaction?)] = [:]
    let speed: Double
    /// Replies waiting for their device's launches and quits (`PlannedReply.lifecyclesBefore`),
    /// and the chains held, by device.
    private var hold = RecordedOrderHold()
    private var waiting: [String: [TimerToken]] = [:]

    init(speed: Double) { self.speed = speed }

    func scaled(_ nanoseconds: Int64) -> Int64 { Int64(Double(nanoseconds) / speed) }

    /// Starts a chain at `startingAt` (the moment of the event it answers; `now` when not given);
    /// its first reply's timer.
    /// `skipping` replies already sent before a restart: the rest follow at once, keeping their spacing.
    /// `original`: the live run's purchase that store decisions about a purchase are retargeted to.
    mutating func begin(_ token: TimerToken, now: Int64, startingAt: Int64? = nil, replies: [PlannedReply], key: TransactionKey?,
                        original: OriginalTransaction? = nil, skipping: Int = 0) -> [Effect] {
        guard skipping < replies.count, chains[token] == nil else { return [] }
        let first = replies[skipping]
        let origin = min(startingAt ?? now, now)
        let start = skipping == 0 ? origin : origin - scaled(first.delayNanoseconds)
        chains[token] = (start, replies[skipping...], key, original)
        // A due time already past stays negative: replies overdue together are then sent in the
        // order they were due (the recorded order), not in the order their events were heard.
        return [.timer(afterNanoseconds: start + scaled(first.delayNanoseconds) - now, token)]
    }

    /// Sends the chain's next reply if it is due, and sets the timer of the one after it (at its
    /// own due time, even a past one, so that overdue replies of several chains interleave in order).
    mutating func fire(_ token: TimerToken, now: Int64) -> [Effect] {
        guard var chain = chains[token] else { return [] }
        var effects: [Effect] = []
        if let next = chain.replies.first, chain.start + scaled(next.delayNanoseconds) <= now {
            let device = next.body.device
            if let wait = hold.wait(token, device: device, needs: next.lifecyclesBefore, now: now) {
                if !(waiting[device]?.contains(token) ?? false) { waiting[device, default: []].append(token) }
                return [.timer(afterNanoseconds: wait, token)]
            }
            chain.replies.removeFirst()
            effects.append(.send(chain.original.map { next.body.retargeted(to: $0) } ?? chain.key.map { next.body.retargeted(to: $0) } ?? next.body))
        }
        if let next = chain.replies.first {
            chains[token] = chain
            effects.append(.timer(afterNanoseconds: chain.start + scaled(next.delayNanoseconds) - now, token))
        } else {
            chains[token] = nil
        }
        return effects
    }

    /// The chain's next reply, if it is due at `now`.
    func due(_ token: TimerToken, now: Int64) -> PlannedReply? {
        guard let chain = chains[token], let next = chain.replies.first, chain.start + scaled(next.delayNanoseconds) <= now else { return nil }
        return next
    }

    /// The live run logged a launch or quit of `device`, or a launch's first observer attachment
    /// (`AppLifecycleCounter`): replies held for it go out, oldest hold first.
    mutating func noteLifecycle(of device: String, now: Int64?) -> [Effect] {
        hold.count(device)
        guard let now, let tokens = waiting.removeValue(forKey: device) else { return [] }
        return tokens.flatMap { fire($0, now: now) }
    }
}

/// The outside world of a live replay: the store's decisions (`kind` `.store`) or the content
/// servers' reports (`.downloader`) taken from the recording, sent when the live queue reaches
/// the payment, restore or download they answer, after the recorded delay.
public final class RecordedWorldRole: Role {
    public enum Kind: Sendable { case store, downloader }

    public let name: String
    private let kind: Kind
    private let plan: LiveReplayPlan
    private var identities = TransactionIdentities()
    private var chains: ReplyChains
    /// Times each download was started, so the n-th start gets the n-th recorded run of reports.
    private var starts: [DownloadKey: Int] = [:]
    /// The store's view of the live run (kind `.store`): the purchases its later decisions name.
    private var store = StoreProjection()
    private var lifecycles = AppLifecycleCounter()

    public init(name: String, kind: Kind, plan: LiveReplayPlan, speed: Double) {
        self.name = name
        self.kind = kind
        self.plan = plan
        chains = ReplyChains(speed: speed)
    }

    /// What the log showed while catching up (the apps may start before this process): what
    /// was asked and how many of its replies are in already, so `resume` sends the rest.
    private var askedBeforeStart: [(event: Event, identity: TransactionIdentity?)] = []
    private var repliesSeen: [TimerToken: Int] = [:]
    private var restorePieces: [TimerToken: Set<CommandID>] = [:]
    /// The smallest (hearing time on this process's clock − event timestamp) seen: see `receive`.
    private var clockOffset: Int64?

    public func catchUp(_ recorded: RecordedEvent) {
        let identity = identities.learn(recorded.event)
        if kind == .store { store.apply(recorded, catalog: plan.scenario.catalog) }
        if let device = lifecycles.device(countedBy: recorded.event) { _ = chains.noteLifecycle(of: device, now: nil) }
        switch recorded.event {
        case .transactionAdded, .restoreStarted, .deviceRegistered, .receiptRefreshStarted:
            askedBeforeStart.append((recorded.event, identity))
        case .receiptDelivered(let device, let request, _, _, _):
            repliesSeen[.answerReceiptRefresh(device: device, request: request), default: 0] += 1
        case .transactionsCleared(let device):
            repliesSeen[.replayAccountActions(device: device), default: 0] += 1
        case .downloadStarted(let key):
            // (This was once nested under the subscription case below, where it never ran: a
            // downloader that started after the apps never sent the reports of earlier downloads.)
            askedBeforeStart.append((recorded.event, identity))
            starts[key, default: 0] += 1
            repliesSeen[.downloadTick(key, generation: starts[key]!)] = 0
        case .transactionPurchased(let key, _, _, _):
            // Both the start of the purchase's later decisions and one of its store decisions (an
            // outcome in the cases below would never run: this case comes first).
            askedBeforeStart.append((recorded.event, identities.identity(of: key)))
            repliesSeen[.decidePurchase(key), default: 0] += 1
        case .interruptedPurchaseResumed(_, let interrupted):
            repliesSeen[.decidePurchase(interrupted), default: 0] += 1
        case .subscriptionRenewed(_, _, let original, _), .subscriptionExpired(_, let original), .entitlementsRevoked(_, let original):
            repliesSeen[.subscriptionPeriodEnd(original: original.transactionIdentifier, renewals: 0), default: 0] += 1
        case .transactionDeferred(let key), .transactionFailed(let key, _), .askToBuyDeclined(let key):
            repliesSeen[.decidePurchase(key), default: 0] += 1
        case .transactionRestored(let key, let restore, _, _, _):
            if let id = recorded.commandID { restorePieces[.answerRestore(device: key.device, restore: restore), default: []].insert(id) }
        case .restoreFinished(let device, let restore), .restoreFailed(let device, let restore, _):
            if let id = recorded.commandID { restorePieces[.answerRestore(device: device, restore: restore), default: []].insert(id) }
        case .downloadProgressed(let key, _, _), .downloadFinished(let key, _), .downloadFailed(let key, _):
            repliesSeen[.downloadTick(key, generation: starts[key] ?? 0), default: 0] += 1
        default:
            break
        }
    }

    public func resume(now: Int64) -> [Effect] {
        var effects: [Effect] = []
        var startsSoFar: [DownloadKey: Int] = [:]
        for (event, identity) in askedBeforeStart {
            switch (kind, event) {
            case (.store, .transactionAdded(let key, _)):
                guard let identity, let replies = plan.purchaseDecisions[identity] else { continue }
                effects += chains.begin(.decidePurchase(key), now: now, replies: replies, key: key, skipping: repliesSeen[.decidePurchase(key)] ?? 0)
            case (.store, .deviceRegistered(let device, _)):
                guard let replies = plan.accountActions[device] else { continue }
                effects += chains.begin(.replayAccountActions(device: device), now: now, replies: replies, key: nil,
                                        skipping: repliesSeen[.replayAccountActions(device: device)] ?? 0)
            case (.store, .transactionPurchased(let key, let identifier, _, _)):
                let token = TimerToken.subscriptionPeriodEnd(original: identifier, renewals: 0)
                effects += laterDecisions(of: identity, key: key, identifier: identifier, now: now, skipping: repliesSeen[token] ?? 0)
            case (.store, .restoreStarted(let device, let restore, _)):
                let token = TimerToken.answerRestore(device: device, restore: restore)
                guard let replies = plan.restoreAnswers[LiveReplayPlan.RestoreName(device: device, restore: restore)] else { continue }
                effects += chains.begin(token, now: now, replies: replies, key: nil, skipping: restorePieces[token]?.count ?? 0)
            case (.store, .receiptRefreshStarted(let device, let request)):
                let token = TimerToken.answerReceiptRefresh(device: device, request: request)
                guard let replies = plan.receiptAnswers[LiveReplayPlan.ReceiptName(device: device, request: request)] else { continue }
                effects += chains.begin(token, now: now, replies: replies, key: nil, skipping: repliesSeen[token] ?? 0)
            case (.downloader, .downloadStarted(let key)):
                startsSoFar[key, default: 0] += 1
                let generation = startsSoFar[key]!
                guard generation == starts[key], let transaction = identities.identity(of: key.transaction),
                      let runs = plan.downloadReports[LiveReplayPlan.DownloadName(transaction: transaction, index: key.index)],
                      generation <= runs.count else { continue }
                let token = TimerToken.downloadTick(key, generation: generation)
                effects += chains.begin(token, now: now, replies: runs[generation - 1], key: key.transaction, skipping: repliesSeen[token] ?? 0)
            default:
                continue
            }
        }
        askedBeforeStart = []
        return effects
    }

    /// Starts the chain of the store's later decisions about a live purchase (renewals, expiry, refund).
    private func laterDecisions(of identity: TransactionIdentity?, key: TransactionKey, identifier: String, now: Int64, startingAt: Int64? = nil,
                                skipping: Int = 0) -> [Effect] {
        guard let identity, let replies = plan.laterDecisions[identity], let account = store.accountOfDevice[key.device],
              let original = store.history(of: account).purchases.last(where: { $0.transactionIdentifier == identifier }) else { return [] }
        return chains.begin(.subscriptionPeriodEnd(original: identifier, renewals: 0), now: now, startingAt: startingAt, replies: replies, key: nil,
                            original: original, skipping: skipping)
    }

    public func receive(_ recorded: RecordedEvent, now: Int64) -> [Effect] {
        let identity = identities.learn(recorded.event)
        if kind == .store { store.apply(recorded, catalog: plan.scenario.catalog) }
        // A reply's recorded delay counts from the event it answers, not from when this process
        // heard it: a busy machine hears two events at once, and timing both from then would
        // reorder their replies (a restore begun second answered first). The event's moment on
        // this clock is its timestamp plus the smallest offset seen (the least lagged hearing).
        let offset = min(clockOffset ?? .max, now - recorded.timestamp)
        clockOffset = offset
        let happened = recorded.timestamp + offset
        var released: [Effect] = []
        if kind == .store, !heldForPurchases.isEmpty {
            switch recorded.event {
            case .transactionPurchased, .subscriptionRenewed:
                released = heldForPurchases.flatMap { timerFired($0, now: now) }
            default:
                break
            }
        }
        if let device = lifecycles.device(countedBy: recorded.event) {
            released += chains.noteLifecycle(of: device, now: now).map(namingLivePurchases)
        }
        return released + reacting(to: recorded, identity: identity, happened: happened, now: now)
    }

    private func reacting(to recorded: RecordedEvent, identity: TransactionIdentity?, happened: Int64, now: Int64) -> [Effect] {
        switch (kind, recorded.event) {
        case (.store, .transactionPurchased(let key, let identifier, _, _)):
            return laterDecisions(of: identities.identity(of: key), key: key, identifier: identifier, now: now, startingAt: happened)
        case (.store, .transactionAdded(let key, _)):
            guard let identity, let replies = plan.purchaseDecisions[identity] else { return [] }
            return chains.begin(.decidePurchase(key), now: now, startingAt: happened, replies: replies, key: key)
        case (.store, .deviceRegistered(let device, _)):
            guard let replies = plan.accountActions[device] else { return [] }
            return chains.begin(.replayAccountActions(device: device), now: now, startingAt: happened, replies: replies, key: nil)
        case (.store, .restoreStarted(let device, let restore, _)):
            guard let replies = plan.restoreAnswers[LiveReplayPlan.RestoreName(device: device, restore: restore)] else { return [] }
            return chains.begin(.answerRestore(device: device, restore: restore), now: now, startingAt: happened, replies: replies, key: nil)
        case (.store, .receiptRefreshStarted(let device, let request)):
            guard let replies = plan.receiptAnswers[LiveReplayPlan.ReceiptName(device: device, request: request)] else { return [] }
            return chains.begin(.answerReceiptRefresh(device: device, request: request), now: now, startingAt: happened, replies: replies, key: nil)
        case (.downloader, .downloadStarted(let key)):
            guard let transaction = identities.identity(of: key.transaction),
                  let runs = plan.downloadReports[LiveReplayPlan.DownloadName(transaction: transaction, index: key.index)] else { return [] }
            starts[key, default: 0] += 1
            guard starts[key]! <= runs.count else { return [] }
            return chains.begin(.downloadTick(key, generation: starts[key]!), now: now, startingAt: happened, replies: runs[starts[key]! - 1],
                                key: key.transaction)
        default:
            return []
        }
    }

    public func timerFired(_ token: TimerToken, now: Int64) -> [Effect] {
        if token.answersWithPurchases, let next = chains.due(token, now: now),
           let wait = purchaseHold.wait(token, until: namesOnlyLivePurchases(next.body), now: now) {
            if !heldForPurchases.contains(token) { heldForPurchases.append(token) }
            return [.timer(afterNanoseconds: wait, token)]
        }
        heldForPurchases.removeAll { $0 == token }
        return chains.fire(token, now: now).map(namingLivePurchases)
    }

    /// A receipt or restore piece the recorded store sent after the purchases it names waits until
    /// the live log has them too (at most `RecordedOrderHold.maximumNanoseconds`): live, a purchase
    /// may land a little later than recorded, and the piece would name a purchase the live run has
    /// not made yet (a restore would then give its number to the restored copy, R-T3). Released by
    /// the purchase's event, oldest hold first.
    private var purchaseHold = RecordedOrderHold()
    private var heldForPurchases: [TimerToken] = []

    /// The live purchase of the named purchase's identity, if the live store's view has it.
    private func livePurchase(of entry: OriginalTransaction, among purchases: [OriginalTransaction]) -> OriginalTransaction? {
        guard let identity = plan.namedPurchases[entry.transactionIdentifier], let identifier = identities.identifier(of: identity) else { return nil }
        return purchases.last { $0.transactionIdentifier == identifier }
    }

    private func purchases(ofAccountOf device: String) -> [OriginalTransaction] {
        store.accountOfDevice[device].map { Array(store.history(of: $0).purchases) } ?? []
    }

    /// The purchases a receipt piece lists or a restore piece restores, with its device.
    private func namedPurchases(_ body: CommandBody) -> (device: String, purchases: [OriginalTransaction])? {
        switch body {
        case .deliverReceipt(let device, _, _, let entries, _): (device, entries)
        case .completeRestore(let device, _, _, let originals, _): (device, originals)
        default: nil
        }
    }

    /// Every purchase the piece names has a live purchase (those the plan does not know are not waited for).
    private func namesOnlyLivePurchases(_ body: CommandBody) -> Bool {
        guard let (device, named) = namedPurchases(body) else { return true }
        let purchases = purchases(ofAccountOf: device)
        return named.allSatisfy { plan.namedPurchases[$0.transactionIdentifier] == nil || livePurchase(of: $0, among: purchases) != nil }
    }

    /// A recorded receipt or restore piece names the recorded run's purchases: each becomes the
    /// live run's purchase of the same identity (its identifier and date are the live run's), so
    /// the app's receipt and restored transactions name its own purchases; one the live run has no
    /// purchase for stays as recorded. Same entries, same pagination (`firstIndex`, `isLast`).
    private func namingLivePurchases(_ effect: Effect) -> Effect {
        guard case .send(let body) = effect, let (device, named) = namedPurchases(body) else { return effect }
        let purchases = purchases(ofAccountOf: device)
        // The live store's own word on which entries were at an introductory or promotional offer
        // (F-O3, F-O7), as its receipt says.
        let history = store.accountOfDevice[device].map { store.history(of: $0) }
        let live = named.map { entry in
            guard var purchase = livePurchase(of: entry, among: purchases) else { return entry }
            purchase.introductoryOfferPeriod = history?.introductoryOfferPeriods[purchase.transactionIdentifier]
            purchase.promotionalOfferIdentifier = history?.promotionalOfferIdentifiers[purchase.transactionIdentifier]
            return purchase
        }
        switch body {
        case .deliverReceipt(_, let request, let firstIndex, _, let isLast):
            return .send(.deliverReceipt(device: device, request: request, firstIndex: firstIndex, entries: live, isLast: isLast))
        case .completeRestore(_, let restore, let firstIndex, _, let isLast):
            return .send(.completeRestore(device: device, restore: restore, firstIndex: firstIndex, originals: live, isLast: isLast))
        default:
            return effect
        }
    }
}

/// The apps of a live replay's observer process: the recorded users' actions at their recorded
/// offsets (scaled by the pace) from the process's start, and the observers under test (the
/// recorded behaviours, or `--observers`), new at every launch and named as the simulator
/// names them, hearing the live queue's events.
public final class ReplayAppsRole: Role {
    public let name: String
    private let plan: LiveReplayPlan
    private let speed: Double
    private let devices: [String]
    /// Each device's app (the app side every runtime runs): late observers attach where the recording
    /// attached them, and a launch's observers at its planned attachment (`attachAtLaunch`).
    private var apps: [String: InstalledApp] = [:]
    private var nextStep: [String: Int] = [:]
    private var start: Int64 = 0
    private var gaveUpWaiting = false
    /// When an event of these devices was last heard or a user's action last sent.
    private var lastActivity: Int64 = 0
    /// The identities of these devices' transactions, to look their recorded answers up.
    private var identities = TransactionIdentities()
    /// After the recording's last record (scaled) and this long without an event of its
    /// devices, the process stops waiting for devices that stay unsettled (a changed observer
    /// that never finishes), unless one waits for an answer the recording holds.
    public static let settleGraceNanoseconds: Int64 = 3_000_000_000
    /// How long without any event a device may wait for the recorded store or content servers
    /// before the process gives up on it anyway (an answer the live queue refused).
    public static let worldStallNanoseconds: Int64 = 30_000_000_000
    /// Set when the recording's last event is due (plus the lateness of the users' actions):
    /// until then the recorded world may still act on these devices (a subscription that expires
    /// after the apps were done), so no device counts as settled before it.
    private var recordingElapsed = false
    /// The most a user's action was sent after its recorded offset: the live run's lag behind the recording.
    private var stepLateness: Int64 = 0
    /// Each device's next step waiting for the recorded world's commands about it logged in the
    /// live run (distinct command ids not of this process; see `LiveReplayPlan.appSteps`), and the
    /// last one counted.
    private var hold = RecordedOrderHold()
    private var lastWorldCommand: [String: CommandID] = [:]
    /// The earliest step timer set and not yet fired, per device: a step taken early (a held one,
    /// released by an event) must not leave a second chain of timers behind.
    private var stepTimerDue: [String: Int64] = [:]

    public init(name: String, plan: LiveReplayPlan, speed: Double, deviceIndices: [Int], choices: ChoiceSource) {
        self.name = name
        self.plan = plan
        self.speed = speed
        let names = plan.scenario.deviceNames
        devices = deviceIndices.filter { names.indices.contains($0) }.map { names[$0] }
        let code = AppCode.builtIn(plan.scenario.apps.observers, storage: nil)
        for device in devices {
            let queue = PaymentQueue(device: device, catalog: plan.scenario.catalog, ordering: plan.scenario.apps.ordering, choices: choices)
            apps[device] = InstalledApp(queue: queue, code: code, observerChoices: choices, drawsLateSteps: false)
            nextStep[device] = 0
        }
    }

    private func scaled(_ nanoseconds: Int64) -> Int64 { Int64(Double(nanoseconds) / speed) }

    public func catchUp(_ recorded: RecordedEvent) {
        guard let device = recorded.event.device, let app = apps[device] else { return }
        _ = identities.learn(recorded.event)
        noteWorldCommand(recorded, device: device)
        app.queue.catchUp(recorded)
    }

    /// Counts a command of the recorded world (the store, the content servers) about `device`.
    private func noteWorldCommand(_ recorded: RecordedEvent, device: String) {
        guard let command = recorded.commandID, !command.origin.hasPrefix(name + "."), command.origin != name,
              lastWorldCommand[device] != command else { return }
        lastWorldCommand[device] = command
        hold.count(device)
    }

    public func resume(now: Int64) -> [Effect] {
        start = now
        lastActivity = now
        var effects: [Effect] = [.timer(afterNanoseconds: scaled(plan.lengthNanoseconds) + Self.settleGraceNanoseconds, .replaySettleDeadline),
                                 .timer(afterNanoseconds: scaled(plan.lengthNanoseconds), .replayRecordingEnd)]
        for device in devices {
            if let first = plan.steps(of: device).first, let timer = stepTimer(device, due: now + scaled(first.offsetNanoseconds), now: now) {
                effects.append(timer)
            }
        }
        return effects
    }

    public func receive(_ recorded: RecordedEvent, now: Int64) -> [Effect] {
        guard let device = recorded.event.device, let app = apps[device] else { return [] }
        let queue = app.queue
        lastActivity = max(lastActivity, now)
        _ = identities.learn(recorded.event)
        noteWorldCommand(recorded, device: device)
        let held = hold.isHolding(.deviceStep(device: device))
        var effects: [Effect] = stepsBeforeHearing(device, queue: queue, now: now)
        queue.deliver(recorded)
        effects += queue.drainOutbox().map { .send($0) }
        // A restore's transactions reach the observers together, once the next event shows the
        // batch complete (its end, F-C1): steps held for that reply go after the app's reactions
        // to them, as the recording logged them, so not on one of its transactions.
        if held, !recorded.event.isTransactionRestored { effects += takeSteps(of: device, queue: queue, now: now) }
        return effects
    }

    /// Takes the user's next steps at once, before the app hears the reply just counted, when the
    /// recording has nothing of the app between that reply and them: it was logged before each, and
    /// the recorded app's observers drew no command after it (`repliesHeard`). The reply was in
    /// flight as the recorded user acted (a restore's end logged just before a purchase and a quit
    /// was never shown done); live, the app would hear it first and react. An app hears its events
    /// in log order, so the recorded app had not heard the replies logged after that one either
    /// when it took those steps: a burst of steps goes before all of them, up to and with a quit
    /// (never a launch: the relaunch waits, as every step, for the replies recorded before it, which
    /// the quit app did not hear). The steps may go a little before their recorded offsets (at most
    /// the holds' bound): nothing of the app comes between in either log.
    private func stepsBeforeHearing(_ device: String, queue: PaymentQueue, now: Int64) -> [Effect] {
        let steps = plan.steps(of: device)
        let counted = hold.counted(device)
        var index = nextStep[device] ?? 0
        // Bounded like every order hold: a step due later than that would have found the app had heard.
        while steps.indices.contains(index), case .user(let body) = steps[index].step,
              steps[index].repliesHeard < counted, counted <= steps[index].repliesBefore,
              start + scaled(steps[index].offsetNanoseconds) <= now + RecordedOrderHold.maximumNanoseconds {
            // A quit app hears nothing: its relaunch waits for every reply recorded before it.
            if case .launchApp = body { break }
            _ = hold.wait(.deviceStep(device: device), device: device, needs: counted, now: now)
            perform(steps, at: index, queue: queue, device: device)
            index += 1
            if case .terminateApp = body { break }
        }
        guard index != (nextStep[device] ?? 0) else { return [] }
        nextStep[device] = index
        var effects: [Effect] = queue.drainOutbox().map { .send($0) }
        if steps.indices.contains(index), let timer = stepTimer(device, due: start + scaled(steps[index].offsetNanoseconds), now: now) {
            effects.append(timer)
        }
        return effects
    }

    public func timerFired(_ token: TimerToken, now: Int64) -> [Effect] {
        if token == .replaySettleDeadline {
            // Measured from the last event, not from the start: on a loaded machine the store or
            // the queue may lag the recording by seconds, and a device waiting for the store's
            // recorded decision is not an observer that never finishes (it would end the replay
            // before that decision, leaving the observers' reactions to it `missing`).
            let quiet = now - lastActivity
            if quiet >= Self.settleGraceNanoseconds, quiet >= Self.worldStallNanoseconds || !devices.contains(where: awaitsRecordedAnswer) {
                gaveUpWaiting = true
                return []
            }
            return [.timer(afterNanoseconds: max(Self.settleGraceNanoseconds - quiet, 100_000_000), .replaySettleDeadline)]
        }
        if token == .replayRecordingEnd {
            let due = start + scaled(plan.lengthNanoseconds) + stepLateness
            if now >= due {
                recordingElapsed = true
                return []
            }
            return [.timer(afterNanoseconds: due - now, .replayRecordingEnd)]
        }
        guard case .deviceStep(let device) = token, let queue = apps[device]?.queue else { return [] }
        if let due = stepTimerDue[device], due <= now { stepTimerDue[device] = nil }
        return takeSteps(of: device, queue: queue, now: now)
    }

    /// A step timer due at `due`, unless one set earlier fires first (that one sets the next).
    private func stepTimer(_ device: String, due: Int64, now: Int64) -> Effect? {
        if let pending = stepTimerDue[device], pending <= due { return nil }
        stepTimerDue[device] = due
        return .timer(afterNanoseconds: due - now, .deviceStep(device: device))
    }

    /// Takes the device's steps that are due, each once the live run has logged the recorded world's
    /// replies the recording logged before it (at most `RecordedOrderHold.maximumNanoseconds` late):
    /// a relaunch recorded after a restore's end is not made before the live restore ends.
    private func takeSteps(of device: String, queue: PaymentQueue, now: Int64) -> [Effect] {
        lastActivity = max(lastActivity, now)
        let steps = plan.steps(of: device)
        var index = nextStep[device] ?? 0
        var held: Int64?
        // A launch's attachment is due with the launch (the app attaches at once), held only for
        // the replies the recording logged between them.
        while index < steps.count, start + scaled(steps[index].offsetNanoseconds) <= now || steps[index].step == .attachAtLaunch {
            if let wait = hold.wait(.deviceStep(device: device), device: device, needs: steps[index].repliesBefore, now: now) {
                held = wait
                break
            }
            stepLateness = max(stepLateness, now - (start + scaled(steps[index].offsetNanoseconds)))
            perform(steps, at: index, queue: queue, device: device)
            index += 1
        }
        nextStep[device] = index
        var effects: [Effect] = queue.drainOutbox().map { .send($0) }
        let due = held.map { now + $0 } ?? (index < steps.count ? start + scaled(steps[index].offsetNanoseconds) : nil)
        if let due, let timer = stepTimer(device, due: due, now: now) { effects.append(timer) }
        return effects
    }

    /// A user's action with its app-side half, as the simulator's apps do it: a launch attaches
    /// new observers (at the launch's planned attachment if there is one, late ones at their
    /// recorded attachment), a quit drops them.
    private func perform(_ steps: [(offsetNanoseconds: Int64, step: PlannedAppStep, repliesBefore: Int, repliesHeard: Int)], at index: Int,
                         queue: PaymentQueue, device: String) {
        guard let app = apps[device] else { return }
        switch steps[index].step {
        case .user(.launchApp):
            // Held only where the recording logged a reply between the launch and the attachment:
            // otherwise they go together, as the simulator's app sends them.
            let next = index + 1
            app.launch(holdingAttachment: steps.indices.contains(next) && steps[next].step == .attachAtLaunch
                       && steps[next].repliesBefore > steps[index].repliesBefore)
        case .attachAtLaunch:
            app.attachHeldObservers()
        case .user(.terminateApp):
            app.terminate()
        case .user(let body):
            queue.enqueue(body)
        case .attachLate(let name):
            _ = app.attachLate(named: name)
        }
    }

    /// The device waits for the recorded outside world: a purchase the store has still to
    /// decide, a restore it has still to answer, a download the content servers still report.
    private func awaitsRecordedAnswer(_ device: String) -> Bool {
        guard let state = apps[device]?.queue.state else { return false }
        if state.restoresInProgress.keys.contains(where: { plan.restoreAnswers[LiveReplayPlan.RestoreName(device: device, restore: $0)] != nil }) {
            return true
        }
        if awaitsRecordedReceipt(device, state) { return true }
        return state.pending.values.contains { transaction in
            guard let identity = identities.identity(of: transaction.key) else { return false }
            if transaction.transactionState == .purchasing { return plan.purchaseDecisions[identity] != nil }
            return transaction.downloads.indices.contains { index in
                transaction.downloads[index].downloadState == .active
                    && plan.downloadReports[LiveReplayPlan.DownloadName(transaction: identity, index: index)] != nil
            }
        }
    }

    /// A receipt refresh of the device in progress that the recorded store answered.
    private func awaitsRecordedReceipt(_ device: String, _ state: DeviceState) -> Bool {
        state.receiptRefreshesInProgress.keys.contains { plan.receiptAnswers[LiveReplayPlan.ReceiptName(device: device, request: $0)] != nil }
    }

    /// The recording's length has passed (the recorded world is done with these devices), every
    /// recorded action is sent and every device settled (nothing unfinished); or the recording's
    /// length and a grace period have passed.
    public var isSettled: Bool {
        guard recordingElapsed || gaveUpWaiting else { return false }
        return devices.allSatisfy { device in
            guard nextStep[device] ?? 0 >= plan.steps(of: device).count else { return false }
            if gaveUpWaiting { return true }
            guard let state = apps[device]?.queue.state else { return false }
            return state.pending.isEmpty && state.restoresInProgress.isEmpty && !awaitsRecordedReceipt(device, state)
        }
    }
}

private extension Event {
    var isTransactionRestored: Bool { if case .transactionRestored = self { true } else { false } }
}

private extension TimerToken {
    /// The store's answer the timer sends names purchases (a receipt's entries, a restore's originals).
    var answersWithPurchases: Bool {
        switch self {
        case .answerReceiptRefresh, .answerRestore: true
        default: false
        }
    }
}
