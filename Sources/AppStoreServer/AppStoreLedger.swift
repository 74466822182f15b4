import AppStoreSigning
import EventLog
import Foundation
import StoreKitModel
import StoreKitRoles
import StoreKitRuntime

/// What the App Store's server knows, folded from a run's log: every charged purchase and renewal as
/// Apple's server lists them, each subscription's renewal state, and the notifications the events
/// produce. It decides nothing: the store's own fold (`StoreProjection`) says what each event did, and
/// this one only records it in Apple's terms (docs/app-store-server.md).
public struct AppStoreLedger: Sendable {
    /// One purchase or renewal, as `JWSTransactionDecodedPayload` describes it.
    public struct Transaction: Sendable, Hashable {
        /// The log's identifier (`device.number`) and Apple's decimal one (AppStoreIdentifier).
        public var logIdentifier: String
        public var transactionId: String
        public var originalLogIdentifier: String
        public var originalTransactionId: String
        public var device: String
        public var account: String
        public var productIdentifier: String
        public var kind: ProductKind
        public var group: String?
        public var quantity: Int
        public var applicationUsername: String?
        /// Log times (nanoseconds since the run started).
        public var purchaseTime: Int64
        public var originalPurchaseTime: Int64
        public var expiresTime: Int64?
        public var revocationTime: Int64?
        public var isRenewal: Bool
        /// 1 introductory, 2 promotional; with the offer's identifier (promotional) and payment mode.
        public var offerType: Int?
        public var offerIdentifier: String?
        public var offerDiscountType: String?
        public var displayPrice: String
        /// Where the event that made it is in the log.
        public var partition: String
        public var sequence: UInt64
    }

    /// An auto-renewable subscription's renewal state (`JWSRenewalInfoDecodedPayload`, `status`).
    public struct SubscriptionState: Sendable, Hashable {
        public var originalLogIdentifier: String
        public var account: String
        public var group: String
        public var productIdentifier: String
        public var autoRenewProductIdentifier: String
        /// Indexes into `transactions`: the first purchase and the latest renewal.
        public var originalIndex: Int
        public var latestIndex: Int
        public var isExpired = false
        public var isRevoked = false
        public var expirationIntent: Int?
        public var billingRetryStart: Int64?
        public var gracePeriodEnd: Int64?
    }

    /// A notification an event produced (App Store Server Notifications V2). Its UUID derives from
    /// where the event is in the log, so a sender that restarts sends the same one again.
    public struct Notification: Sendable, Hashable {
        public var notificationType: String
        public var subtype: String?
        public var notificationUUID: String
        /// The transaction it is about (index into `transactions`).
        public var transactionIndex: Int
        public var partition: String
        public var sequence: UInt64
        public var time: Int64
    }

    public private(set) var header: RunHeader?
    public private(set) var transactions: [Transaction] = []
    /// Subscriptions by their first purchase's log identifier.
    public private(set) var subscriptions: [String: SubscriptionState] = [:]
    public private(set) var notifications: [Notification] = []
    /// The log time of the latest event folded: renewal states (grace period or billing retry) are as of it.
    public private(set) var latestTime: Int64 = 0
    /// Two log identifiers whose decimal identifiers collide (FNV-1a 64, 10^18 values): reported, never served wrong.
    public private(set) var identifierCollisions: [String] = []

    private var store = StoreProjection()
    private var catalog: Catalog?
    /// The date of the log's time 0, in milliseconds since 1970 (set from the run's first record).
    public private(set) var startMilliseconds = Scenario.dateMilliseconds(logTime: 0, start: Scenario.defaultStartDate)
    /// `SKTestSession.TimeRate` of the run, as the store role reads it (F-U1).
    private var timeRate = StoreBehavior.defaultSubscriptionTimeRate
    /// Apple identifier → index of the transaction it names. Restored transactions, a renewal's copies on
    /// the account's other devices and uncharged re-purchases name the purchase they stand for.
    private var indexByTransactionId: [String: Int] = [:]
    private var indexByLogIdentifier: [String: Int] = [:]
    private var transactionsOfAccount: [String: [Int]] = [:]

