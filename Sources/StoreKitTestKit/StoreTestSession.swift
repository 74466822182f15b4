import StoreKitModel

/// SKTestSession's per-transaction controls as store commands (F-T1), for tests that drive the
/// queue without a store role. Each is the command the simulated store itself sends, so what a
/// test does here is what a run logs.
public enum StoreTestSession {
    /// `approveAskToBuyTransaction`: a deferred purchase is bought.
    public static func approveAskToBuy(_ key: TransactionKey) -> CommandBody { .decidePurchase(key, .purchased(charged: true)) }
    /// `declineAskToBuyTransaction`: it stays deferred, with no callback (F-A1).
    public static func declineAskToBuy(_ key: TransactionKey) -> CommandBody { .decidePurchase(key, .declined) }
    /// `failTransactionsEnabled` with a `failureError`, for one purchase.
    public static func fail(_ key: TransactionKey, with code: StoreError.Code) -> CommandBody {
        .decidePurchase(key, .failed(StoreError(code, "failed by the test session")))
    }
    /// `refundTransaction`: the app hears `didRevokeEntitlementsForProductIdentifiers` (F-K1).
    public static func refund(_ transaction: PaymentTransaction) -> CommandBody? {
        original(of: transaction).map { .refundPurchase(device: transaction.key.device, original: $0) }
    }
    /// `forceRenewalOfSubscription`: a renewal now, whatever the period (F-U1).
    public static func forceRenewal(_ transaction: PaymentTransaction) -> CommandBody? {
        original(of: transaction).map { .renewSubscription(device: transaction.key.device, original: $0) }
    }
    /// `expireSubscription`: the subscription ends now (F-U2).
    public static func expire(_ transaction: PaymentTransaction) -> CommandBody? {
        original(of: transaction).map { .expireSubscription(device: transaction.key.device, original: $0) }
    }

    /// `interruptedPurchasesEnabled`, for one purchase: it fails with paymentCancelled as the store's
    /// interruption does (F-I1); `resolveIssue` then buys it after all.
    public static func interrupt(_ key: TransactionKey) -> CommandBody {
        .decidePurchase(key, .failed(StoreError(.paymentCancelled, "the purchase was interrupted by the test session (F-I1)")))
    }
    /// `resolveIssueForTransaction` on an interrupted purchase: the user fixed the account, and a new
    /// transaction for the same payment arrives purchased (F-I1).
    public static func resolveIssue(_ interrupted: PaymentTransaction, charged: Bool = true) -> CommandBody {
        .resumeInterruptedPurchase(device: interrupted.key.device, interrupted: interrupted.key, payment: interrupted.payment, charged: charged)
    }

    /// Xcode's renewal billing issue, for one subscription: billing retry begins now, with a grace
    /// period of `gracePeriodNanoseconds` (0: none) (F-B1). `forceRenewal` is the recovery
    /// (SKTestSession's `resolveIssueForTransaction`), `expire` the end.
    public static func billingIssue(original: OriginalTransaction, device: String, gracePeriodNanoseconds: Int64 = 0) -> CommandBody {
        .beginBillingRetry(device: device, original: original, gracePeriodNanoseconds: gracePeriodNanoseconds)
    }

    /// `clearTransactions`: the store forgets every purchase of the device's account (F-T2).
    public static func clearTransactions(device: String) -> CommandBody { .clearTransactions(device: device) }

    /// SKReceiptRefreshRequest (R-R2), as the app sends it: the store answers with `deliverReceipt` pieces.
    public static func refreshReceipt(device: String) -> CommandBody { .refreshReceipt(device: device) }

    /// The store's answer to receipt refresh `request` with `entries`, in pieces of at most
    /// `QueueProjection.maximumRestorePiece` (an empty receipt is one empty last piece) (R-R2).
    public static func deliverReceipt(device: String, request: UInt64, entries: [OriginalTransaction]) -> [CommandBody] {
        let size = QueueProjection.maximumRestorePiece
        return stride(from: 0, through: max(0, entries.count - 1), by: size).map { first in
            let end = min(entries.count, first + size)
            return .deliverReceipt(device: device, request: request, firstIndex: first, entries: Array(entries[first..<end]),
                                   isLast: end == entries.count)
        }
    }

    /// The receipt refresh `request` of `device` delivered, assembled from its pieces in `events`; nil
    /// until its last piece is there (R-R2).
    public static func receipt(in events: [Event], device: String, request: UInt64) -> [OriginalTransaction]? {
        var entries: [OriginalTransaction] = []
        for event in events {
            guard case .receiptDelivered(device, request, _, let piece, let isLast) = event else { continue }
            entries += piece
            if isLast { return entries }
        }
        return nil
    }

    /// The purchase a transaction stands for: its own, or for a renewal or a restore the first one.
    public static func original(of transaction: PaymentTransaction) -> OriginalTransaction? {
        if let original = transaction.originalTransaction { return original }
        guard let identifier = transaction.transactionIdentifier, let date = transaction.transactionDate else { return nil }
        return OriginalTransaction(transactionIdentifier: identifier, payment: transaction.payment.withoutDiscount, transactionDate: date)
    }
}
