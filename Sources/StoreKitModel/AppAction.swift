/// What an app did with what the queue told it, recorded so that invariants about apps (not
/// only about the queue) are checkable from the log alone. Observers report these through
/// `PaymentQueue`; they reach the log as `recordAppAction` commands like every other app action.
public enum AppAction: Sendable, Hashable {
    /// The app gave the user what the transaction paid for (unlocked, credited).
    case contentGranted(TransactionKey, observer: String, productIdentifier: String)
    /// The app moved a finished download's file to its own persistent storage (R-D3).
    case contentKept(DownloadKey, observer: String)
    /// The app told the user that a restore is done (R-O3).
    case restoreShownDone(device: String, restore: UInt64, observer: String)
    /// The app showed a failed transaction's error to the user (R-O1).
    case failureShown(TransactionKey, observer: String)
    /// The app's own state says it told something about the transaction to its user or to its
    /// analytics (`AppReport`), as StoreKitSim reads it from the app (docs/invariants.md).
    case transactionReported(TransactionKey, observer: String, report: AppReport)

    public var device: String {
        switch self {
        case .contentGranted(let key, _, _), .failureShown(let key, _), .transactionReported(let key, _, _): key.device
        case .contentKept(let key, _): key.transaction.device
        case .restoreShownDone(let device, _, _): device
        }
    }

    /// The observer that did it.
    public var observer: String {
        switch self {
        case .contentGranted(_, let observer, _), .contentKept(_, let observer), .restoreShownDone(_, _, let observer),
             .failureShown(_, let observer), .transactionReported(_, let observer, _):
            observer
        }
    }

    /// A short, stable name (the JSON `action`).
    public var name: String {
        switch self {
        case .contentGranted: "contentGranted"
        case .contentKept: "contentKept"
        case .restoreShownDone: "restoreShownDone"
        case .failureShown: "failureShown"
        case .transactionReported: "transactionReported"
        }
    }
}

extension AppAction: CustomStringConvertible {
    /// As `log cat` prints it: the action's name and what it concerns, without Swift's type names.
    public var description: String {
        switch self {
        case .contentGranted(let key, let observer, let product): "contentGranted(\(key), \(product), by \(observer))"
        case .contentKept(let key, let observer): "contentKept(\(key), by \(observer))"
        case .restoreShownDone(let device, let restore, let observer): "restoreShownDone(\(device) restore \(restore), by \(observer))"
        case .failureShown(let key, let observer): "failureShown(\(key), by \(observer))"
        case .transactionReported(let key, let observer, let report): "transactionReported(\(key), \(report), by \(observer))"
        }
    }
}

/// What an app told about a transaction, read from its own state (StoreKitSim's `AppBelief`).
public enum AppReport: UInt8, Sendable, Hashable, CaseIterable, CustomStringConvertible {
    /// Its analytics (a passive observer) reported the transaction as revenue.
    case revenue = 1
    /// It credited a restored transaction as a new purchase: keyed by the restored transaction's own
    /// identifier rather than its original purchase's.
    case creditedAsNewPurchase = 2
    /// It told its user that a purchase it asked for (`SKPaymentQueue.add(_:)`) completed with the
    /// transaction, which that payment made.
    case purchaseCompletionShown = 3
    /// It told its user that a purchase it asked for completed with the transaction, which another
    /// payment made (an earlier launch's, another product's, another request's).
    case otherPurchaseCompletionShown = 4

    public var description: String {
        switch self {
        case .revenue: "revenue"
        case .creditedAsNewPurchase: "credited as a new purchase"
        case .purchaseCompletionShown: "shown as its purchase's completion"
        case .otherPurchaseCompletionShown: "shown as another purchase's completion"
        }
    }
}
