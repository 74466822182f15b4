import StoreKitModel

/// How the simulated App Store answers. Probabilities are per purchase; what is left
/// after failure, deferral and cancellation is a plain purchase.
public struct StoreBehavior: Sendable, Hashable, Codable {
    public var failureProbability: Double = 0.05
    public var deferralProbability: Double = 0.05
    public var cancellationProbability: Double = 0.05
    /// Of deferred purchases, how many the parent approves (the rest are declined).
    public var approvalProbability: Double = 0.7
    public var restoreFailureProbability: Double = 0.02
    public var purchaseLatency: LatencyDistribution = .exponential(minimumMilliseconds: 50, meanMilliseconds: 200)
    public var approvalLatency: LatencyDistribution = .uniform(minimumMilliseconds: 1_000, maximumMilliseconds: 5_000)
    public var restoreLatency: LatencyDistribution = .uniform(minimumMilliseconds: 100, maximumMilliseconds: 600)
    /// Chance that the user cancelled an auto-renewable subscription before a period ends, so it
    /// expires instead of renewing (F-U2). nil: 0.2. (Optional keys: logs of earlier runs lack them.)
    public var cancellationAtRenewalProbability: Double?
    /// The most renewals of one subscription, so runs end (F-U1). nil: 3.
    public var maximumRenewals: Int?
    /// `SKTestSession.TimeRate` raw value for catalogs whose `.storekit` file sets no `_timeRate`
    /// (F-U1). nil: 15, a monthly renewal every 30 simulated seconds.
    public var subscriptionTimeRate: Int?
    /// Chance that a purchase is interrupted (the account needs attention: expired card, new terms):
    /// it fails with paymentCancelled (F-I1). nil: 0, and nothing is drawn, so older logs stay as they were.
    public var interruptedPurchaseProbability: Double?
    /// Of interrupted purchases, how many the user fixes and buys after all (a new purchased
    /// transaction, F-I1). nil: 0.8.
    public var interruptionResolvedProbability: Double?
    /// Chance that a renewal cannot be billed, so billing retry begins (F-B1). nil: 0 (nothing drawn),
    /// unless the `.storekit` file sets `_renewalBillingIssuesEnabled`, which fails every renewal's billing.
    public var billingIssueProbability: Double?
    /// Chance that one billing retry succeeds (at the grace period's end, and at the retry period's). nil: 0.5.
    public var billingRecoveryProbability: Double?
    /// A grace period during billing retry, as the `.storekit` file's `_billingGracePeriodEnabled` gives one. nil: off.
    public var billingGracePeriodEnabled: Bool?
    /// SKTestSession's controls at set times of the run (F-T2, topology `storeActions:`). nil: none.
    public var actions: [StoreAction]?
    /// The subscription key promotional offer signatures are checked with (F-O6), which the
    /// simulated apps sign with too. nil: `PromotionalOfferKey.simulator`.
    public var promotionalOfferKey: PromotionalOfferKey?

    public static let defaultCancellationAtRenewalProbability = 0.2
    public static let defaultMaximumRenewals = 3
    public static let defaultSubscriptionTimeRate = 15
    public static let maximumRenewalsLimit = 1_000
    public static let defaultInterruptionResolvedProbability = 0.8
    public static let defaultBillingRecoveryProbability = 0.5
    /// Apple's billing grace period for monthly and longer subscriptions, for weekly ones, and its
    /// billing retry period (F-B1, F-B2), as `.storekit` periods: sped up by the time rate like a
    /// subscription period (SKTestSession.TimeRate.realTime's table: 16 days, 6 days, 60 days).
    public static let billingGracePeriod = "P16D"
    public static let weeklyBillingGracePeriod = "P6D"
    public static let billingRetryPeriod = "P60D"

    /// The grace period for a subscription renewing every `period` (F-B2): 6 days for a weekly one
    /// (a period of 7 days or less), 16 for any other. App Store Connect has also offered 3, 16 or
    /// 28 days since 2023, but a `.storekit` file has only `_billingGracePeriodEnabled`, so the
    /// lengths the test environment gives (and App Store Connect gave before the choice) apply.
    public static func billingGracePeriod(forPeriod period: String?) -> String {
        guard let period, let days = SubscriptionPeriod.days(period), days <= 7 else { return billingGracePeriod }
        return weeklyBillingGracePeriod
    }

    public init() {}

