import StoreKitModel

/// How the simulated App Store answers. Probabilities are per purchase; what is left
/// after failure, deferral and cancellation is a plain purchase.
public struct StoreBehavior: Sendable, Hashable {
    public var failureProbability: Double = 0.05
    public var deferralProbability: Double = 0.05
    public var cancellationProbability: Double = 0.05
    /// Of deferred purchases, how many the parent approves (the rest are declined).
    public var approvalProbability: Double = 0.7
    public var restoreFailureProbability: Double = 0.02
    public var purchaseLatency: LatencyDistribution = .exponential(minimumMilliseconds: 50, meanMilliseconds: 200)
    public var approvalLatency: LatencyDistribution = .uniform(minimumMilliseconds: 1_000, maximumMilliseconds: 5_000)
    public var restoreLatency: LatencyDistribution = .uniform(minimumMilliseconds: 100, maximumMilliseconds: 600)

    public init() {}

    /// Each probability must lie in 0…1 and the purchase outcomes must not exceed 1 together.
    public func validate() throws(ConfigurationError) {
        let probabilities = [("failureProbability", failureProbability), ("deferralProbability", deferralProbability),
                             ("cancellationProbability", cancellationProbability), ("approvalProbability", approvalProbability),
                             ("restoreFailureProbability", restoreFailureProbability)]
        for (name, value) in probabilities where !(0...1).contains(value) {
            throw ConfigurationError("store.\(name) is \(value); a probability must be between 0 and 1")
        }
        let sum = failureProbability + deferralProbability + cancellationProbability
        guard sum <= 1 else {
            throw ConfigurationError("store failure + deferral + cancellation probabilities add up to \(sum); they must not exceed 1")
        }
    }
}

/// A configuration value that cannot work, with what to change.
public struct ConfigurationError: Error, Sendable, Hashable, CustomStringConvertible {
    public var message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}

/// The simulated App Store: decides purchases, answers restores from each account's
/// history. It owns nothing but what it projects from the events it sees.
public final class StoreRole: Role {
    public let name: String
    public let catalog: Catalog
    public let behavior: StoreBehavior
    private var random: SeededRandom
    public private(set) var projection = StoreProjection()
    /// Transactions whose decision timer is set, so that a re-attach does not set another.
    private var scheduled: Set<TransactionKey> = []
    private var restoresScheduled: Set<StoreProjection.RestoreRequest> = []

    public init(name: String = "store", catalog: Catalog, behavior: StoreBehavior, seed: UInt64) {
        self.name = name
        self.catalog = catalog
        self.behavior = behavior
        self.random = SeededRandom(seed: seed, stream: name)
    }

    public func receive(_ recorded: RecordedEvent, now: Int64) -> [Effect] {
        projection.apply(recorded, catalog: catalog)
        switch recorded.event {
        case .transactionAdded(let key, _):
            return scheduleDecision(key)
        case .observerAttached(let device, _):
            // The queue syncs again once an observer is attached (R-Q3): take up what waited.
            return projection.awaitingDecision.keys.filter { $0.device == device && !projection.deferred.contains($0) }
                .sorted().flatMap { scheduleDecision($0) }
                + restoresWaiting(device).flatMap { scheduleRestore($0) }
        case .restoreStarted(let device, let number, let username):
            return scheduleRestore(StoreProjection.RestoreRequest(device: device, number: number, applicationUsername: username))
        case .transactionPurchased(let key, _, _, _), .transactionFailed(let key, _):
            scheduled.remove(key)
            return []
        case .restoreFinished(let device, let number), .restoreFailed(let device, let number, _):
            restoresScheduled = restoresScheduled.filter { !($0.device == device && $0.number == number) }
            return []
        default:
            return []
        }
    }

    private func restoresWaiting(_ device: String) -> [StoreProjection.RestoreRequest] {
        projection.restoresAwaiting.filter { $0.device == device }
    }

    private func scheduleDecision(_ key: TransactionKey) -> [Effect] {
        guard projection.isSyncing(key.device), !scheduled.contains(key) else { return [] }
        scheduled.insert(key)
        return [.timer(afterNanoseconds: behavior.purchaseLatency.sampleNanoseconds(&random), .decidePurchase(key))]
    }

    private func scheduleRestore(_ request: StoreProjection.RestoreRequest) -> [Effect] {
        guard projection.isSyncing(request.device), !restoresScheduled.contains(request) else { return [] }
        restoresScheduled.insert(request)
        return [.timer(afterNanoseconds: behavior.restoreLatency.sampleNanoseconds(&random),
                       .answerRestore(device: request.device, restore: request.number))]
    }

    public func timerFired(_ token: TimerToken, now: Int64) -> [Effect] {
        switch token {
        case .decidePurchase(let key):
            guard let payment = projection.awaitingDecision[key] else { return [] }
            guard projection.isSyncing(key.device) else {
                // The app went away meanwhile; decide when an observer is back (R-Q3).
                scheduled.remove(key)
                return []
            }
            let draw = random.nextUnit()
            if draw < behavior.failureProbability {
                return [.send(.decidePurchase(key, .failed(StoreError(.cloudServiceNetworkConnectionFailed, "the simulated store could not be reached"))))]
            }
            if draw < behavior.failureProbability + behavior.cancellationProbability {
                return [.send(.decidePurchase(key, .failed(StoreError(.paymentCancelled, "the user cancelled the payment sheet"))))]
            }
            if draw < behavior.failureProbability + behavior.cancellationProbability + behavior.deferralProbability {
                return [.send(.decidePurchase(key, .deferred)),
                        .timer(afterNanoseconds: behavior.approvalLatency.sampleNanoseconds(&random), .approveDeferred(key))]
            }
            return [.send(.decidePurchase(key, .purchased(charged: isCharged(key, payment))))]
        case .approveDeferred(let key):
            guard let payment = projection.awaitingDecision[key] else { return [] }
            if random.chance(behavior.approvalProbability) {
                return [.send(.decidePurchase(key, .purchased(charged: isCharged(key, payment))))]
            }
            return [.send(.decidePurchase(key, .failed(StoreError(.deferredPaymentDeclined, "the parent declined the request to buy"))))]
        case .answerRestore(let device, let number):
            guard let request = projection.restoresAwaiting.first(where: { $0.device == device && $0.number == number }) else { return [] }
            if random.chance(behavior.restoreFailureProbability) {
                return [.send(.failRestore(device: device, restore: number, error: StoreError(.restoreFailed, "the simulated store could not verify the account")))]
            }
            let account = projection.account(device: device, applicationUsername: request.applicationUsername)
            let originals = account.map { projection.history(of: $0).restorable } ?? []
            return [.send(.completeRestore(device: device, restore: number, originals: originals))]
        case .downloadTick, .deviceStep:
            return []
        }
    }

    /// Buying again a non-consumable the account owns is not charged again (R-R4).
    private func isCharged(_ key: TransactionKey, _ payment: Payment) -> Bool {
        guard let product = catalog.product(payment.productIdentifier), product.kind == .nonConsumable,
              let account = projection.account(device: key.device, applicationUsername: payment.applicationUsername) else { return true }
        return !projection.history(of: account).ownedNonConsumables.contains(product.identifier)
    }
}
