import StoreKitModel

/// Rewrites the names of one copy of a recording (`--loop`): every device and account
/// name `X` becomes `X~k` in copy `k` (copy 1 keeps the recorded names), wherever it
/// appears: keys, identifiers (`device.number`), content paths, usernames and the
/// messages of errors and rejections. Command origins become `origin~k`, so the queue
/// does not take one copy's commands for another's duplicates.
struct LoopRenaming {
    let copy: Int
    /// The recording's device and account names (learnt from `deviceRegistered` as units arrive).
    private(set) var names: Set<String> = []

    init(copy: Int) {
        self.copy = copy
    }

    mutating func learn(_ event: Event) {
        if case .deviceRegistered(let device, let account) = event {
            names.insert(device)
            names.insert(account)
        }
    }

    var suffix: String { "~\(copy)" }

    /// Renames every whole name token in `text`. Tokens are runs of letters, digits, `-` and
    /// `_`, so `device-0001.3`, `content/device-0001/3/x` and `'device-0001'` all rename.
    func rename(_ text: String) -> String {
        if names.contains(text) { return text + suffix }
        var result = ""
        var token = ""
        var changed = false
        func flush() {
            if names.contains(token) {
                result += token + suffix
                changed = true
            } else {
                result += token
            }
            token = ""
        }
        for character in text {
            if character.isLetter || character.isNumber || character == "-" || character == "_" {
                token.append(character)
            } else {
                flush()
                result.append(character)
            }
        }
        flush()
        return changed ? result : text
    }

    func rename(_ id: CommandID) -> CommandID { CommandID(origin: id.origin + suffix, number: id.number) }
    func rename(_ key: TransactionKey) -> TransactionKey { TransactionKey(device: rename(key.device), number: key.number) }
    func rename(_ key: DownloadKey) -> DownloadKey { DownloadKey(transaction: rename(key.transaction), index: key.index) }
    func rename(_ error: StoreError) -> StoreError { StoreError(error.code, rename(error.message)) }
    func rename(_ keys: [DownloadKey]) -> [DownloadKey] { keys.map { rename($0) } }
    func rename(_ username: String?) -> String? { username.map { rename($0) } }

    func rename(_ payment: Payment) -> Payment {
        var renamed = payment
        renamed.applicationUsername = rename(payment.applicationUsername)
        return renamed
    }

    /// The same original under the renamed identifier and account: every other field (its date, the
    /// offers a receipt marks it with) as recorded.
    func rename(_ original: OriginalTransaction) -> OriginalTransaction {
        var renamed = original
        renamed.transactionIdentifier = rename(original.transactionIdentifier)
        renamed.payment = rename(original.payment)
        return renamed
    }

    func rename(_ body: CommandBody) -> CommandBody {
        switch body {
        case .registerDevice(let device, let account): .registerDevice(device: rename(device), account: rename(account))
        case .launchApp(let device): .launchApp(device: rename(device))
        case .terminateApp(let device): .terminateApp(device: rename(device))
        case .attachObserver(let device, let observer): .attachObserver(device: rename(device), observer: observer)
        case .detachObserver(let device, let observer): .detachObserver(device: rename(device), observer: observer)
        case .setPaymentsAllowed(let device, let allowed): .setPaymentsAllowed(device: rename(device), allowed: allowed)
        case .addPayment(let device, let payment): .addPayment(device: rename(device), payment: rename(payment))
        case .finishTransaction(let key): .finishTransaction(rename(key))
        case .restoreCompletedTransactions(let device, let username):
            .restoreCompletedTransactions(device: rename(device), applicationUsername: rename(username))
        case .startDownloads(let keys): .startDownloads(rename(keys))
        case .pauseDownloads(let keys): .pauseDownloads(rename(keys))
        case .resumeDownloads(let keys): .resumeDownloads(rename(keys))
        case .cancelDownloads(let keys): .cancelDownloads(rename(keys))
        case .decidePurchase(let key, let decision):
            switch decision {
            case .failed(let error): .decidePurchase(rename(key), .failed(rename(error)))
            case .purchased, .deferred, .declined: .decidePurchase(rename(key), decision)
            }
        case .completeRestore(let device, let restore, let firstIndex, let originals, let isLast):
            .completeRestore(device: rename(device), restore: restore, firstIndex: firstIndex, originals: originals.map { rename($0) }, isLast: isLast)
        case .failRestore(let device, let restore, let error): .failRestore(device: rename(device), restore: restore, error: rename(error))
        case .reportDownloadProgress(let key, let progress, let timeRemaining):
            .reportDownloadProgress(rename(key), progress: progress, timeRemaining: timeRemaining)
        case .completeDownload(let key, let contentURL): .completeDownload(rename(key), contentURL: rename(contentURL))
        case .failDownload(let key, let error): .failDownload(rename(key), error: rename(error))
        case .recordAppAction(let action): .recordAppAction(rename(action))
        case .renewSubscription(let device, let original): .renewSubscription(device: rename(device), original: rename(original))
        case .expireSubscription(let device, let original): .expireSubscription(device: rename(device), original: rename(original))
        case .refundPurchase(let device, let original): .refundPurchase(device: rename(device), original: rename(original))
        case .resumeInterruptedPurchase(let device, let interrupted, let payment, let charged):
            .resumeInterruptedPurchase(device: rename(device), interrupted: rename(interrupted), payment: rename(payment), charged: charged)
        case .beginBillingRetry(let device, let original, let grace):
            .beginBillingRetry(device: rename(device), original: rename(original), gracePeriodNanoseconds: grace)
        case .clearTransactions(let device): .clearTransactions(device: rename(device))
        case .refreshReceipt(let device): .refreshReceipt(device: rename(device))
        case .deliverReceipt(let device, let request, let firstIndex, let entries, let isLast):
            .deliverReceipt(device: rename(device), request: request, firstIndex: firstIndex, entries: entries.map(rename), isLast: isLast)
        }
    }

