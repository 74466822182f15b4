/// Every state change of the simulated system. The log holds these; state is a fold over them.
public enum Event: Sendable, Hashable {
    /// First event of every run: the seed every random choice derives from, and every
    /// input of the run (scenario, catalog, versions), so a log alone reproduces it.
    indirect case runStarted(RunHeader)
    case deviceRegistered(device: String, account: String)
    case appLaunched(device: String)
    case appTerminated(device: String)
    case observerAttached(device: String, observer: String)
    case observerDetached(device: String, observer: String)
    case paymentsAllowedChanged(device: String, allowed: Bool)
    /// A new transaction in state `purchasing` (R-Q7).
    case transactionAdded(TransactionKey, Payment)
    case transactionDeferred(TransactionKey)
    case transactionPurchased(TransactionKey, identifier: String, downloads: [HostedContent], charged: Bool)
    case transactionFailed(TransactionKey, StoreError)
    case restoreStarted(device: String, restore: UInt64, applicationUsername: String?)
    /// A new transaction in state `restored` with a copy of the original (R-Q9, R-T3).
    indirect case transactionRestored(TransactionKey, restore: UInt64, identifier: String, original: OriginalTransaction, downloads: [HostedContent])
    case restoreFinished(device: String, restore: UInt64)
    case restoreFailed(device: String, restore: UInt64, error: StoreError)
    /// Removed from the queue (R-Q8); observers hear `removedTransactions`.
    case transactionFinished(TransactionKey)
    case downloadStarted(DownloadKey)
    case downloadProgressed(DownloadKey, progress: Double, timeRemaining: Double)
    case downloadPaused(DownloadKey)
    case downloadResumed(DownloadKey)
    case downloadFinished(DownloadKey, contentURL: String)
    case downloadFailed(DownloadKey, error: StoreError)
    case downloadCancelled(DownloadKey)
    /// A command the queue refused, with its whole body; nothing else changed.
    indirect case commandRejected(CommandBody, Rejection)
    /// Something the app did (granted content, kept a file, showed a restore done or a failure).
    case appActionRecorded(AppAction)
    /// The parent declined an Ask to Buy request: StoreKit makes no callback and the
    /// transaction stays deferred (F-A1); only the store hears of it, so it never decides again.
    case askToBuyDeclined(TransactionKey)
    /// The store renewed an auto-renewable subscription at the end of its period (F-U1): a new
    /// transaction in state `purchased` whose `originalTransaction` is the subscription's first purchase.
    indirect case subscriptionRenewed(TransactionKey, identifier: String, original: OriginalTransaction, downloads: [HostedContent])
    /// The subscription that `original` started ended (cancelled, renewals exhausted, replaced in its
    /// group, or expired by a test command, F-U2). No callback: the app learns it from the receipt.
    indirect case subscriptionExpired(device: String, original: OriginalTransaction)
    /// The purchase `original` was refunded (F-K1): the app hears
    /// `paymentQueue(_:didRevokeEntitlementsForProductIdentifiers:)` with its product.
    indirect case entitlementsRevoked(device: String, original: OriginalTransaction)
    /// The user fixed what interrupted the purchase `interrupted` (it failed with paymentCancelled) and
    /// bought after all (F-I1): the same unit then adds `key` and purchases it, with no `purchasing`
    /// callback, so observers hear the failure, then a new purchased transaction.
    case interruptedPurchaseResumed(TransactionKey, interrupted: TransactionKey)
    /// The renewal of the subscription `original` started could not be billed (F-B1): the store retries
    /// billing, and the user stays entitled for `gracePeriodNanoseconds` of simulated time (0: no grace
    /// period). No callback; a recovery is a `subscriptionRenewed`, the end a `subscriptionExpired`.
    indirect case subscriptionBillingRetry(device: String, original: OriginalTransaction, gracePeriodNanoseconds: Int64)
    /// SKTestSession's `clearTransactions` (F-T2): the store forgot every purchase of the device's account
    /// (nothing is owned, restored or renewed any more). No callback; the queue's unfinished transactions stay.
    case transactionsCleared(device: String)
    /// The app asked for the latest receipt (SKReceiptRefreshRequest, R-R2); `request` numbers it on the device.
    case receiptRefreshStarted(device: String, request: UInt64)
    /// One piece of the refreshed receipt (R-R2): every charged purchase of the account on any device,
    /// consumables only until the app finished them, from `firstIndex` on. No transaction is created;
    /// with the last piece the observers hear `requestDidFinish` with the whole receipt.
    case receiptDelivered(device: String, request: UInt64, firstIndex: Int, entries: [OriginalTransaction], isLast: Bool)

