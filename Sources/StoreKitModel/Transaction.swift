/// SKPaymentTransactionState, with `deferred` as the later extension (R-T1). Printed by
/// case name; raw values are part of the log format.
public enum TransactionState: UInt8, Sendable, Hashable, CaseIterable {
    case purchasing = 0
    case purchased = 1
    case failed = 2
    case restored = 3
    case deferred = 4

    /// Once complete a transaction only waits to be finished; it never changes state again.
    public var isComplete: Bool {
        switch self {
        case .purchased, .failed, .restored: true
        case .purchasing, .deferred: false
        }
    }

    /// Purchased or restored: content may be delivered and downloads started (R-Q11).
    public var isPaid: Bool { self == .purchased || self == .restored }

}

/// What a restored transaction keeps of the purchase it restores (`originalTransaction`).
public struct OriginalTransaction: Sendable, Hashable {
    public var transactionIdentifier: String
    public var payment: Payment
    /// Nanoseconds of simulated time at which the original was purchased.
    public var transactionDate: Int64
    /// Set only on an app receipt's entries (R-R2): the introductory offer the purchase or renewal
    /// was at (F-O3). nil: the regular price, or not a receipt entry.
    public var introductoryOfferPeriod: IntroductoryOfferPeriod?
    /// Set only on an app receipt's entries: the promotional offer the purchase or renewal was at,
    /// Apple's receipt field `promotional_offer_id` (F-O7). nil: none, or not a receipt entry.
    public var promotionalOfferIdentifier: String?

    public init(transactionIdentifier: String, payment: Payment, transactionDate: Int64,
                introductoryOfferPeriod: IntroductoryOfferPeriod? = nil, promotionalOfferIdentifier: String? = nil) {
        self.transactionIdentifier = transactionIdentifier
        self.payment = payment
        self.transactionDate = transactionDate
        self.introductoryOfferPeriod = introductoryOfferPeriod
        self.promotionalOfferIdentifier = promotionalOfferIdentifier
    }

    /// The receipt field `is_trial_period`: bought or renewed in a free trial (F-O3).
    public var isTrialPeriod: Bool { introductoryOfferPeriod == .freeTrial }
    /// The receipt field `is_in_intro_offer_period`: bought or renewed at a paid introductory
    /// price, pay up front or pay as you go (F-O3). A free trial is `isTrialPeriod` instead.
    public var isInIntroductoryOfferPeriod: Bool { introductoryOfferPeriod == .introductoryPrice }
}

extension OriginalTransaction: CustomReflectable {
    /// The three fields as before offers, and the offers only where a receipt entry has one (F-O3, F-O7),
    /// so `log cat` prints an entry without offers as it did before them.
    public var customMirror: Mirror {
        var children: [(label: String?, value: Any)] = [("transactionIdentifier", transactionIdentifier), ("payment", payment),
                                                        ("transactionDate", transactionDate)]
        if let introductoryOfferPeriod { children.append(("introductoryOfferPeriod", introductoryOfferPeriod)) }
        if let promotionalOfferIdentifier { children.append(("promotionalOfferIdentifier", promotionalOfferIdentifier)) }
        return Mirror(self, children: children, displayStyle: .struct)
    }
}

/// Which introductory offer a receipt entry was at (F-O3): the two receipt fields Apple sets,
/// never both. Raw values are the per-entry byte of a receipt piece with offers (docs/wire-format.md).
public enum IntroductoryOfferPeriod: UInt8, Sendable, Hashable, CaseIterable {
    /// `is_trial_period`: a free trial (payment mode `free`).
    case freeTrial = 1
    /// `is_in_intro_offer_period`: a paid offer (`payUpFront`, or a `payAsYouGo` period).
    case introductoryPrice = 2

    public init(_ mode: IntroductoryOffer.PaymentMode) {
        self = mode == .free ? .freeTrial : .introductoryPrice
    }

    /// The name `log cat --json` prints.
    public var name: String { self == .freeTrial ? "freeTrial" : "introductoryPrice" }
}

