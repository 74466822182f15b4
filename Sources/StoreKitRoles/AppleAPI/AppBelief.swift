import StoreKitModel

/// What the app believes it did, read from the app's own state (its entitlement store, its
/// persistence), never from a call the app makes to the simulator. The explorer's invariants
/// compare it with what the store knows: each new credit is logged as the app granting that
/// transaction, each restore shown done as such (docs/explore.md, "Your own observer").
public struct AppBelief: Sendable, Hashable {
    /// How many times the app credited each transaction, by the identifier it keys its credits by:
    /// the transaction's `transactionIdentifier`, or for a restored one its `original`'s.
    public var credits: [String: Int]
    /// How many times the app told its user that a restore is done.
    public var restoresShownDone: Int
    /// How many times the app's analytics (a passive observer) reported each transaction as revenue,
    /// by the transaction's `transactionIdentifier` (a restored one's own, or its original's).
    public var revenueReported: [String: Int]
    /// Every time the app told its user that a purchase it asked for completed (its purchase
    /// screen's completion handler), oldest first, over all launches: the payment it had added and
    /// the transaction it took for that payment's.
    public var purchaseCompletionsShown: [PurchaseCompletion]
    /// Every failed transaction whose error the app showed its user, oldest first, over all launches.
    public var failuresShown: [ShownFailure]
    /// Every downloaded file the app moved to its own storage, oldest first, over all launches (R-D3).
    public var contentKept: [KeptContent]

    public init(credits: [String: Int] = [:], restoresShownDone: Int = 0, revenueReported: [String: Int] = [:],
                purchaseCompletionsShown: [PurchaseCompletion] = [], failuresShown: [ShownFailure] = [], contentKept: [KeptContent] = []) {
        self.credits = credits
        self.restoresShownDone = restoresShownDone
        self.revenueReported = revenueReported
        self.purchaseCompletionsShown = purchaseCompletionsShown
        self.failuresShown = failuresShown
        self.contentKept = contentKept
    }

    /// The app showed its user the error of a failed transaction (or took a deferred one for failed).
    public struct ShownFailure: Sendable, Hashable {
        let transaction: PaymentTransaction

        public init(transaction: SKPaymentTransaction) { self.transaction = transaction.value }
    }

    /// The app moved the file of a finished download to its own storage.
    public struct KeptContent: Sendable, Hashable {
        let download: Download

        public init(download: SKDownload) { self.download = download.value }
    }

    /// The app told its user that the purchase it asked for with `payment` (the object it gave
    /// `SKPaymentQueue.add(_:)`) completed with `transaction` (purchased or failed).
    public struct PurchaseCompletion: Sendable, Hashable {
        /// The transaction `payment` made, when the queue delivered it to this launch.
        let paymentTransaction: TransactionKey?
        let transaction: PaymentTransaction

        public init(payment: SKPayment, transaction: SKPaymentTransaction) {
            paymentTransaction = payment.madeTransaction
            self.transaction = transaction.value
        }
    }
}