    /// Each probability must lie in 0…1 and the purchase outcomes must not exceed 1 together.
    public func validate() throws(ConfigurationError) {
        let probabilities = [("failureProbability", failureProbability), ("deferralProbability", deferralProbability),
                             ("cancellationProbability", cancellationProbability), ("approvalProbability", approvalProbability),
                             ("restoreFailureProbability", restoreFailureProbability)]
        for (name, value) in probabilities where !(0...1).contains(value) {
            throw ConfigurationError("store.\(name) is \(value); a probability must be between 0 and 1", code: .outOfRange)
        }
        for (name, value) in [("cancellationAtRenewalProbability", cancellationAtRenewalProbability),
                              ("interruptedPurchaseProbability", interruptedPurchaseProbability),
                              ("interruptionResolvedProbability", interruptionResolvedProbability),
                              ("billingIssueProbability", billingIssueProbability),
                              ("billingRecoveryProbability", billingRecoveryProbability)]
        where !(0...1).contains(value ?? 0) {
            throw ConfigurationError("store.\(name) is \(value ?? 0); a probability must be between 0 and 1", code: .outOfRange)
        }
        if let value = maximumRenewals, !(0...Self.maximumRenewalsLimit).contains(value) {
            throw ConfigurationError("store.maximumRenewals is \(value); use 0 to \(Self.maximumRenewalsLimit) renewals per subscription", code: .outOfRange)
        }
        if let value = subscriptionTimeRate, !StoreKitTestSettings.isTimeRate(value) {
            throw ConfigurationError("store.subscriptionTimeRate is \(value); use an SKTestSession.TimeRate raw value (0-6, 10-13, 15, or 1000-1005 for one renewal every 15 minutes to every 2 seconds)", code: .outOfRange)
        }
        let sum = failureProbability + deferralProbability + cancellationProbability
        guard sum <= 1 else {
            throw ConfigurationError("store failure + deferral + cancellation probabilities add up to \(sum); they must not exceed 1", code: .outOfRange)
        }
    }
}

/// A configuration value that cannot work, with what to change.
public struct ConfigurationError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What kind of problem, for code (and tests) that tell problems apart; the message is for people.
    public enum Code: String, Sendable, Hashable, CaseIterable {
        /// A number outside its range (a probability above 1, a count below 0, too many devices).
        case outOfRange
        /// A device the run does not have.
        case unknownDevice
        /// A product the catalog does not have.
        case unknownProduct
        /// A value that is required and absent.
        case missingValue
        /// A file or recorded value that cannot be read.
        case unreadable
        /// A format or version this sksim does not read.
        case unsupportedVersion
        /// A deterministic run given a log that already holds a run.
        case logNotEmpty
        /// Any other value that cannot work.
        case invalidValue
    }

    public var code: Code
    public var message: String
    public init(_ message: String, code: Code = .invalidValue) {
        self.message = message
        self.code = code
    }
    public var description: String { message }
}

/// The simulated App Store: decides purchases, answers restores from each account's
/// history. It owns nothing but what it projects from the events it sees, so a restarted
/// store rebuilds everything from the log (`catchUp`) and takes up what was waiting.
public final class StoreRole: Role {
    public let name: String
    public let catalog: Catalog
    public let behavior: StoreBehavior
    private let choices: ChoiceSource
    // Unchecked exclusivity on the state touched for every event: changed only by this role's own
    // methods, one access at a time (roles never call back into themselves), so the checks only cost time.
    @exclusivity(unchecked) public private(set) var projection = StoreProjection()
    /// Transactions whose decision timer is set, so that a re-attach does not set another.
    @exclusivity(unchecked) private var scheduled: Set<TransactionKey> = []
    @exclusivity(unchecked) private var restoresScheduled: Set<StoreProjection.RestoreRequest> = []
    /// Restored transactions delivered so far per restore in progress; the next piece starts there.
    @exclusivity(unchecked) private var restoredSoFar: [RestoreKey: Int] = [:]
    /// Receipt entries delivered so far per refresh in progress (R-R2); the next piece starts there.
    private var receiptDeliveredSoFar: [StoreProjection.ReceiptRequest: Int] = [:]
    private var receiptRefreshesScheduled: Set<StoreProjection.ReceiptRequest> = []
    /// The devices each subscription's latest renewal is still to be copied to (F-U4), so a restarted
    /// store sends the copies an earlier incarnation did not get into the log.
    @exclusivity(unchecked) private var copiesOwed: [String: [String]] = [:]
    /// Subscriptions whose renewal or expiry was sent and not yet heard back.
    @exclusivity(unchecked) private var periodEndsAwaited: Set<String> = []
    /// The log time of the latest event seen, the clock subscription periods are timed by.
    @exclusivity(unchecked) private var latestEventTimestamp: Int64 = 0
    /// Devices whose next purchase fails, as a `failNext` store action asked (F-T2).
    private var failNext: [String: StoreError] = [:]
    /// Indices of `failNext` actions whose failure the log shows (a failed transaction with the action's
    /// own error), so a restarted store knows which armed ones are still to be used (F-T3).
    private var failNextUsed: Set<Int> = []
    /// The `failNext` actions by the error they fail with, looked up for each failed transaction.
    private lazy var failNextByError: [StoreError: [Int]] = {
        let actions = behavior.actions ?? []
        return Dictionary(grouping: actions.indices.filter { actions[$0].action == .failNext }) { actions[$0].failure }
    }()
    /// Each product's renewal period in simulated time, parsed from its `.storekit` period once
    /// (parsing it at every subscription purchase showed in exploration's profile).
    @exclusivity(unchecked) private var renewalByProduct: [String: Int64?] = [:]
    /// True when the log holds a command of an earlier incarnation of this store (origins are
    /// `<name>.<incarnation or pid>` in both runtimes): then this start is a restart.
    private var isRestart = false