    public init() {}

    /// Milliseconds since 1970 of a log time: the run's recorded wall-clock start plus the time (a
    /// deterministic run records 0 and starts at its scenario's `startDate`, so its log stays the same).
    public func date(_ time: Int64) -> Int64 { startMilliseconds &+ time / 1_000_000 }

    public var storefront: String { catalog?.testSettings.storefront ?? "USA" }

    /// The transaction an Apple identifier names (a purchase, a renewal, or a transaction standing for one).
    public func transaction(id: String) -> Transaction? { indexByTransactionId[id].map { transactions[$0] } }
    public func transactionIndex(id: String) -> Int? { indexByTransactionId[id] }
    /// The charged purchase or renewal the log identifier (`device.number`) names, if it is one.
    public func transaction(logIdentifier: String) -> Transaction? { indexByLogIdentifier[logIdentifier].map { transactions[$0] } }
    /// The run's catalog entry of a product.
    public func catalog(product identifier: String) -> Product? { catalog?.product(identifier) }

    /// The account's purchases and renewals in the order they happened (the history's order).
    public func history(account: String) -> [Transaction] { (transactionsOfAccount[account] ?? []).map { transactions[$0] } }

    /// The subscription a transaction belongs to, if it is one.
    public func subscription(of transaction: Transaction) -> SubscriptionState? { subscriptions[transaction.originalLogIdentifier] }

    /// The subscriptions of an account, by group, each group's in purchase order.
    public func subscriptions(account: String) -> [String: [SubscriptionState]] {
        Dictionary(grouping: subscriptions.values.filter { $0.account == account }, by: \.group)
            .mapValues { $0.sorted { $0.originalIndex < $1.originalIndex } }
    }

    /// Apple's subscription `status` as of the latest event: 1 active, 2 expired, 3 billing retry,
    /// 4 billing grace period, 5 revoked.
    public func status(_ subscription: SubscriptionState) -> Int {
        if subscription.isRevoked { return 5 }
        if subscription.isExpired { return 2 }
        guard subscription.billingRetryStart != nil else { return 1 }
        if let end = subscription.gracePeriodEnd, latestTime < end { return 4 }
        return 3
    }

    /// The device's app receipt as of the latest event: every purchase of its account the store
    /// lists (`StoreProjection.receipt`, R-R2), in purchase order.
    public func receiptEntries(device: String) -> [OriginalTransaction]? {
        guard let account = store.accountOfDevice[device] else { return nil }
        return store.receipt(of: account).purchases
    }

    public var devices: [String] { store.accountOfDevice.keys.sorted() }

    // MARK: Folding

