/// What the simulated App Store knows, folded from the events it sees: which device
/// belongs to which account, each account's completed purchases (for restores, R-Q9,
/// R-Q10, R-R3) and owned non-consumables (R-R4), and what awaits its decision.
public struct StoreProjection: Sendable {
    public struct AccountHistory: Sendable, Hashable {
        /// Completed, charged purchases of restorable products, oldest first.
        public var restorable: [OriginalTransaction] = []
        public var ownedNonConsumables: Set<String> = []
        /// Auto-renewable subscriptions the account pays for now (R-R4: not charged again).
        public var activeSubscriptions: Set<String> = []
        public var purchaseCount = 0
        /// Every charged purchase, consumables too: what the receipt lists (R-R2). Appended through
        /// `record(_:)`, which keeps `finished` beside it. In chunks: it grows with every purchase, and
        /// an array's growth copied all of it at once (`SegmentedArray`).
        public internal(set) var purchases = SegmentedArray<OriginalTransaction>()
        /// Per entry of `purchases`: a consumable the app finished, which leaves the receipt (R-R2).
        /// A flag by position, not a set of identifiers: a finish then hashes no identifier and grows no set.
        public internal(set) var finished: [Bool] = []

        /// Adds a charged purchase or renewal to the history; returns its position in `purchases`.
        @discardableResult
        mutating func record(_ original: OriginalTransaction) -> Int {
            purchases.append(original)
            finished.append(false)
            return purchases.count - 1
        }
        /// Subscription groups the account has ever subscribed in: it is no longer eligible for
        /// their introductory offers (F-O2).
        public var subscribedGroups: Set<String> = []
        /// Transactions (purchases and renewals) at an introductory offer, by transaction identifier,
        /// with which offer: what a receipt entry marks as `is_trial_period` or
        /// `is_in_intro_offer_period` (F-O3). Kept beside `purchases`, not in it, so a purchase taken
        /// from the history into a command (a refund) is the plain original.
        public var introductoryOfferPeriods: [String: IntroductoryOfferPeriod] = [:]

        /// Transactions (purchases and pay-as-you-go renewals) at a promotional offer, by transaction
        /// identifier, with the offer's identifier: a receipt entry's `promotional_offer_id` (F-O7).
        public var promotionalOfferIdentifiers: [String: String] = [:]

        /// The transactions of `introductoryOfferPeriods`.
        public var introductoryOfferTransactions: Set<String> { Set(introductoryOfferPeriods.keys) }
    }

    /// The app receipt: every purchase of the account on any device (R-R2).
    public struct Receipt: Sendable, Hashable {
        public var account: String
        public var purchases: [OriginalTransaction]
        /// The listed transactions bought or renewed at an introductory offer (F-O3): the receipt
        /// fields `is_trial_period` (a free trial) and `is_in_intro_offer_period` (a paid offer),
        /// which each entry's `introductoryOfferPeriod` says and the receipt pieces carry (R-R2).
        public var introductoryOfferTransactions: Set<String> {
            Set(purchases.lazy.filter { $0.introductoryOfferPeriod != nil }.map(\.transactionIdentifier))
        }
    }

    public private(set) var accountOfDevice: [String: String] = [:]
    /// Devices signed in to each account, in registration order: a renewal reaches every one (F-U4).
    public private(set) var devicesOfAccount: [String: [String]] = [:]
    public private(set) var accounts: [String: AccountHistory] = [:]
    /// Transactions waiting for the store, with their payment (purchasing or deferred).
    public private(set) var awaitingDecision: [TransactionKey: Payment] = [:]
    public private(set) var deferred: Set<TransactionKey> = []
    /// Restores asked for and not yet answered.
    public private(set) var restoresAwaiting: [RestoreRequest] = []
    public private(set) var observerCount: [String: Int] = [:]
    /// Devices whose user may not authorise payments (R-Q1): the queue fails their payments itself.
    public private(set) var paymentsNotAllowed: Set<String> = []
    /// Subscriptions that renew, by their first purchase's transaction identifier (F-U1).
    public private(set) var subscriptions: [String: Subscription] = [:]
    /// The same, by account, so a purchase looks only at its own account's (not every account's).
    private var subscriptionsOfAccount: [String: Set<String>] = [:]
    /// Charged consumable purchases not finished yet, with their account and position in its
    /// `purchases`: the receipt lists them until the app finishes them (R-R2).
    private var unfinishedConsumables: [TransactionKey: (account: String, position: Int)] = [:]
    /// Receipt refreshes asked for and not yet answered (R-R2), oldest first.
    public private(set) var receiptRefreshesAwaiting: [ReceiptRequest] = []