    private struct RestoreKey: Hashable {
        var device: String
        var number: UInt64
    }

    /// Most restored transactions in one command, so a command stays small whatever the
    /// account's history (the queue takes pieces in order).
    public static let restorePieceSize = QueueProjection.maximumRestorePiece

    public init(name: String = "store", catalog: Catalog, behavior: StoreBehavior, choices: ChoiceSource) {
        self.name = name
        self.catalog = catalog
        self.behavior = behavior
        self.choices = choices
    }

    public func catchUp(_ recorded: RecordedEvent) {
        track(recorded)
        if !isRestart, let origin = recorded.commandID?.origin, origin.hasPrefix(name), origin.dropFirst(name.count).first == "." {
            isRestart = true
        }
    }

    /// Takes up every decision and restore that was waiting when the previous store went away.
    public func resume(now: Int64) -> [Effect] {
        var effects: [Effect] = []
        for key in projection.awaitingDecision.keys.sorted() {
            if projection.deferred.contains(key) {
                effects.append(.timer(afterNanoseconds: behavior.approvalLatency.sampleNanoseconds(choices), .approveDeferred(key)))
            } else {
                scheduleDecision(key, into: &effects)
            }
        }
        for identifier in projection.subscriptions.keys.sorted() {
            effects += projection.subscriptions[identifier]?.billingRetryStart == nil ? schedulePeriodEnd(identifier) : scheduleBillingRetry(identifier)
        }
        // A first start sets every action (one already due runs now: a live store starts after the
        // queue has logged a little); a restarted store takes up those still ahead of the log's end.
        for (index, action) in (behavior.actions ?? []).enumerated() where !isRestart || action.atNanoseconds >= latestEventTimestamp {
            effects.append(.timer(afterNanoseconds: max(0, action.atNanoseconds - latestEventTimestamp), .storeAction(index: index)))
        }
        if isRestart { rearmFailNext() }
        // Copies of a renewal the earlier store did not get into the log (F-U4).
        for identifier in copiesOwed.keys.sorted() {
            guard let original = projection.subscriptions[identifier]?.original else { continue }
            effects += (copiesOwed[identifier] ?? []).map { .send(.renewSubscription(device: $0, original: original)) }
        }
        for request in projection.receiptRefreshesAwaiting {
            let done = receiptDeliveredSoFar[request] ?? 0
            effects += done > 0 ? nextReceiptPiece(request, from: done) : scheduleReceiptRefresh(request)
        }
        for request in projection.restoresAwaiting {
            let done = restoredSoFar[RestoreKey(device: request.device, number: request.number)] ?? 0
            if done > 0 {
                effects += nextRestorePiece(request, from: done)
            } else {
                effects += scheduleRestore(request)
            }
        }
        return effects
    }

    /// A restarted store takes up what `failNext` actions an earlier incarnation armed (F-T3): the log holds
    /// no event for arming, but the recorded scenario holds the actions and the log their use. Per device,
    /// the last action whose time the log has passed is armed, unless a failed transaction used it.
    private func rearmFailNext() {
        let actions = behavior.actions ?? []
        var last: [String: Int] = [:]
        for index in actions.indices.sorted(by: { (actions[$0].atNanoseconds, $0) < (actions[$1].atNanoseconds, $1) })
        where actions[index].action == .failNext && actions[index].atNanoseconds < latestEventTimestamp {
            last[actions[index].device] = index
        }
        for (device, index) in last where !failNextUsed.contains(index) { failNext[device] = actions[index].failure }
    }

    private func track(_ recorded: RecordedEvent) {
        latestEventTimestamp = max(latestEventTimestamp, recorded.timestamp)
        projection.apply(recorded, catalog: catalog)
        switch recorded.event {
        case .subscriptionRenewed(let key, _, let original, _):
            let identifier = original.transactionIdentifier
            if let subscription = projection.subscriptions[identifier], key.device == subscription.device {
                copiesOwed[identifier] = copyTargets(subscription)
            } else {
                copiesOwed[identifier]?.removeAll { $0 == key.device }
            }
            if copiesOwed[identifier]?.isEmpty == true { copiesOwed[identifier] = nil }
        case .subscriptionExpired(_, let original), .entitlementsRevoked(_, let original):
            copiesOwed[original.transactionIdentifier] = nil
        case .transactionFailed(let key, let error) where !failNextByError.isEmpty:
            for index in failNextByError[error] ?? [] where behavior.actions?[index].device == key.device { failNextUsed.insert(index) }
        case .transactionRestored(let key, let restore, _, _, _):
            restoredSoFar[RestoreKey(device: key.device, number: restore), default: 0] += 1
        case .restoreFinished(let device, let number), .restoreFailed(let device, let number, _):
            restoredSoFar[RestoreKey(device: device, number: number)] = nil
        case .receiptDelivered(let device, let number, _, let entries, let isLast):
            let request = StoreProjection.ReceiptRequest(device: device, number: number)
            receiptDeliveredSoFar[request] = isLast ? nil : (receiptDeliveredSoFar[request] ?? 0) + entries.count
            if isLast { receiptRefreshesScheduled.remove(request) }
        default:
            break
        }
    }