    public mutating func apply(_ recorded: RecordedEvent, partition: String) throws {
        latestTime = max(latestTime, recorded.timestamp)
        switch recorded.event {
        case .runStarted(let header):
            guard self.header == nil else { break }
            let scenario = try Scenario(header: header)
            self.header = header
            startMilliseconds = scenario.dateMilliseconds(logTime: 0, startedAtUnixNanoseconds: header.startedAtUnixNanoseconds)
            catalog = scenario.catalog
            timeRate = scenario.catalog.testSettings.timeRate ?? scenario.store.subscriptionTimeRate ?? StoreBehavior.defaultSubscriptionTimeRate
        case .transactionPurchased(let key, let identifier, _, let charged):
            applyPurchase(recorded, key: key, identifier: identifier, charged: charged, partition: partition)
            return
        case .transactionRestored(_, _, let identifier, let original, _):
            if let index = indexByLogIdentifier[original.transactionIdentifier] {
                alias(AppStoreIdentifier.transactionIdentifier(identifier), to: index)
            }
        case .subscriptionRenewed(let key, let identifier, let original, _):
            applyRenewal(recorded, device: key.device, identifier: identifier, original: original, partition: partition)
            return
        case .subscriptionBillingRetry(_, let original, let grace):
            guard var state = subscriptions[original.transactionIdentifier] else { break }
            state.billingRetryStart = recorded.timestamp
            state.gracePeriodEnd = grace > 0 ? recorded.timestamp &+ grace : nil
            subscriptions[original.transactionIdentifier] = state
            notify("DID_FAIL_TO_RENEW", grace > 0 ? "GRACE_PERIOD" : nil, state.latestIndex, recorded, partition)
        case .subscriptionExpired(_, let original):
            guard var state = subscriptions[original.transactionIdentifier], !state.isExpired else { break }
            let wasInBillingRetry = state.billingRetryStart != nil
            if wasInBillingRetry, state.gracePeriodEnd != nil {
                notify("GRACE_PERIOD_EXPIRED", nil, state.latestIndex, recorded, partition)
            }
            state.isExpired = true
            state.expirationIntent = wasInBillingRetry ? 2 : 1
            subscriptions[original.transactionIdentifier] = state
            notify("EXPIRED", wasInBillingRetry ? "BILLING_RETRY" : "VOLUNTARY", state.latestIndex, recorded, partition)
        case .entitlementsRevoked(_, let original):
            guard let index = indexByLogIdentifier[original.transactionIdentifier] else { break }
            var revoked = index
            if var state = subscriptions[original.transactionIdentifier] {
                // A subscription's refund is of its latest period.
                revoked = state.latestIndex
                state.isRevoked = true
                state.isExpired = true
                subscriptions[original.transactionIdentifier] = state
            }
            transactions[revoked].revocationTime = recorded.timestamp
            notify("REFUND", nil, revoked, recorded, partition)
        default:
            break
        }
        applyToStore(recorded)
    }

    /// A purchase: a new transaction and its notification when charged, else the purchase it stands for.
    private mutating func applyPurchase(_ recorded: RecordedEvent, key: TransactionKey, identifier: String, charged: Bool, partition: String) {
        guard let catalog, let payment = store.awaitingDecision[key],
              let account = store.account(device: key.device, applicationUsername: payment.applicationUsername) else {
            applyToStore(recorded)
            return
        }
        let product = catalog.product(payment.productIdentifier)
        let group = product?.subscriptionGroup
        guard charged else {
            // A re-purchase of something held: the purchase it stands for.
            if let held = transactionsOfAccount[account]?.last(where: { transactions[$0].productIdentifier == payment.productIdentifier }) {
                alias(AppStoreIdentifier.transactionIdentifier(identifier), to: held)
            }
            store.apply(recorded, catalog: catalog)
            return
        }
        let wasInGroup = group.map { store.history(of: account).subscribedGroups.contains($0) } ?? false
        let replaced = group.flatMap { group in
            store.otherSubscriptions(account: account, group: group, than: identifier).first { $0.replacedBy == nil }
        }
        store.apply(recorded, catalog: catalog)
        var transaction = newTransaction(identifier: identifier, original: identifier, originalTime: recorded.timestamp, device: key.device,
                                         account: account, payment: payment, product: product, recorded: recorded, partition: partition)
        let subscription = store.subscriptions[identifier]
        if let subscription {
            describeOffer(of: subscription, in: &transaction)
            transaction.expiresTime = expiresTime(subscription)
        }
        let index = add(transaction)
        guard let product else { return }
        if product.kind == .autoRenewableSubscription, let group, let subscription {
            subscriptions[identifier] = SubscriptionState(
                originalLogIdentifier: identifier, account: account, group: group, productIdentifier: product.identifier,
                autoRenewProductIdentifier: product.identifier, originalIndex: index, latestIndex: index)
            if let replaced, subscriptions[replaced.original.transactionIdentifier] != nil {
                // F-U3: a downgrade waits for the current period's end; an upgrade replaces it now.
                let isDowngrade = subscription.startsAfter != nil
                if isDowngrade { subscriptions[replaced.original.transactionIdentifier]?.autoRenewProductIdentifier = product.identifier }
                notify("DID_CHANGE_RENEWAL_PREF", isDowngrade ? "DOWNGRADE" : "UPGRADE", index, recorded, partition)
            } else {
                notify("SUBSCRIBED", wasInGroup ? "RESUBSCRIBE" : "INITIAL_BUY", index, recorded, partition)
            }
        } else {
            notify("ONE_TIME_CHARGE", nil, index, recorded, partition)
        }
    }

