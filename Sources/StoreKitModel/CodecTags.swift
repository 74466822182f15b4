/// The tag byte that names each kind of event, command and app action in the binary encoding
/// (docs/log-format.md). `EventCodec` writes and reads them and `EncodedEventFold` reads them:
/// this is the one place their numbers are written. The numbers are part of the format: add new
/// cases with new numbers, never renumber.
enum EventTag: UInt8 {
    case runStarted = 1
    case deviceRegistered = 2
    case appLaunched = 3
    case appTerminated = 4
    case observerAttached = 5
    case observerDetached = 6
    case paymentsAllowedChanged = 7
    /// A payment without a discount; one with a discount is `transactionAddedWithDiscount` (F-O5).
    case transactionAdded = 8
    case transactionDeferred = 9
    case transactionPurchased = 10
    case transactionFailed = 11
    case restoreStarted = 12
    case transactionRestored = 13
    case restoreFinished = 14
    case restoreFailed = 15
    case transactionFinished = 16
    case downloadStarted = 17
    case downloadProgressed = 18
    case downloadPaused = 19
    case downloadResumed = 20
    case downloadFinished = 21
    case downloadFailed = 22
    case downloadCancelled = 23
    case commandRejected = 24
    case appActionRecorded = 25
    case askToBuyDeclined = 26
    case subscriptionRenewed = 27
    case subscriptionExpired = 28
    case entitlementsRevoked = 29
    case interruptedPurchaseResumed = 30
    case subscriptionBillingRetry = 31
    case transactionsCleared = 32
    case receiptRefreshStarted = 33
    /// A receipt piece with no entry at an offer.
    case receiptDelivered = 34
    /// A receipt piece with an entry at an introductory offer (F-O3).
    case receiptDeliveredWithIntroductoryOffers = 35
    case transactionAddedWithDiscount = 36
    /// A receipt piece with an entry at a promotional offer (F-O7).
    case receiptDeliveredWithPromotionalOffers = 37
}

/// The tag byte of each command body. See `EventTag` for the rule on numbers.
enum CommandTag: UInt8 {
    case registerDevice = 1
    case launchApp = 2
    case terminateApp = 3
    case attachObserver = 4
    case detachObserver = 5
    case setPaymentsAllowed = 6
    /// A payment without a discount; one with a discount is `addPaymentWithDiscount` (F-O5).
    case addPayment = 7
    case finishTransaction = 8
    case restoreCompletedTransactions = 9
    case startDownloads = 10
    case pauseDownloads = 11
    case resumeDownloads = 12
    case cancelDownloads = 13
    case decidePurchase = 14
    case completeRestore = 15
    case failRestore = 16
    case reportDownloadProgress = 17
    case completeDownload = 18
    case failDownload = 19
    case recordAppAction = 20
    case renewSubscription = 21
    case expireSubscription = 22
    case refundPurchase = 23
    case resumeInterruptedPurchase = 24
    case beginBillingRetry = 25
    case clearTransactions = 26
    case refreshReceipt = 27
    case deliverReceipt = 28
    case deliverReceiptWithIntroductoryOffers = 29
    case addPaymentWithDiscount = 30
    case deliverReceiptWithPromotionalOffers = 31
}

/// The tag byte of each store decision in a `decidePurchase` command.
enum StoreDecisionTag: UInt8 {
    case purchased = 0
    case failed = 1
    case deferred = 2
    case declined = 3
}

/// The tag byte of each app action in an `appActionRecorded` event or a `recordAppAction` command.
enum AppActionTag: UInt8 {
    case contentGranted = 1
    case contentKept = 2
    case restoreShownDone = 3
    case failureShown = 4
    case transactionReported = 5
}

extension BinaryWriter {
    mutating func write(tag: EventTag) { write(tag: tag.rawValue) }
    mutating func write(tag: CommandTag) { write(tag: tag.rawValue) }
    mutating func write(tag: StoreDecisionTag) { write(tag: tag.rawValue) }
    mutating func write(tag: AppActionTag) { write(tag: tag.rawValue) }
}