    public func receive(_ recorded: RecordedEvent, now: Int64) -> [Effect] {
        var effects: [Effect] = []
        receive(recorded, now: now, into: &effects)
        return effects
    }

    // The frequent reactions are written straight into the runtime's buffer (no array of their own);
    // the rare ones (`reaction(to:successor:)`) still return arrays.
    public func receive(_ recorded: RecordedEvent, now: Int64, into effects: inout [Effect]) {
        // Most events (the apps' actions, download progress: about four in ten) mean nothing to
        // the store: only its clock moves. Told apart by their case alone, without copying them
        // out through the several switches below.
        if Self.meansNothingToTheStore(recorded.event) {
            latestEventTimestamp = max(latestEventTimestamp, recorded.timestamp)
            return
        }
        // A subscription that waited for this one to end starts with its end (F-U3).
        let successor: String? = switch recorded.event {
        case .subscriptionExpired(_, let original), .entitlementsRevoked(_, let original):
            projection.subscriptions[original.transactionIdentifier]?.replacedBy
        default: nil
        }
        track(recorded)
        switch recorded.event {
        case .transactionAdded(let key, _):
            scheduleDecision(key, into: &effects)
        case .observerAttached(let device, _):
            // The queue syncs again once an observer is attached (R-Q3): take up what waited.
            for key in projection.awaitingDecision.keys.filter({ $0.device == device && !projection.deferred.contains($0) }).sorted() {
                scheduleDecision(key, into: &effects)
            }
            for request in restoresWaiting(device) { effects.append(contentsOf: scheduleRestore(request)) }
        default:
            let produced = reaction(to: recorded, successor: successor)
            if !produced.isEmpty { effects.append(contentsOf: produced) }
        }
    }

    /// What the store does on the less frequent events, after `track`.
    private func reaction(to recorded: RecordedEvent, successor: String?) -> [Effect] {
        switch recorded.event {
        case .interruptedPurchaseResumed(let key, _):
            // Purchased in the same unit: there is nothing to decide (F-I1).
            scheduled.insert(key)
            return []
        case .receiptRefreshStarted(let device, let number):
            return scheduleReceiptRefresh(StoreProjection.ReceiptRequest(device: device, number: number))
        case .receiptDelivered(let device, let number, _, _, let isLast):
            // The previous piece has landed: send the next (R-R2).
            let request = StoreProjection.ReceiptRequest(device: device, number: number)
            guard !isLast, let done = receiptDeliveredSoFar[request] else { return [] }
            return nextReceiptPiece(request, from: done)
        case .restoreStarted(let device, let number, let username):
            return scheduleRestore(StoreProjection.RestoreRequest(device: device, number: number, applicationUsername: username))
        case .transactionRestored(let key, let restore, _, _, _):
            // The previous piece has landed when its last transaction arrives: send the next.
            let done = restoredSoFar[RestoreKey(device: key.device, number: restore)] ?? 0
            guard done % Self.restorePieceSize == 0,
                  let request = projection.restoresAwaiting.first(where: { $0.device == key.device && $0.number == restore }),
                  done < restorableCount(request) else { return [] }
            return nextRestorePiece(request, from: done)
        case .transactionPurchased(let key, let identifier, _, _):
            scheduled.remove(key)
            // A charged purchase of an auto-renewable subscription starts one (the projection has it now).
            guard let subscription = projection.subscriptions[identifier], subscription.renewals == 0 else { return [] }
            // A downgrade (or a crossgrade to another period) waits for the current one's period end (F-U3).
            guard subscription.startsAfter == nil else { return [] }
            return replaceInGroup(subscription) + schedulePeriodEnd(identifier)
        case .transactionFailed(let key, _), .askToBuyDeclined(let key):
            scheduled.remove(key)
            return []
        case .subscriptionRenewed(let key, _, let original, _):
            // A copy on another device of the account (below) changes nothing of the subscription.
            guard let subscription = projection.subscriptions[original.transactionIdentifier], key.device == subscription.device else { return [] }
            periodEndsAwaited.remove(original.transactionIdentifier)
            return schedulePeriodEnd(original.transactionIdentifier) + renewalCopies(subscription)
        case .subscriptionExpired(_, let original), .entitlementsRevoked(_, let original):
            periodEndsAwaited.remove(original.transactionIdentifier)
            return successor.map { schedulePeriodEnd($0) } ?? []
        case .subscriptionBillingRetry(_, let original, _):
            periodEndsAwaited.remove(original.transactionIdentifier)
            return scheduleBillingRetry(original.transactionIdentifier)
        case .restoreFinished(let device, let number), .restoreFailed(let device, let number, _):
            restoresScheduled = restoresScheduled.filter { !($0.device == device && $0.number == number) }
            return []
        default:
            return []
        }
    }

    /// Events that neither the store's projection, nor `track`, nor `receive` acts on.
    private static func meansNothingToTheStore(_ event: Event) -> Bool {
        switch event {
        case .appActionRecorded, .downloadStarted, .downloadProgressed, .downloadPaused, .downloadResumed, .downloadFinished,
             .downloadFailed, .downloadCancelled, .appLaunched:
            true
        default:
            false
        }
    }