    /// A renewal: a new transaction of the subscription on the buyer's device; a copy on another device
    /// stands for the latest one.
    private mutating func applyRenewal(
        _ recorded: RecordedEvent, device: String, identifier: String, original: OriginalTransaction, partition: String
    ) {
        guard let catalog else { return }
        let originalIdentifier = original.transactionIdentifier
        guard let buyer = store.subscriptions[originalIdentifier], buyer.device == device,
              var state = subscriptions[originalIdentifier] else {
            // A copy on another device of the account (F-U4): it stands for the subscription's latest transaction.
            if let state = subscriptions[originalIdentifier] {
                alias(AppStoreIdentifier.transactionIdentifier(identifier), to: state.latestIndex)
            }
            store.apply(recorded, catalog: catalog)
            return
        }
        store.apply(recorded, catalog: catalog)
        let first = transactions[state.originalIndex]
        var payment = original.payment
        payment.productIdentifier = buyer.productIdentifier
        var transaction = newTransaction(identifier: identifier, original: originalIdentifier, originalTime: first.purchaseTime,
                                         device: device, account: state.account, payment: payment,
                                         product: catalog.product(buyer.productIdentifier), recorded: recorded, partition: partition)
        transaction.isRenewal = true
        if let renewed = store.subscriptions[originalIdentifier] {
            describeOffer(of: renewed, in: &transaction)
            transaction.expiresTime = expiresTime(renewed)
        }
        let index = add(transaction)
        state.latestIndex = index
        state.billingRetryStart = nil
        state.gracePeriodEnd = nil
        subscriptions[originalIdentifier] = state
        notify("DID_RENEW", nil, index, recorded, partition)
    }

    private mutating func applyToStore(_ recorded: RecordedEvent) {
        if let catalog { store.apply(recorded, catalog: catalog) }
    }

    private func newTransaction(identifier: String, original: String, originalTime: Int64, device: String, account: String,
                                payment: Payment, product: Product?, recorded: RecordedEvent, partition: String) -> Transaction {
        Transaction(
            logIdentifier: identifier, transactionId: AppStoreIdentifier.transactionIdentifier(identifier),
            originalLogIdentifier: original, originalTransactionId: AppStoreIdentifier.transactionIdentifier(original),
            device: device, account: account, productIdentifier: payment.productIdentifier, kind: product?.kind ?? .consumable,
            group: product?.subscriptionGroup, quantity: payment.quantity, applicationUsername: payment.applicationUsername,
            purchaseTime: recorded.timestamp, originalPurchaseTime: originalTime, isRenewal: false,
            displayPrice: product?.displayPrice ?? "0", partition: partition, sequence: recorded.sequence)
    }

    private func describeOffer(of subscription: Subscription, in transaction: inout Transaction) {
        guard let terms = subscription.currentOfferTerms else { return }
        transaction.offerType = subscription.isInIntroductoryOfferPeriod ? 1 : 2
        transaction.offerIdentifier = subscription.isInIntroductoryOfferPeriod ? nil : subscription.promotionalOffer?.identifier
        transaction.offerDiscountType = switch terms.paymentMode {
        case .free: "FREE_TRIAL"
        case .payUpFront: "PAY_UP_FRONT"
        case .payAsYouGo: "PAY_AS_YOU_GO"
        }
        transaction.displayPrice = terms.displayPrice
    }