    func rename(_ action: AppAction) -> AppAction {
        switch action {
        case .contentGranted(let key, let observer, let product): .contentGranted(rename(key), observer: observer, productIdentifier: product)
        case .contentKept(let key, let observer): .contentKept(rename(key), observer: observer)
        case .restoreShownDone(let device, let restore, let observer): .restoreShownDone(device: rename(device), restore: restore, observer: observer)
        case .failureShown(let key, let observer): .failureShown(rename(key), observer: observer)
        case .transactionReported(let key, let observer, let report): .transactionReported(rename(key), observer: observer, report: report)
        }
    }

    func rename(_ event: Event) -> Event {
        switch event {
        case .runStarted: event
        case .deviceRegistered(let device, let account): .deviceRegistered(device: rename(device), account: rename(account))
        case .appLaunched(let device): .appLaunched(device: rename(device))
        case .appTerminated(let device): .appTerminated(device: rename(device))
        case .observerAttached(let device, let observer): .observerAttached(device: rename(device), observer: observer)
        case .observerDetached(let device, let observer): .observerDetached(device: rename(device), observer: observer)
        case .paymentsAllowedChanged(let device, let allowed): .paymentsAllowedChanged(device: rename(device), allowed: allowed)
        case .transactionAdded(let key, let payment): .transactionAdded(rename(key), rename(payment))
        case .transactionDeferred(let key): .transactionDeferred(rename(key))
        case .transactionPurchased(let key, let identifier, let downloads, let charged):
            .transactionPurchased(rename(key), identifier: rename(identifier), downloads: downloads, charged: charged)
        case .transactionFailed(let key, let error): .transactionFailed(rename(key), rename(error))
        case .restoreStarted(let device, let restore, let username):
            .restoreStarted(device: rename(device), restore: restore, applicationUsername: rename(username))
        case .transactionRestored(let key, let restore, let identifier, let original, let downloads):
            .transactionRestored(rename(key), restore: restore, identifier: rename(identifier), original: rename(original), downloads: downloads)
        case .restoreFinished(let device, let restore): .restoreFinished(device: rename(device), restore: restore)
        case .restoreFailed(let device, let restore, let error): .restoreFailed(device: rename(device), restore: restore, error: rename(error))
        case .transactionFinished(let key): .transactionFinished(rename(key))
        case .downloadStarted(let key): .downloadStarted(rename(key))
        case .downloadProgressed(let key, let progress, let timeRemaining):
            .downloadProgressed(rename(key), progress: progress, timeRemaining: timeRemaining)
        case .downloadPaused(let key): .downloadPaused(rename(key))
        case .downloadResumed(let key): .downloadResumed(rename(key))
        case .downloadFinished(let key, let contentURL): .downloadFinished(rename(key), contentURL: rename(contentURL))
        case .downloadFailed(let key, let error): .downloadFailed(rename(key), error: rename(error))
        case .downloadCancelled(let key): .downloadCancelled(rename(key))
        case .commandRejected(let body, let rejection): .commandRejected(rename(body), Rejection(rejection.code, rename(rejection.message)))
        case .appActionRecorded(let action): .appActionRecorded(rename(action))
        case .askToBuyDeclined(let key): .askToBuyDeclined(rename(key))
        case .subscriptionRenewed(let key, let identifier, let original, let downloads):
            .subscriptionRenewed(rename(key), identifier: rename(identifier), original: rename(original), downloads: downloads)
        case .subscriptionExpired(let device, let original): .subscriptionExpired(device: rename(device), original: rename(original))
        case .entitlementsRevoked(let device, let original): .entitlementsRevoked(device: rename(device), original: rename(original))
        case .interruptedPurchaseResumed(let key, let interrupted): .interruptedPurchaseResumed(rename(key), interrupted: rename(interrupted))
        case .subscriptionBillingRetry(let device, let original, let grace):
            .subscriptionBillingRetry(device: rename(device), original: rename(original), gracePeriodNanoseconds: grace)
        case .transactionsCleared(let device): .transactionsCleared(device: rename(device))
        case .receiptRefreshStarted(let device, let request): .receiptRefreshStarted(device: rename(device), request: request)
        case .receiptDelivered(let device, let request, let firstIndex, let entries, let isLast):
            .receiptDelivered(device: rename(device), request: request, firstIndex: firstIndex, entries: entries.map(rename), isLast: isLast)
        }
    }

    /// The unit as copy `copy` of the recording: names, origins and the expected bytes rewritten.
    func rename(_ unit: RecordedUnit, timeOffset: Int64) -> RecordedUnit {
        var renamed = unit
        renamed.copy = copy
        renamed.timestamp += timeOffset
        if copy == 1 && timeOffset == 0 { return renamed }
        renamed.isVerbatim = false
        renamed.commandID = unit.commandID.map { rename($0) }
        renamed.body = unit.body.map { rename($0) }
        renamed.device = rename(unit.device)
        renamed.events = unit.events.map { recorded in
            RecordedEvent(sequence: recorded.sequence, timestamp: recorded.timestamp + timeOffset,
                          commandID: renamed.commandID, event: rename(recorded.event))
        }
        renamed.payloads = renamed.events.map { EventCodec.encode($0.event, commandID: $0.commandID) }
        return renamed
    }
}