    /// One active subscription per group (F-U3): an upgrade (a higher level), a crossgrade of the same
    /// period, or a change between products without levels replaces the account's others in its group
    /// at once (a downgrade still waiting included); a downgrade or a crossgrade to another period
    /// waits instead (`Subscription.startsAfter`).
    private func replaceInGroup(_ subscription: Subscription) -> [Effect] {
        guard let group = subscription.group else { return [] }
        return projection.otherSubscriptions(account: subscription.account, group: group, than: subscription.original.transactionIdentifier)
            .map { .send(.expireSubscription(device: $0.device, original: $0.original)) }
    }

    /// The renewal period of a subscription's product in simulated time: the `.storekit` file's
    /// `_timeRate` if it sets one, else the scenario's (F-U1).
    public func renewalNanoseconds(_ productIdentifier: String) -> Int64? {
        if let known = renewalByProduct[productIdentifier] { return known }
        let renewal = catalog.product(productIdentifier)?.subscriptionPeriod.flatMap { periodNanoseconds($0) }
        renewalByProduct[productIdentifier] = .some(renewal)
        return renewal
    }

    /// The run's time rate: the `.storekit` file's `_timeRate` if it sets one, else the scenario's (F-U1).
    private var timeRate: Int {
        catalog.testSettings.timeRate ?? behavior.subscriptionTimeRate ?? StoreBehavior.defaultSubscriptionTimeRate
    }

    /// A `.storekit` period (`P16D`) in simulated time at the run's time rate (F-U1).
    public func periodNanoseconds(_ period: String) -> Int64? {
        SubscriptionPeriod.renewalNanoseconds(period, timeRate: timeRate)
    }

    /// The length of a subscription's current period: at its introductory or promotional offer, the
    /// offer's period (a free trial's or a pay-up-front offer's whole duration, one pay-as-you-go
    /// period; F-O2, F-O5), else the product's.
    public func currentPeriodNanoseconds(_ subscription: Subscription) -> Int64? {
        guard let offer = subscription.currentOfferTerms else {
            return renewalNanoseconds(subscription.productIdentifier)
        }
        return periodNanoseconds(offer.subscriptionPeriod).map { $0 &* Int64(offer.periodMultiple) }
    }

    /// Times the period end in log time (nanoseconds since the run started): a live role's `now`
    /// is its own monotonic clock, so the delay counts from the latest event's timestamp.
    private func schedulePeriodEnd(_ identifier: String) -> [Effect] {
        guard let subscription = projection.subscriptions[identifier], subscription.startsAfter == nil,
              let period = currentPeriodNanoseconds(subscription) else { return [] }
        let delay = max(0, subscription.periodStart &+ period &- latestEventTimestamp)
        return [.timer(afterNanoseconds: delay, .subscriptionPeriodEnd(original: identifier, renewals: subscription.renewals))]
    }

    /// A renewal reaches every device signed in to the account, not only the one that bought the
    /// subscription (F-U4): the same renewal, a new transaction on each, whether or not that device
    /// restored it, delivered when its app has an observer (R-Q3, R-Q4).
    private func renewalCopies(_ subscription: Subscription) -> [Effect] {
        copyTargets(subscription).map { .send(.renewSubscription(device: $0, original: subscription.original)) }
    }

    /// The account's devices other than the buying one, in registration order.
    private func copyTargets(_ subscription: Subscription) -> [String] {
        guard let account = projection.accountOfDevice[subscription.device] else { return [] }
        return (projection.devicesOfAccount[account] ?? []).filter { $0 != subscription.device }
    }

    private func restoresWaiting(_ device: String) -> [StoreProjection.RestoreRequest] {
        projection.restoresAwaiting.filter { $0.device == device }
    }

    private func scheduleDecision(_ key: TransactionKey, into effects: inout [Effect]) {
        // A device that may not pay has its payments failed by the queue itself (R-Q1).
        // An empty set is asked nothing: a lookup hashes the device's name even there.
        guard projection.isSyncing(key.device), projection.paymentsNotAllowed.isEmpty || !projection.paymentsNotAllowed.contains(key.device),
              scheduled.insert(key).inserted else { return }
        effects.append(.timer(afterNanoseconds: behavior.purchaseLatency.sampleNanoseconds(choices), .decidePurchase(key)))
    }

    private func scheduleRestore(_ request: StoreProjection.RestoreRequest) -> [Effect] {
        guard projection.isSyncing(request.device), !restoresScheduled.contains(request) else { return [] }
        restoresScheduled.insert(request)
        return [.timer(afterNanoseconds: behavior.restoreLatency.sampleNanoseconds(choices),
                       .answerRestore(device: request.device, restore: request.number))]
    }

    private func restorable(_ request: StoreProjection.RestoreRequest) -> [OriginalTransaction] {
        let account = projection.account(device: request.device, applicationUsername: request.applicationUsername)
        return account.map { projection.history(of: $0).restorable } ?? []
    }