    public struct ReceiptRequest: Sendable, Hashable {
        public var device: String
        public var number: UInt64

        public init(device: String, number: UInt64) {
            self.device = device
            self.number = number
        }
    }

    public struct RestoreRequest: Sendable, Hashable {
        public var device: String
        public var number: UInt64
        public var applicationUsername: String?

        public init(device: String, number: UInt64, applicationUsername: String?) {
            self.device = device
            self.number = number
            self.applicationUsername = applicationUsername
        }
    }

    public init() {}

    /// The account a request is for: the payment's applicationUsername when the app set
    /// one (R-Q10), else the account the device is signed in to.
    @inlinable public func account(device: String, applicationUsername: String?) -> String? {
        applicationUsername ?? accountOfDevice[device]
    }

    public func history(of account: String) -> AccountHistory { accounts[account] ?? AccountHistory() }

    /// True when buying `product` again is not charged (R-R4): the account owns it (a non-consumable)
    /// or pays for it now (an auto-renewable subscription). Read in place: `history(of:)` copies the
    /// account's whole history, and the store asks this for every purchase it decides.
    public func alreadyHolds(_ product: Product, account: String) -> Bool {
        guard let index = accounts.index(forKey: account) else { return false }
        switch product.kind {
        case .nonConsumable: return accounts.values[index].ownedNonConsumables.contains(product.identifier)
        case .autoRenewableSubscription: return accounts.values[index].activeSubscriptions.contains(product.identifier)
        case .consumable, .nonRenewingSubscription: return false
        }
    }

    /// Refreshing the receipt reads the account's history; it creates no transactions,
    /// so refreshing many times equals refreshing once (R-R2). A consumable is listed until the
    /// app finishes its transaction (Receipt Validation Programming Guide: "kept in the receipt until
    /// your app finishes that transaction").
    public func receipt(of account: String) -> Receipt {
        let history = history(of: account)
        let listed = history.finished.contains(true) ? zip(history.purchases, history.finished).filter { !$0.1 }.map(\.0)
            : Array(history.purchases)
        guard !history.introductoryOfferPeriods.isEmpty || !history.promotionalOfferIdentifiers.isEmpty else {
            return Receipt(account: account, purchases: listed)
        }
        let entries = listed.map { purchase in
            var entry = purchase
            entry.introductoryOfferPeriod = history.introductoryOfferPeriods[purchase.transactionIdentifier]
            entry.promotionalOfferIdentifier = history.promotionalOfferIdentifiers[purchase.transactionIdentifier]
            return entry
        }
        return Receipt(account: account, purchases: entries)
    }

    /// Why the store refuses a payment's promotional offer discount (F-O6), as Apple's SKError codes;
    /// nil when it accepts it (or the payment has none). Checked in Apple's order: the parameters
    /// are all there, the product has the offer, the key signed it, and the account may have it
    /// (promotional offers are for accounts that have subscribed in the group, current or lapsed).
    public func promotionalOfferRefusal(_ payment: Payment, device: String, catalog: Catalog, key: PromotionalOfferKey) -> StoreError? {
        guard let discount = payment.discount else { return nil }
        if discount.keyIdentifier.isEmpty || discount.nonce.isEmpty || discount.signature.isEmpty {
            return StoreError(.missingOfferParams, "the payment discount for offer \"\(discount.identifier)\" lacks its key identifier, nonce or signature")
        }
        guard let product = catalog.product(payment.productIdentifier), product.promotionalOffer(discount.identifier) != nil else {
            return StoreError(.invalidOfferIdentifier, "\(payment.productIdentifier) has no promotional offer \"\(discount.identifier)\"")
        }
        guard key.isValid(discount, on: payment) else {
            return StoreError(.invalidSignature, "the signature of the discount for offer \"\(discount.identifier)\" is not valid for key \"\(discount.keyIdentifier)\"")
        }
        guard let account = account(device: device, applicationUsername: payment.applicationUsername),
              let group = product.subscriptionGroup, accounts[account]?.subscribedGroups.contains(group) == true else {
            return StoreError(.ineligibleForOffer, "the account has never subscribed in the group of \(payment.productIdentifier), so offer \"\(discount.identifier)\" is not for it")
        }
        return nil
    }