    /// When the current period ends: the offer's period while at an offer, else the product's, at the
    /// run's time rate; the same arithmetic as `StoreRole.currentPeriodNanoseconds`, which times renewals.
    private func expiresTime(_ subscription: Subscription) -> Int64? {
        let period: Int64?
        if let offer = subscription.currentOfferTerms {
            period = SubscriptionPeriod.renewalNanoseconds(offer.subscriptionPeriod, timeRate: timeRate).map { $0 &* Int64(offer.periodMultiple) }
        } else {
            period = catalog?.product(subscription.productIdentifier)?.subscriptionPeriod.flatMap { SubscriptionPeriod.renewalNanoseconds($0, timeRate: timeRate) }
        }
        return period.map { subscription.periodStart &+ $0 }
    }

    private mutating func add(_ transaction: Transaction) -> Int {
        let index = transactions.count
        if indexByTransactionId[transaction.transactionId] != nil {
            identifierCollisions.append(transaction.logIdentifier)
        } else {
            indexByTransactionId[transaction.transactionId] = index
        }
        indexByLogIdentifier[transaction.logIdentifier] = index
        transactionsOfAccount[transaction.account, default: []].append(index)
        transactions.append(transaction)
        return index
    }

    private mutating func alias(_ transactionId: String, to index: Int) {
        if indexByTransactionId[transactionId] == nil { indexByTransactionId[transactionId] = index }
    }

    private mutating func notify(_ type: String, _ subtype: String?, _ index: Int, _ recorded: RecordedEvent, _ partition: String) {
        let ordinal = notifications.reversed().prefix { $0.partition == partition && $0.sequence == recorded.sequence }.count
        notifications.append(Notification(
            notificationType: type, subtype: subtype,
            notificationUUID: Self.uuid("notification:\(partition):\(recorded.sequence):\(ordinal)"),
            transactionIndex: index, partition: partition, sequence: recorded.sequence, time: recorded.timestamp))
    }

    /// A version-4-shaped UUID whose 128 bits are two FNV-1a 64 hashes of `name`: the same name, the same UUID.
    static func uuid(_ name: String) -> String {
        let high = fnv1a64(Array("high:\(name)".utf8))
        let low = fnv1a64(Array("low:\(name)".utf8))
        var bytes = (0..<8).map { UInt8(truncatingIfNeeded: high >> (56 - 8 * $0)) } + (0..<8).map { UInt8(truncatingIfNeeded: low >> (56 - 8 * $0)) }
        bytes[6] = (bytes[6] & 0x0F) | 0x40
        bytes[8] = (bytes[8] & 0x3F) | 0x80
        let uuid = UUID(uuid: (bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7],
                               bytes[8], bytes[9], bytes[10], bytes[11], bytes[12], bytes[13], bytes[14], bytes[15]))
        return uuid.uuidString.lowercased()
    }

    // MARK: Reading a log

    /// Folds a run's log (every partition, merged by time; or up to `through` of a log with one partition).
    public static func build(logDirectory: URL, through: UInt64 = .max) throws -> AppStoreLedger {
        let names = try PartitionedLogProjection.partitionNames(in: logDirectory)
        var ledger = AppStoreLedger()
        if through != .max {
            guard names.count == 1 else {
                throw LogSelectionError("a sequence number names a record of one partition, and \(logDirectory.path) has \(names.count) (\(names.joined(separator: ", ")))", code: .severalPartitions)
            }
            let reader = try PartitionReader(directory: logDirectory, partition: names[0])
            try reader.forEachRecord(from: 1, through: through) { view in
                try ledger.apply(try LogProjection.decode(sequence: view.sequence, timestamp: view.timestampNanoseconds, payload: view.payload),
                                 partition: names[0])
            }
            return ledger
        }
        try PartitionedLogProjection.forEachEventMergedByTime(directory: logDirectory, partitions: names) { partition, recorded in
            try ledger.apply(recorded, partition: partition)
        }
        return ledger
    }
}