    private func restorableCount(_ request: StoreProjection.RestoreRequest) -> Int { restorable(request).count }

    /// The restorable history of the account a restore is for, from `start`, one piece.
    private func nextRestorePiece(_ request: StoreProjection.RestoreRequest, from start: Int) -> [Effect] {
        let originals = restorable(request)
        let first = min(start, originals.count)
        let end = min(originals.count, first + Self.restorePieceSize)
        return [.send(.completeRestore(device: request.device, restore: request.number, firstIndex: first,
                                       originals: Array(originals[first..<end]), isLast: end == originals.count))]
    }

    private func scheduleReceiptRefresh(_ request: StoreProjection.ReceiptRequest) -> [Effect] {
        guard receiptRefreshesScheduled.insert(request).inserted else { return [] }
        return [.timer(afterNanoseconds: behavior.restoreLatency.sampleNanoseconds(choices),
                       .answerReceiptRefresh(device: request.device, request: request.number))]
    }

    /// The receipt of the device's account from `start`, one piece (R-R2): bounded like a restore's.
    private func nextReceiptPiece(_ request: StoreProjection.ReceiptRequest, from start: Int) -> [Effect] {
        let entries = projection.accountOfDevice[request.device].map { projection.receipt(of: $0).purchases } ?? []
        let first = min(start, entries.count)
        let end = min(entries.count, first + Self.restorePieceSize)
        return [.send(.deliverReceipt(device: request.device, request: request.number, firstIndex: first,
                                      entries: Array(entries[first..<end]), isLast: end == entries.count))]
    }

    public func timerFired(_ token: TimerToken, now: Int64) -> [Effect] {
        var effects: [Effect] = []
        timerFired(token, now: now, into: &effects)
        return effects
    }

    public func timerFired(_ token: TimerToken, now: Int64, into effects: inout [Effect]) {
        guard case .decidePurchase(let key) = token else {
            let produced = reaction(to: token)
            if !produced.isEmpty { effects.append(contentsOf: produced) }
            return
        }
        decide(key, into: &effects)
    }

    /// The store's decision on a purchase whose latency has passed (the most frequent timer).
    private func decide(_ key: TransactionKey, into effects: inout [Effect]) {
        guard let payment = projection.awaitingDecision[key] else { return }
        guard projection.isSyncing(key.device) else {
            // The app went away meanwhile; decide when an observer is back (R-Q3).
            scheduled.remove(key)
            return
        }
        // A discount the store cannot accept fails the payment before anything else, as Apple checks
        // the offer before the payment sheet (F-O6); decided from the log alone, so it draws nothing.
        if payment.discount != nil, let refusal = projection.promotionalOfferRefusal(payment, device: key.device, catalog: catalog,
                                                                                      key: behavior.promotionalOfferKey ?? .simulator) {
            return effects.append(.send(.decidePurchase(key, .failed(refusal))))
        }
        if !failNext.isEmpty, let failure = failNext.removeValue(forKey: key.device) { return effects.append(.send(.decidePurchase(key, .failed(failure)))) }
        // The .storekit file's test settings come first, as in Xcode: failing transactions (F-S2),
        // then Ask to Buy (F-S1). They are not chances, so they draw nothing.
        if let failure = catalog.testSettings.purchaseFailure {
            return effects.append(.send(.decidePurchase(key, .failed(failure))))
        }
        if isInterrupted() { return effects.append(contentsOf: interrupt(key, payment)) }
        if catalog.testSettings.askToBuyEnabled == true || payment.simulatesAskToBuyInSandbox {
            effects.append(.send(.decidePurchase(key, .deferred)))
            effects.append(.timer(afterNanoseconds: behavior.approvalLatency.sampleNanoseconds(choices), .approveDeferred(key)))
            return
        }
        let draw = choices.unit(.storeOutcome)
        // The zero draw is a plain purchase: the simplest run has no failures.
        let purchaseShare = 1 - behavior.failureProbability - behavior.cancellationProbability - behavior.deferralProbability
        if draw < purchaseShare {
            return effects.append(.send(.decidePurchase(key, .purchased(charged: isCharged(key, payment)))))
        }
        if draw < purchaseShare + behavior.deferralProbability {
            effects.append(.send(.decidePurchase(key, .deferred)))
            effects.append(.timer(afterNanoseconds: behavior.approvalLatency.sampleNanoseconds(choices), .approveDeferred(key)))
            return
        }
        if draw < purchaseShare + behavior.deferralProbability + behavior.cancellationProbability {
            return effects.append(.send(.decidePurchase(key, .failed(StoreError(.paymentCancelled, "the user cancelled the payment sheet")))))
        }
        // An App Store that cannot be reached fails the payment with SKError.unknown (F-E1);
        // cloudServiceNetworkConnectionFailed is Apple Music's, not the App Store's.
        effects.append(.send(.decidePurchase(key, .failed(StoreError(.unknown, "the simulated App Store could not be reached")))))
    }

