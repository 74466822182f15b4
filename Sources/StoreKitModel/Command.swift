/// A command's unique id: who sent it and that sender's counter. The queue applies each
/// id at most once, so a sender can retry until it sees the resulting event.
public struct CommandID: Sendable, Hashable, CustomStringConvertible {
    public var origin: String
    public var number: UInt64

    public init(origin: String, number: UInt64) {
        self.origin = origin
        self.number = number
    }

    public var description: String { "\(origin):\(number)" }
}

/// What the store decided about a purchasing (or deferred) transaction.
public enum StoreDecision: Sendable, Hashable {
    /// Paid. `charged` is false when the account already owned the non-consumable (R-R4).
    case purchased(charged: Bool)
    case failed(StoreError)
    /// Waiting for a parent's approval (Ask to Buy); a later decision completes it.
    case deferred
    /// The parent declined a deferred purchase: no callback, it stays deferred (F-A1).
    case declined
}

/// Everything that can ask the queue to change state. Apps, the store and the
/// downloader send commands; the queue validates each against its projection.
public enum CommandBody: Sendable, Hashable {
    // The app (device) side.
    case registerDevice(device: String, account: String)
    case launchApp(device: String)
    case terminateApp(device: String)
    case attachObserver(device: String, observer: String)
    case detachObserver(device: String, observer: String)
    case setPaymentsAllowed(device: String, allowed: Bool)
    case addPayment(device: String, payment: Payment)
    case finishTransaction(TransactionKey)
    case restoreCompletedTransactions(device: String, applicationUsername: String?)
    case startDownloads([DownloadKey])
    case pauseDownloads([DownloadKey])
    case resumeDownloads([DownloadKey])
    case cancelDownloads([DownloadKey])
    /// The app reports what it did (`AppAction`), so invariants about apps are checkable from the log.
    case recordAppAction(AppAction)
    // The store side.
    case decidePurchase(TransactionKey, StoreDecision)
    /// One piece of a restore's answer: the account's restorable transactions from
    /// `firstIndex` on, at most `QueueProjection.maximumRestorePiece` of them; the last
    /// piece ends the restore. Pieces keep every command small whatever the history.
    case completeRestore(device: String, restore: UInt64, firstIndex: Int, originals: [OriginalTransaction], isLast: Bool)
    case failRestore(device: String, restore: UInt64, error: StoreError)
    /// Renews the subscription `original` started, on the device that bought it (F-U1); also
    /// SKTestSession's `forceRenewalOfSubscription`.
    indirect case renewSubscription(device: String, original: OriginalTransaction)
    /// Ends the subscription `original` started (F-U2); also SKTestSession's `expireSubscription`.
    indirect case expireSubscription(device: String, original: OriginalTransaction)
    /// Refunds the purchase `original` (F-K1); SKTestSession's `refundTransaction`.
    indirect case refundPurchase(device: String, original: OriginalTransaction)
    /// The user fixed what interrupted the purchase `interrupted` (F-I1): a new transaction for
    /// `payment`, purchased at once; `charged` as in `decidePurchase` (R-R4).
    indirect case resumeInterruptedPurchase(device: String, interrupted: TransactionKey, payment: Payment, charged: Bool)
    /// The subscription `original` started could not be billed at its period end (F-B1): billing
    /// retry begins, with a grace period of `gracePeriodNanoseconds` (0: none).
    indirect case beginBillingRetry(device: String, original: OriginalTransaction, gracePeriodNanoseconds: Int64)
    /// SKTestSession's `clearTransactions` (F-T2): the store forgets every purchase of the device's account.
    case clearTransactions(device: String)
    /// SKReceiptRefreshRequest (R-R2): the app asks the store for the latest receipt. The queue
    /// numbers the request; the store answers it with `deliverReceipt` pieces.
    case refreshReceipt(device: String)
    /// One piece of a receipt refresh's answer (R-R2): the receipt's entries from `firstIndex` on, at
    /// most `QueueProjection.maximumRestorePiece` of them, like a restore's; the last piece ends the request.
    case deliverReceipt(device: String, request: UInt64, firstIndex: Int, entries: [OriginalTransaction], isLast: Bool)
    // The downloader side.
    case reportDownloadProgress(DownloadKey, progress: Double, timeRemaining: Double)
    case completeDownload(DownloadKey, contentURL: String)
    case failDownload(DownloadKey, error: StoreError)

    /// The device whose partition the command belongs to.
    public var device: String {
        switch self {
        case .registerDevice(let device, _), .launchApp(let device), .terminateApp(let device),
             .attachObserver(let device, _), .detachObserver(let device, _),
             .setPaymentsAllowed(let device, _), .addPayment(let device, _),
             .restoreCompletedTransactions(let device, _), .completeRestore(let device, _, _, _, _),
             .failRestore(let device, _, _), .renewSubscription(let device, _), .expireSubscription(let device, _),
             .refundPurchase(let device, _), .resumeInterruptedPurchase(let device, _, _, _), .beginBillingRetry(let device, _, _),
             .clearTransactions(let device), .refreshReceipt(let device), .deliverReceipt(let device, _, _, _, _):
            device
        case .finishTransaction(let key), .decidePurchase(let key, _):
            key.device
        case .recordAppAction(let action):
            action.device
        case .startDownloads(let keys), .pauseDownloads(let keys), .resumeDownloads(let keys), .cancelDownloads(let keys):
            keys.first?.transaction.device ?? ""
        case .reportDownloadProgress(let key, _, _), .completeDownload(let key, _), .failDownload(let key, _):
            key.transaction.device
        }
    }

    /// A short name for logs and reports.
    public var name: String {
        switch self {
        case .registerDevice: "registerDevice"
        case .launchApp: "launchApp"
        case .terminateApp: "terminateApp"
        case .attachObserver: "attachObserver"
        case .detachObserver: "detachObserver"
        case .setPaymentsAllowed: "setPaymentsAllowed"
        case .addPayment: "addPayment"
        case .finishTransaction: "finishTransaction"
        case .restoreCompletedTransactions: "restoreCompletedTransactions"
        case .startDownloads: "startDownloads"
        case .pauseDownloads: "pauseDownloads"
        case .resumeDownloads: "resumeDownloads"
        case .cancelDownloads: "cancelDownloads"
        case .recordAppAction: "recordAppAction"
        case .decidePurchase: "decidePurchase"
        case .completeRestore: "completeRestore"
        case .failRestore: "failRestore"
        case .reportDownloadProgress: "reportDownloadProgress"
        case .completeDownload: "completeDownload"
        case .failDownload: "failDownload"
        case .renewSubscription: "renewSubscription"
        case .expireSubscription: "expireSubscription"
        case .refundPurchase: "refundPurchase"
        case .resumeInterruptedPurchase: "resumeInterruptedPurchase"
        case .beginBillingRetry: "beginBillingRetry"
        case .clearTransactions: "clearTransactions"
        case .refreshReceipt: "refreshReceipt"
        case .deliverReceipt: "deliverReceipt"
        }
    }
}

public struct Command: Sendable, Hashable {
    public var id: CommandID
    public var body: CommandBody

    public init(id: CommandID, body: CommandBody) {
        self.id = id
        self.body = body
    }
}