    /// While no observer is attached the queue does not sync with the store (R-Q3).
    @inlinable public func isSyncing(_ device: String) -> Bool { (observerCount[device] ?? 0) > 0 }

    /// Active subscriptions of an account in a group, other than `identifier` (one per group, F-U3).
    public func otherSubscriptions(account: String, group: String, than identifier: String) -> [Subscription] {
        (subscriptionsOfAccount[account] ?? []).compactMap { subscriptions[$0] }
            .filter { $0.group == group && $0.original.transactionIdentifier != identifier }
            .sorted { $0.original.transactionIdentifier < $1.original.transactionIdentifier }
    }

    /// The account's subscription in the same group that `new` takes over from at its next renewal,
    /// when buying `new` is a downgrade (a lower level: a larger `groupNumber`) or a crossgrade to
    /// another period (the same level); nil for an upgrade, a crossgrade of the same period, or
    /// levels the catalog does not give, which take effect at once (F-U3).
    func changedAtRenewal(_ new: Subscription) -> String? {
        guard let group = new.group, let level = new.level else { return nil }
        let current = otherSubscriptions(account: new.account, group: group, than: new.original.transactionIdentifier)
            .filter { $0.startsAfter == nil && $0.replacedBy == nil }
        guard let active = current.first, let activeLevel = active.level else { return nil }
        let atRenewal = level > activeLevel || (level == activeLevel && new.period != active.period)
        return atRenewal ? active.original.transactionIdentifier : nil
    }

    private mutating func endSubscription(_ original: OriginalTransaction, at time: Int64 = 0) {
        guard let ended = subscriptions.removeValue(forKey: original.transactionIdentifier) else { return }
        // The subscription that waited for this one starts now (F-U3).
        if let successor = ended.replacedBy, subscriptions[successor] != nil {
            subscriptions[successor]?.startsAfter = nil
            subscriptions[successor]?.periodStart = time
        }
        subscriptionsOfAccount[ended.account]?.remove(original.transactionIdentifier)
        // Still active if another subscription of the account is to the same product.
        let others = (subscriptionsOfAccount[ended.account] ?? []).compactMap { subscriptions[$0] }
        if !others.contains(where: { $0.productIdentifier == ended.productIdentifier }) {
            accounts[ended.account]?.activeSubscriptions.remove(ended.productIdentifier)
        }
    }