    /// What the store does on its other timers.
    private func reaction(to token: TimerToken) -> [Effect] {
        switch token {
        case .answerReceiptRefresh(let device, let number):
            let request = StoreProjection.ReceiptRequest(device: device, number: number)
            guard projection.receiptRefreshesAwaiting.contains(request) else { return [] }
            return nextReceiptPiece(request, from: 0)
        case .approveDeferred(let key):
            guard let payment = projection.awaitingDecision[key] else { return [] }
            if choices.chance(.approval, behavior.approvalProbability) {
                return [.send(.decidePurchase(key, .purchased(charged: isCharged(key, payment))))]
            }
            // A declined Ask to Buy request makes no callback; the transaction stays deferred (F-A1).
            return [.send(.decidePurchase(key, .declined))]
        case .answerRestore(let device, let number):
            guard let request = projection.restoresAwaiting.first(where: { $0.device == device && $0.number == number }) else { return [] }
            if choices.chance(.restoreOutcome, behavior.restoreFailureProbability) {
                return [.send(.failRestore(device: device, restore: number, error: StoreError(.unknown, "the simulated App Store could not verify the account")))]
            }
            return nextRestorePiece(request, from: 0)
        case .subscriptionPeriodEnd(let identifier, let renewals):
            // A timer of an earlier period (the subscription was renewed by a test since) or of one
            // that ended does nothing; one whose command is on its way is not sent again.
            guard let subscription = projection.subscriptions[identifier], subscription.renewals == renewals,
                  subscription.billingRetryStart == nil, periodEndsAwaited.insert(identifier).inserted else { return [] }
            // A downgrade or crossgrade bought meanwhile takes over at this period end (F-U3).
            if subscription.replacedBy != nil {
                return [.send(.expireSubscription(device: subscription.device, original: subscription.original))]
            }
            let limit = behavior.maximumRenewals ?? StoreBehavior.defaultMaximumRenewals
            let cancellation = behavior.cancellationAtRenewalProbability ?? StoreBehavior.defaultCancellationAtRenewalProbability
            if renewals >= limit || choices.chance(.cancellationAtRenewal, cancellation) {
                return [.send(.expireSubscription(device: subscription.device, original: subscription.original))]
            }
            if hasBillingIssue() {
                let grace = isGracePeriodEnabled ? periodNanoseconds(StoreBehavior.billingGracePeriod(forPeriod: subscription.period)) ?? 0 : 0
                return [.send(.beginBillingRetry(device: subscription.device, original: subscription.original, gracePeriodNanoseconds: grace))]
            }
            return [.send(.renewSubscription(device: subscription.device, original: subscription.original))]
        case .billingRetry(let identifier, let final):
            guard let subscription = projection.subscriptions[identifier], let start = subscription.billingRetryStart,
                  periodEndsAwaited.insert(identifier).inserted else { return [] }
            if choices.chance(.billingRecovery, behavior.billingRecoveryProbability ?? StoreBehavior.defaultBillingRecoveryProbability) {
                return [.send(.renewSubscription(device: subscription.device, original: subscription.original))]
            }
            if final { return [.send(.expireSubscription(device: subscription.device, original: subscription.original))] }
            // Unbilled within the grace period: the user loses access at its end, and billing is retried until the retry period ends.
            periodEndsAwaited.remove(identifier)
            return [.timer(afterNanoseconds: max(0, retryEnd(start) &- Self.graceRetryTime(subscription, start)), .billingRetry(original: identifier, final: true))]
        case .storeAction(let index):
            guard let actions = behavior.actions, actions.indices.contains(index) else { return [] }
            return perform(actions[index])
        case .decidePurchase, .downloadTick, .deviceStep, .replaySettleDeadline, .replayRecordingEnd, .replayAccountActions, .appWork:
            return []
        }
    }

    /// A scenario's store action (F-T2): the commands SKTestSession's control sends. One that finds
    /// nothing to act on (no deferred request, no such subscription) does nothing.
    private func perform(_ action: StoreAction) -> [Effect] {
        let device = action.device
        let subscription = projection.subscriptions.values
            .filter { $0.device == device && $0.productIdentifier == action.product }
            .min { $0.original.transactionIdentifier < $1.original.transactionIdentifier }
        switch action.action {
        case .approve, .decline:
            return projection.awaitingDecision.keys.filter { $0.device == device && projection.deferred.contains($0) }.sorted().map { key in
                action.action == .decline ? .send(.decidePurchase(key, .declined))
                    : .send(.decidePurchase(key, .purchased(charged: isCharged(key, projection.awaitingDecision[key]!))))
            }
        case .refund:
            let account = projection.account(device: device, applicationUsername: nil)
            let latest = account.flatMap { projection.history(of: $0).purchases.last { $0.payment.productIdentifier == action.product } }
            return (subscription?.original ?? latest).map { [.send(.refundPurchase(device: device, original: $0))] } ?? []
        case .expire:
            return subscription.map { [.send(.expireSubscription(device: device, original: $0.original))] } ?? []
        case .forceRenew:
            return subscription.map { [.send(.renewSubscription(device: device, original: $0.original))] } ?? []
        case .failNext:
            failNext[device] = action.failure
            return []
        case .clearTransactions:
            return [.send(.clearTransactions(device: device))]
        }
    }