    /// The device the event concerns, or nil for run-wide events.
    public var device: String? {
        switch self {
        case .runStarted: nil
        case .deviceRegistered(let device, _), .appLaunched(let device), .appTerminated(let device),
             .observerAttached(let device, _), .observerDetached(let device, _),
             .paymentsAllowedChanged(let device, _), .restoreStarted(let device, _, _),
             .restoreFinished(let device, _), .restoreFailed(let device, _, _),
             .subscriptionExpired(let device, _), .entitlementsRevoked(let device, _), .subscriptionBillingRetry(let device, _, _),
             .transactionsCleared(let device), .receiptRefreshStarted(let device, _), .receiptDelivered(let device, _, _, _, _):
            device
        case .commandRejected(let command, _):
            command.device
        case .appActionRecorded(let action):
            action.device
        case .transactionAdded(let key, _), .transactionDeferred(let key), .transactionPurchased(let key, _, _, _),
             .transactionFailed(let key, _), .transactionRestored(let key, _, _, _, _), .transactionFinished(let key),
             .askToBuyDeclined(let key), .subscriptionRenewed(let key, _, _, _), .interruptedPurchaseResumed(let key, _):
            key.device
        case .downloadStarted(let key), .downloadProgressed(let key, _, _), .downloadPaused(let key),
             .downloadResumed(let key), .downloadFinished(let key, _), .downloadFailed(let key, _),
             .downloadCancelled(let key):
            key.transaction.device
        }
    }

    /// A short, stable name (also the JSON `type`).
    public var name: String {
        switch self {
        case .runStarted: "runStarted"
        case .deviceRegistered: "deviceRegistered"
        case .appLaunched: "appLaunched"
        case .appTerminated: "appTerminated"
        case .observerAttached: "observerAttached"
        case .observerDetached: "observerDetached"
        case .paymentsAllowedChanged: "paymentsAllowedChanged"
        case .transactionAdded: "transactionAdded"
        case .transactionDeferred: "transactionDeferred"
        case .transactionPurchased: "transactionPurchased"
        case .transactionFailed: "transactionFailed"
        case .restoreStarted: "restoreStarted"
        case .transactionRestored: "transactionRestored"
        case .restoreFinished: "restoreFinished"
        case .restoreFailed: "restoreFailed"
        case .transactionFinished: "transactionFinished"
        case .downloadStarted: "downloadStarted"
        case .downloadProgressed: "downloadProgressed"
        case .downloadPaused: "downloadPaused"
        case .downloadResumed: "downloadResumed"
        case .downloadFinished: "downloadFinished"
        case .downloadFailed: "downloadFailed"
        case .downloadCancelled: "downloadCancelled"
        case .commandRejected: "commandRejected"
        case .appActionRecorded: "appActionRecorded"
        case .askToBuyDeclined: "askToBuyDeclined"
        case .subscriptionRenewed: "subscriptionRenewed"
        case .subscriptionExpired: "subscriptionExpired"
        case .entitlementsRevoked: "entitlementsRevoked"
        case .interruptedPurchaseResumed: "interruptedPurchaseResumed"
        case .subscriptionBillingRetry: "subscriptionBillingRetry"
        case .transactionsCleared: "transactionsCleared"
        case .receiptRefreshStarted: "receiptRefreshStarted"
        case .receiptDelivered: "receiptDelivered"
        }
    }
}