    public mutating func apply(_ recorded: RecordedEvent, catalog: Catalog) {
        switch recorded.event {
        case .deviceRegistered(let device, let account):
            if accountOfDevice.updateValue(account, forKey: device) == nil { devicesOfAccount[account, default: []].append(device) }
        case .observerAttached(let device, _):
            observerCount[device, default: 0] += 1
        case .observerDetached(let device, _):
            observerCount[device] = max(0, (observerCount[device] ?? 0) - 1)
        case .appTerminated(let device):
            observerCount[device] = 0
        case .paymentsAllowedChanged(let device, let allowed):
            if allowed { paymentsNotAllowed.remove(device) } else { paymentsNotAllowed.insert(device) }
        case .transactionAdded(let key, let payment):
            awaitingDecision[key] = payment
        case .askToBuyDeclined(let key):
            // Declined stays deferred in the app's queue, but the store has nothing more to decide (F-A1).
            deferred.remove(key)
            awaitingDecision[key] = nil
        case .transactionDeferred(let key):
            deferred.insert(key)
        case .transactionPurchased(let key, let identifier, _, let charged):
            recordPurchase(key, identifier: identifier, charged: charged, at: recorded.timestamp, catalog: catalog)
        case .transactionFinished(let key):
            // A finished consumable leaves the receipt (R-R2).
            guard let consumable = unfinishedConsumables.removeValue(forKey: key),
                  let history = accounts.index(forKey: consumable.account) else { return }
            accounts.values[history].finished[consumable.position] = true
        case .receiptRefreshStarted(let device, let number):
            receiptRefreshesAwaiting.append(ReceiptRequest(device: device, number: number))
        case .receiptDelivered(let device, let number, _, _, let isLast):
            if isLast { receiptRefreshesAwaiting.removeAll { $0.device == device && $0.number == number } }
        case .transactionFailed(let key, _):
            if !deferred.isEmpty { deferred.remove(key) }
            awaitingDecision[key] = nil
        case .subscriptionRenewed(let key, let identifier, let original, _):
            recordRenewal(key, identifier: identifier, original: original, at: recorded.timestamp)
        case .subscriptionExpired(_, let original):
            endSubscription(original, at: recorded.timestamp)
        case .transactionsCleared(let device):
            // SKTestSession's clearTransactions (F-T2): the account's history is gone, subscriptions too.
            guard let account = accountOfDevice[device] else { return }
            for identifier in subscriptionsOfAccount.removeValue(forKey: account) ?? [] { subscriptions[identifier] = nil }
            accounts[account] = nil
            unfinishedConsumables = unfinishedConsumables.filter { $0.value.account != account }
        case .subscriptionBillingRetry(_, let original, let grace):
            subscriptions[original.transactionIdentifier]?.billingRetryStart = recorded.timestamp
            subscriptions[original.transactionIdentifier]?.gracePeriodEnd = grace > 0 ? recorded.timestamp &+ grace : nil
        case .entitlementsRevoked(let device, let original):
            // A refund takes back what the purchase gave (F-K1): ownership, restorability, the subscription.
            endSubscription(original, at: recorded.timestamp)
            guard let account = account(device: device, applicationUsername: original.payment.applicationUsername),
                  accounts[account] != nil else { return }
            accounts[account]!.restorable.removeAll { $0.transactionIdentifier == original.transactionIdentifier }
            if catalog.product(original.payment.productIdentifier)?.kind == .nonConsumable {
                accounts[account]!.ownedNonConsumables.remove(original.payment.productIdentifier)
            }
        case .restoreStarted(let device, let number, let username):
            restoresAwaiting.append(RestoreRequest(device: device, number: number, applicationUsername: username))
        case .restoreFinished(let device, let number), .restoreFailed(let device, let number, _):
            restoresAwaiting.removeAll { $0.device == device && $0.number == number }
        default:
            break
        }
    }