    /// Whether a renewal cannot be billed (F-B1): always when the `.storekit` file enables renewal
    /// billing issues, else a recorded choice, drawn only when the scenario sets a chance.
    private func hasBillingIssue() -> Bool {
        if catalog.testSettings.renewalBillingIssuesEnabled == true { return true }
        guard let probability = behavior.billingIssueProbability, probability > 0 else { return false }
        return choices.chance(.billingIssue, probability)
    }

    /// The retry within the grace period: halfway through it, so a recovery lands inside it.
    private static func graceRetryTime(_ subscription: Subscription, _ start: Int64) -> Int64 {
        start &+ ((subscription.gracePeriodEnd ?? start) &- start) / 2
    }

    private var isGracePeriodEnabled: Bool {
        catalog.testSettings.billingGracePeriodEnabled ?? behavior.billingGracePeriodEnabled ?? false
    }

    /// Times the next billing retry from the log (F-B1): halfway through the grace period if that is
    /// still ahead (a recovery within it keeps the renewal date), else the retry period's end, where an
    /// unbilled subscription expires.
    private func scheduleBillingRetry(_ identifier: String) -> [Effect] {
        guard let subscription = projection.subscriptions[identifier], let start = subscription.billingRetryStart else { return [] }
        let graceRetry = Self.graceRetryTime(subscription, start)
        if subscription.gracePeriodEnd != nil, graceRetry > latestEventTimestamp {
            return [.timer(afterNanoseconds: graceRetry &- latestEventTimestamp, .billingRetry(original: identifier, final: false))]
        }
        return [.timer(afterNanoseconds: max(0, retryEnd(start) &- latestEventTimestamp), .billingRetry(original: identifier, final: true))]
    }

    /// The end of the billing retry period begun at `start`, where an unbilled subscription expires (F-B1).
    /// At a fixed rate (1000 to 1005) it is twice the renewal interval, as SKTestSession.TimeRate's
    /// tables give it (`oneRenewalEveryTwoSeconds`: grace period 2 s, billing retry period 4 s; F-B2).
    private func retryEnd(_ start: Int64) -> Int64 {
        if let fixed = StoreKitTestSettings.fixedRenewalSeconds(timeRate: timeRate) {
            return start &+ Int64(2 * fixed * 1e9)
        }
        return start &+ (periodNanoseconds(StoreBehavior.billingRetryPeriod) ?? 0)
    }

    /// Whether this purchase is interrupted (F-I1): always when the `.storekit` file enables
    /// interrupted purchases, else a recorded choice, drawn only when the scenario sets a chance.
    private func isInterrupted() -> Bool {
        if catalog.testSettings.interruptedPurchasesEnabled == true { return true }
        guard let probability = behavior.interruptedPurchaseProbability, probability > 0 else { return false }
        return choices.chance(.interruptedPurchase, probability)
    }

    /// An interrupted purchase fails with paymentCancelled while the user is sent to fix the account;
    /// if they do and buy after all, a new purchased transaction follows (F-I1). The app is in the
    /// background meanwhile and hears both when it returns, so both commands go now, in order.
    private func interrupt(_ key: TransactionKey, _ payment: Payment) -> [Effect] {
        let failure = StoreError(.paymentCancelled, "the purchase was interrupted: the user must act on the account (update the payment method or accept new terms) outside the app (F-I1)")
        var effects: [Effect] = [.send(.decidePurchase(key, .failed(failure)))]
        let resolved = behavior.interruptionResolvedProbability ?? StoreBehavior.defaultInterruptionResolvedProbability
        if choices.chance(.interruptionResolved, resolved) {
            // The purchase made after fixing the account is at the regular price: the signed discount
            // was for the payment sheet that was interrupted (F-O5).
            effects.append(.send(.resumeInterruptedPurchase(device: key.device, interrupted: key, payment: payment.withoutDiscount,
                                                            charged: isCharged(key, payment))))
        }
        return effects
    }

    /// Buying again a non-consumable the account owns, or an auto-renewable subscription it
    /// pays for now, is not charged again (R-R4).
    private func isCharged(_ key: TransactionKey, _ payment: Payment) -> Bool {
        // The product's kind is read in place (`catalog.product` copies all of it); a consumable (most
        // purchases) is always charged, so its account is not looked up.
        guard let index = catalog.index(of: payment.productIdentifier) else { return true }
        switch catalog.products[index].kind {
        case .consumable, .nonRenewingSubscription: return true
        case .nonConsumable, .autoRenewableSubscription:
            return Self.isCharged(catalog.products[index], device: key.device, applicationUsername: payment.applicationUsername, in: &projection)
        }
    }

    /// Through an exclusive (inout) access: a method called on the stored projection copies all of
    /// it (retaining every field) for the call.
    private static func isCharged(_ product: Product, device: String, applicationUsername: String?,
                                  in projection: inout StoreProjection) -> Bool {
        guard let account = projection.account(device: device, applicationUsername: applicationUsername) else { return true }
        return !projection.alreadyHolds(product, account: account)
    }
}
