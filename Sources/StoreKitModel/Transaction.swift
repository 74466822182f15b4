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

    public init(transactionIdentifier: String, payment: Payment, transactionDate: Int64) {
        self.transactionIdentifier = transactionIdentifier
        self.payment = payment
        self.transactionDate = transactionDate
    }
}

/// SKPaymentTransaction as observers see it: a value projected from the log.
public struct PaymentTransaction: Sendable, Hashable, Identifiable {
    public var key: TransactionKey
    public var payment: Payment
    public var transactionState: TransactionState
    /// Defined only when purchased or restored (R-T2, R-T3).
    public var transactionIdentifier: String?
    /// Defined only when purchased or restored; nanoseconds of simulated time.
    public var transactionDate: Int64?
    /// Defined only when failed.
    public var error: StoreError?
    /// Defined only when restored (R-Q9).
    public var originalTransaction: OriginalTransaction?
    /// Present only when purchased or restored and the product hosts content (R-D3).
    public var downloads: [Download]
    /// The restore that created this transaction, when it was restored.
    public var restoreNumber: UInt64?
    /// False when a non-consumable the account already owns was bought again (R-R4).
    public var charged: Bool

    public var id: TransactionKey { key }

    public init(key: TransactionKey, payment: Payment) {
        self.key = key
        self.payment = payment
        self.transactionState = .purchasing
        self.transactionIdentifier = nil
        self.transactionDate = nil
        self.error = nil
        self.originalTransaction = nil
        self.downloads = []
        self.restoreNumber = nil
        self.charged = false
    }
}