    /// A purchase the store charged: the account's history, its non-consumables, its subscription
    /// (with the offer it was bought at, F-O2, F-O5) and the consumables waiting to be finished (R-R2).
    private mutating func recordPurchase(_ key: TransactionKey, identifier: String, charged: Bool, at time: Int64, catalog: Catalog) {
        // Removing from an empty set still hashes the key; most purchases were never deferred.
        if !deferred.isEmpty { deferred.remove(key) }
        guard let payment = awaitingDecision.removeValue(forKey: key) else { return }
        guard charged, let account = account(device: key.device, applicationUsername: payment.applicationUsername) else { return }
        // Mutated in place, found once: copying the history out and back would copy its arrays
        // on every purchase (quadratic in an account's purchases), and each lookup hashes the name.
        let original = OriginalTransaction(transactionIdentifier: identifier, payment: payment.withoutDiscount, transactionDate: time)
        let history: Dictionary<String, AccountHistory>.Index
        if let found = accounts.index(forKey: account) {
            history = found
        } else {
            accounts[account] = AccountHistory()
            history = accounts.index(forKey: account)!
        }
        accounts.values[history].purchaseCount += 1
        let position = accounts.values[history].record(original)
        // The product's fields are read in place (`catalog.product` returns a copy of all of them).
        guard let product = catalog.index(of: payment.productIdentifier) else { return }
        let kind = catalog.products[product].kind
        if kind == .nonConsumable { accounts.values[history].ownedNonConsumables.insert(payment.productIdentifier) }
        if kind == .autoRenewableSubscription {
            let group = catalog.products[product].subscriptionGroup
            var subscription = Subscription(device: key.device, account: account, original: original,
                                            group: group, renewals: 0, periodStart: time,
                                            period: catalog.products[product].subscriptionPeriod, level: catalog.products[product].subscriptionLevel)
            // An account new to the group gets the product's introductory offer (F-O2); one that has
            // subscribed in it gets the promotional offer its payment's discount names (F-O5), which the
            // store checked before the purchase. Decided from the log alone, so a replay or a restarted
            // store decides the same without a choice.
            let isNewToGroup = group.map { accounts.values[history].subscribedGroups.insert($0).inserted } ?? false
            if isNewToGroup, let offer = catalog.products[product].introductoryOffer {
                subscription.introductoryOffer = offer
                accounts.values[history].introductoryOfferPeriods[identifier] = IntroductoryOfferPeriod(offer.paymentMode)
            } else if !isNewToGroup, group != nil, let discount = payment.discount,
                      let offer = catalog.products[product].promotionalOffer(discount.identifier) {
                subscription.promotionalOffer = offer
                accounts.values[history].promotionalOfferIdentifiers[identifier] = offer.identifier
            }
            if let current = changedAtRenewal(subscription) {
                // `changedAtRenewal` looks only at the account's other subscriptions: none waits for itself.
                precondition(current != identifier, "subscription \(identifier) would start after itself")
                subscription.startsAfter = current
                subscriptions[current]?.replacedBy = identifier
            }
            accounts.values[history].activeSubscriptions.insert(payment.productIdentifier)
            subscriptionsOfAccount[account, default: []].insert(identifier)
            subscriptions[identifier] = subscription
        }
        if kind.isRestorable { accounts.values[history].restorable.append(original) }
        if kind == .consumable { unfinishedConsumables[key] = (account, position) }
    }

    /// A renewal of a subscription (F-U1): its period, its recovery from billing retry (F-B1), the charge the receipt lists.
    private mutating func recordRenewal(_ key: TransactionKey, identifier: String, original: OriginalTransaction, at time: Int64) {
        // The renewal on the device that bought it counts; its copies on the account's other devices do not (F-U4).
        guard var subscription = subscriptions[original.transactionIdentifier], key.device == subscription.device else { return }
        subscription.renewals += 1
        // A renewal after billing retry is the recovery (F-B1). Within the grace period the paid days
        // go on uninterrupted, so the period counts from the period end billing failed at; after it,
        // paid service paused, and the next period counts from the recovery.
        if let start = subscription.billingRetryStart, let graceEnd = subscription.gracePeriodEnd, time < graceEnd {
            subscription.periodStart = start
        } else {
            subscription.periodStart = time
        }
        subscription.billingRetryStart = nil
        subscription.gracePeriodEnd = nil
        subscriptions[original.transactionIdentifier] = subscription
        // Each renewal is a charge the receipt lists (R-R2).
        accounts[subscription.account, default: AccountHistory()].record(
            OriginalTransaction(transactionIdentifier: identifier, payment: original.payment, transactionDate: time))
        // A pay-as-you-go renewal still at the offer price (F-O2, F-O3).
        if subscription.isInIntroductoryOfferPeriod, let offer = subscription.introductoryOffer {
            accounts[subscription.account]?.introductoryOfferPeriods[identifier] = IntroductoryOfferPeriod(offer.paymentMode)
        }
        // The same for a promotional offer (F-O5, F-O7).
        if subscription.isInPromotionalOfferPeriod, let offer = subscription.promotionalOffer {
            accounts[subscription.account]?.promotionalOfferIdentifiers[identifier] = offer.identifier
        }
    }
}