extension Event {
    /// Every event type's name, as `name` gives it and `log cat --type` takes it.
    public static let typeNames = [
        "runStarted", "deviceRegistered", "appLaunched", "appTerminated", "observerAttached", "observerDetached",
        "paymentsAllowedChanged", "transactionAdded", "transactionDeferred", "transactionPurchased", "transactionFailed",
        "restoreStarted", "transactionRestored", "restoreFinished", "restoreFailed", "transactionFinished",
        "downloadStarted", "downloadProgressed", "downloadPaused", "downloadResumed", "downloadFinished",
        "downloadFailed", "downloadCancelled", "commandRejected", "appActionRecorded",
        "askToBuyDeclined", "subscriptionRenewed", "subscriptionExpired", "entitlementsRevoked",
        "interruptedPurchaseResumed", "subscriptionBillingRetry", "transactionsCleared",
        "receiptRefreshStarted", "receiptDelivered",
    ]

    /// The transaction an event is about (downloads included), if any.
    public var transactionKey: TransactionKey? {
        switch self {
        case .transactionAdded(let key, _), .transactionDeferred(let key), .transactionPurchased(let key, _, _, _),
             .transactionFailed(let key, _), .transactionRestored(let key, _, _, _, _), .transactionFinished(let key),
             .askToBuyDeclined(let key), .subscriptionRenewed(let key, _, _, _):
            key
        case .downloadStarted(let key), .downloadProgressed(let key, _, _), .downloadPaused(let key),
             .downloadResumed(let key), .downloadFinished(let key, _), .downloadFailed(let key, _),
             .downloadCancelled(let key):
            key.transaction
        default:
            nil
        }
    }
}

extension Event {
    /// A refusal whose command id must not enter the command window (see `CommandWindow.isFarAhead`
    /// and `isOriginOverLimit`).
    var isOutOfWindowRejection: Bool {
        if case .commandRejected(_, let rejection) = self {
            return rejection.code == .commandNumberOutOfWindow || rejection.code == .tooManySenders
        }
        return false
    }
}

/// An event as the log holds it: its place in the partition, when it happened
/// (nanoseconds of injected time) and the command that caused it, if any.
public struct RecordedEvent: Sendable, Hashable {
    public var sequence: UInt64
    public var timestamp: Int64
    public var commandID: CommandID?
    public var event: Event

    public init(sequence: UInt64, timestamp: Int64, commandID: CommandID?, event: Event) {
        self.sequence = sequence
        self.timestamp = timestamp
        self.commandID = commandID
        self.event = event
    }
}

/// Everything a run was started with, recorded in its first event: the whole scenario,
/// the whole catalog, the versions, and when the run started by the wall clock (0 in a
/// deterministic run, so its log does not depend on when it ran). Timestamps of every
/// event are nanoseconds since this start.
public struct RunHeader: Sendable, Hashable {
    public var seed: UInt64
    public var sksimVersion: String
    /// "deterministic" or "live".
    public var runtime: String
    public var startedAtUnixNanoseconds: Int64
    /// The scenario as JSON (keys sorted; documented in docs/log-format.md).
    public var scenario: String
    /// Where the catalog came from: "built-in sample" or the file's name (never a full path).
    public var catalogSource: String
    /// FNV-1a 64 of `catalog`, 16 hex digits.
    public var catalogDigest: String
    /// The catalog in sksim's native JSON format.
    public var catalog: String

    public init(seed: UInt64, sksimVersion: String, runtime: String, startedAtUnixNanoseconds: Int64, scenario: String,
                catalogSource: String, catalogDigest: String, catalog: String) {
        self.seed = seed
        self.sksimVersion = sksimVersion
        self.runtime = runtime
        self.startedAtUnixNanoseconds = startedAtUnixNanoseconds
        self.scenario = scenario
        self.catalogSource = catalogSource
        self.catalogDigest = catalogDigest
        self.catalog = catalog
    }

    /// FNV-1a 64 over bytes, as 16 lowercase hex digits.
    public static func digest(_ bytes: some Sequence<UInt8>) -> String {
        let digits = String(fnv1a64(bytes), radix: 16)
        return String(repeating: "0", count: 16 - digits.count) + digits
    }
}

/// FNV-1a, 64 bits: a small, stable hash (Swift's `Hasher` is seeded per process, so it
/// cannot name anything that must be the same across runs and machines).
public func fnv1a64(_ bytes: some Sequence<UInt8>) -> UInt64 {
    var hash: UInt64 = 0xCBF2_9CE4_8422_2325
    for byte in bytes { hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01B3 }
    return hash
}

/// The version of sksim, recorded in every log it writes.
public let sksimVersion = "0.3.0"