/// SKPaymentTransaction as observers see it: a value projected from the log.
///
/// A value with its fields in shared storage, copied on the first change (as `Array` is): the
/// queue hands transactions to every observer in arrays, per callback, and a copy of ten fields
/// retained one by one cost more than most callbacks. Changing a copy never changes another.
public struct PaymentTransaction: Sendable, Hashable, Identifiable {
    public var key: TransactionKey {
        get { fields.key }
        set { unique().key = newValue }
    }
    public var payment: Payment {
        get { fields.payment }
        _modify { let storage = unique(); yield &storage.payment }
    }
    public var transactionState: TransactionState {
        get { fields.transactionState }
        set { unique().transactionState = newValue }
    }
    /// Defined only when purchased or restored (R-T2, R-T3).
    public var transactionIdentifier: String? {
        get { fields.transactionIdentifier }
        set { unique().transactionIdentifier = newValue }
    }
    /// Defined only when purchased or restored; nanoseconds of simulated time.
    public var transactionDate: Int64? {
        get { fields.transactionDate }
        set { unique().transactionDate = newValue }
    }
    /// Defined only when failed.
    public var error: StoreError? {
        get { fields.error }
        set { unique().error = newValue }
    }
    /// Defined only when restored (R-Q9).
    public var originalTransaction: OriginalTransaction? {
        get { fields.originalTransaction }
        _modify { let storage = unique(); yield &storage.originalTransaction }
    }
    /// Present only when purchased or restored and the product hosts content (R-D3).
    public var downloads: [Download] {
        get { fields.downloads }
        _modify { let storage = unique(); yield &storage.downloads }
    }
    /// The restore that created this transaction, when it was restored.
    public var restoreNumber: UInt64? {
        get { fields.restoreNumber }
        set { unique().restoreNumber = newValue }
    }
    /// False when a non-consumable the account already owns was bought again (R-R4).
    public var charged: Bool {
        get { fields.charged }
        set { unique().charged = newValue }
    }

    public var id: TransactionKey { key }

    public init(key: TransactionKey, payment: Payment) {
        fields = Fields(key: key, payment: payment)
    }

    public static func == (left: PaymentTransaction, right: PaymentTransaction) -> Bool {
        left.fields === right.fields || left.fields.hasSameValue(as: right.fields)
    }

    public func hash(into hasher: inout Hasher) { fields.hash(into: &hasher) }

    private var fields: Fields

    /// The fields, made this value's own first when another value shares them.
    private mutating func unique() -> Fields {
        if !isKnownUniquelyReferenced(&fields) { fields = fields.copy() }
        return fields
    }

    /// Changed only through `unique()`, so only by the one value that holds them: shared between
    /// threads, they are only read (hence `@unchecked Sendable`, and no dynamic exclusivity checks).
    private final class Fields: @unchecked Sendable {
        @exclusivity(unchecked) var key: TransactionKey
        @exclusivity(unchecked) var payment: Payment
        @exclusivity(unchecked) var transactionState: TransactionState = .purchasing
        @exclusivity(unchecked) var transactionIdentifier: String?
        @exclusivity(unchecked) var transactionDate: Int64?
        @exclusivity(unchecked) var error: StoreError?
        @exclusivity(unchecked) var originalTransaction: OriginalTransaction?
        @exclusivity(unchecked) var downloads: [Download] = []
        @exclusivity(unchecked) var restoreNumber: UInt64?
        @exclusivity(unchecked) var charged = false

        init(key: TransactionKey, payment: Payment) {
            self.key = key
            self.payment = payment
        }

        func copy() -> Fields {
            let copy = Fields(key: key, payment: payment)
            copy.transactionState = transactionState
            copy.transactionIdentifier = transactionIdentifier
            copy.transactionDate = transactionDate
            copy.error = error
            copy.originalTransaction = originalTransaction
            copy.downloads = downloads
            copy.restoreNumber = restoreNumber
            copy.charged = charged
            return copy
        }

        func hasSameValue(as other: Fields) -> Bool {
            key == other.key && payment == other.payment && transactionState == other.transactionState
                && transactionIdentifier == other.transactionIdentifier && transactionDate == other.transactionDate
                && error == other.error && originalTransaction == other.originalTransaction && downloads == other.downloads
                && restoreNumber == other.restoreNumber && charged == other.charged
        }

        func hash(into hasher: inout Hasher) {
            hasher.combine(key)
            hasher.combine(payment)
            hasher.combine(transactionState)
            hasher.combine(transactionIdentifier)
            hasher.combine(transactionDate)
            hasher.combine(error)
            hasher.combine(originalTransaction)
            hasher.combine(downloads)
            hasher.combine(restoreNumber)
            hasher.combine(charged)
        }
    }
}
