/// What the queue does with a command.
public enum Decision: Sendable, Hashable {
    /// The events to append, in order (possibly none: finishing twice is harmless, R-Q8).
    case accept([Event])
    /// Refused; nothing changes but the logged rejection.
    case reject(Rejection)
    /// The same command id was applied already; nothing happens again.
    case duplicate
}

extension QueueProjection {
    /// Validates a command against the current state. Pure: the caller appends what is
    /// accepted (or a `commandRejected` event) and applies it.
    public func decide(_ command: Command, catalog: Catalog) -> Decision {
        if recentCommands.contains(command.id) { return .duplicate }
        if recentCommands.isFarAhead(command.id) {
            return .reject(Rejection(.commandNumberOutOfWindow,
                "command number \(command.id.number) of '\(command.id.origin)' is more than \(recentCommands.capacity) ahead of its last one (\(recentCommands.highest(of: command.id.origin))); senders number their commands 1, 2, 3, …"))
        }
        if recentCommands.isOriginOverLimit(command.id.origin) {
            return .reject(Rejection(.tooManySenders,
                "the queue remembers at most \(recentCommands.maximumOrigins) senders and '\(command.id.origin)' is a new one; reuse a sender name (origin) for all of one process's commands"))
        }
        do {
            return .accept(try events(for: command.body, catalog: catalog))
        } catch {
            return .reject(error)
        }
    }

    /// The event that records a refusal.
    public static func rejectionEvent(_ command: Command, _ rejection: Rejection) -> Event {
        .commandRejected(command.body, rejection)
    }

    // Devices are named by their slot and read in place (`deviceStates[slot].field`): a
    // `DeviceState` returned by value is a copy, every field retained and released, per command.
    private func existingSlot(_ name: String) throws(Rejection) -> Int {
        guard let slot = slot(of: name) else {
            throw Rejection(.unknownDevice, "device '\(name)' is not registered; register it (registerDevice) before sending it commands")
        }
        return slot
    }

    private func runningSlot(_ name: String) throws(Rejection) -> Int {
        let slot = try existingSlot(name)
        guard deviceStates[slot].isRunning else {
            throw Rejection(.appNotRunning, "the app on device '\(name)' is not running; launch it (launchApp) first")
        }
        return slot
    }

    private func pendingTransaction(_ key: TransactionKey, in slot: Int) throws(Rejection) -> PaymentTransaction {
        if let transaction = deviceStates[slot].pending[key.number] { return transaction }
        if deviceStates[slot].wasFinished(key.number) {
            throw Rejection(.transactionNotFound, "transaction \(key) was already finished; it is no longer in the queue (R-T4)")
        }
        throw Rejection(.transactionNotFound, "transaction \(key) does not exist on this device; use a key from updatedTransactions")
    }

    private func events(for body: CommandBody, catalog: Catalog) throws(Rejection) -> [Event] {
        switch body {
        case .registerDevice, .launchApp, .terminateApp, .attachObserver, .detachObserver, .setPaymentsAllowed, .recordAppAction:
            return try appEvents(body)
        case .addPayment, .decidePurchase, .resumeInterruptedPurchase, .finishTransaction:
            return try transactionEvents(body, catalog: catalog)
        case .restoreCompletedTransactions, .completeRestore, .failRestore, .refreshReceipt, .deliverReceipt:
            return try restoreAndReceiptEvents(body, catalog: catalog)
        case .startDownloads, .pauseDownloads, .resumeDownloads, .cancelDownloads, .reportDownloadProgress, .completeDownload, .failDownload:
            return try downloadCommandEvents(body)
        case .renewSubscription, .expireSubscription, .beginBillingRetry, .refundPurchase, .clearTransactions:
            return try storeActionEvents(body, catalog: catalog)
        }
    }

    /// The commands of an app and its device: registration, launches, observers, payments allowed, the app's own reports.
    private func appEvents(_ body: CommandBody) throws(Rejection) -> [Event] {
        switch body {
        case .registerDevice(let device, let account):
            try validateName(device, "device")
            // The downloader and the apps keep files under `content/<device>/…` and `apps/<device>/…`:
            // a name like `../../etc` would have them write and delete outside the run directory.
            guard FolderName.isSingleComponent(device) else {
                throw Rejection(.invalidArgument, "device name '\(device)' cannot name a folder (it holds '/' or a NUL byte, or is '.' or '..'); use letters, digits, '-', '_' or '.'")
            }
            try validateName(account, "account")
            guard !isRegistered(device) else {
                throw Rejection(.deviceAlreadyRegistered, "device '\(device)' is already registered; each app install registers once (R-Q2)")
            }
            guard deviceCount < maximumDevices else {
                throw Rejection(.tooManyDevices, "this queue holds its most devices (\(maximumDevices)); spread the devices over more queue partitions (docs/load-testing.md, section Partitions)")
            }
            return [.deviceRegistered(device: device, account: account)]

        case .launchApp(let name):
            let slot = try existingSlot(name)
            guard !deviceStates[slot].isRunning else {
                throw Rejection(.appAlreadyRunning, "the app on device '\(name)' is already running; terminate it before launching again")
            }
            return [.appLaunched(device: name)]

        case .terminateApp(let name):
            _ = try runningSlot(name)
            return [.appTerminated(device: name)]

        case .attachObserver(let name, let observer):
            try validateName(observer, "observer")
            let slot = try runningSlot(name)
            guard !deviceStates[slot].observers.contains(observer) else {
                throw Rejection(.observerAlreadyAttached, "observer '\(observer)' is already attached to device '\(name)'")
            }
            return [.observerAttached(device: name, observer: observer)]

        case .detachObserver(let name, let observer):
            let slot = try existingSlot(name)
            guard deviceStates[slot].observers.contains(observer) else {
                throw Rejection(.observerNotAttached, "observer '\(observer)' is not attached to device '\(name)'")
            }
            return [.observerDetached(device: name, observer: observer)]

        case .setPaymentsAllowed(let name, let allowed):
            _ = try existingSlot(name)
            return [.paymentsAllowedChanged(device: name, allowed: allowed)]

        case .recordAppAction(let action):
            // The app's own report: checked only for naming something this queue knows, so a
            // late report (after the transaction was finished) is still recorded as it happened.
            try validateName(action.observer, "observer")
            let slot = try existingSlot(action.device)
            switch action {
            case .contentGranted(let key, _, _), .failureShown(let key, _), .transactionReported(let key, _, _):
                try requireKnown(key, in: slot)
            case .contentKept(let key, _):
                try requireKnown(key.transaction, in: slot)
            case .restoreShownDone(_, let restore, _):
                guard restore >= 1, restore < deviceStates[slot].nextRestoreNumber else {
                    throw Rejection(.restoreNotInProgress, "restore \(restore) of device '\(deviceStates[slot].device)' was never started; report only restores the queue started")
                }
            }
            return [.appActionRecorded(action)]
        default:
            preconditionFailure("\(body.name) is not one of the commands appEvents decides")
        }
    }

    /// The commands of a transaction's life: the payment, the store's decision, an interrupted purchase resumed, the finish.
    private func transactionEvents(_ body: CommandBody, catalog: Catalog) throws(Rejection) -> [Event] {
        switch body {
        case .addPayment(let name, let payment):
            let slot = try runningSlot(name)
            guard payment.quantity > 0 else {
                throw Rejection(.invalidQuantity, "quantity must be greater than 0, got \(payment.quantity) for '\(payment.productIdentifier)' (R-Q7)")
            }
            guard payment.quantity <= Payment.maximumQuantity else {
                throw Rejection(.invalidQuantity, "quantity must be at most \(Payment.maximumQuantity), got \(payment.quantity) for '\(payment.productIdentifier)'; StoreKit sells at most \(Payment.maximumQuantity) of a product per payment (F-P1)")
            }
            guard catalog.contains(payment.productIdentifier) else {
                throw Rejection(.unknownProduct, "product '\(payment.productIdentifier)' is not in the store's catalog; use one of the catalog's product identifiers (R-Q7)")
            }
            guard deviceStates[slot].pending.count < Self.maximumPendingPerDevice else {
                throw Rejection(.invalidArgument, "device '\(name)' already has \(deviceStates[slot].pending.count) unfinished transactions; finish some before adding payments")
            }
            let key = TransactionKey(device: name, number: deviceStates[slot].nextTransactionNumber)
            guard deviceStates[slot].canMakePayments else {
                // StoreKit still creates the transaction; it fails at once and the observers hear it (R-Q1).
                return [.transactionAdded(key, payment),
                        .transactionFailed(key, StoreError(.paymentNotAllowed, "the user of device '\(name)' may not authorise payments (canMakePayments is false); check canMakePayments before offering a purchase"))]
            }
            return [.transactionAdded(key, payment)]

        case .decidePurchase(let key, let decision):
            let slot = try existingSlot(key.device)
            let transaction = try pendingTransaction(key, in: slot)
            guard transaction.transactionState == .purchasing || transaction.transactionState == .deferred else {
                throw Rejection(.transactionNotAwaitingStore, "transaction \(key) is \(transaction.transactionState); the store decides only purchasing or deferred transactions")
            }
            guard !deviceStates[slot].declined.contains(key.number) else {
                throw Rejection(.transactionNotAwaitingStore, "transaction \(key) was declined by the parent; it stays deferred and the store decides it no more (F-A1)")
            }
            switch decision {
            case .declined:
                guard transaction.transactionState == .deferred else {
                    throw Rejection(.transactionNotAwaitingStore, "transaction \(key) is \(transaction.transactionState); only a deferred (Ask to Buy) transaction can be declined")
                }
                return [.askToBuyDeclined(key)]
            case .deferred:
                guard transaction.transactionState == .purchasing else {
                    throw Rejection(.transactionNotAwaitingStore, "transaction \(key) is already deferred")
                }
                return [.transactionDeferred(key)]
            case .failed(let error):
                return [.transactionFailed(key, error)]
            case .purchased(let charged):
                let contents = catalog.index(of: transaction.payment.productIdentifier).map { catalog.products[$0].hostedContent } ?? []
                return [.transactionPurchased(key, identifier: Self.transactionIdentifier(key), downloads: contents, charged: charged)]
            }

        case .resumeInterruptedPurchase(let name, let interrupted, let payment, let charged):
            let slot = try existingSlot(name)
            guard interrupted.device == name, interrupted.number < deviceStates[slot].nextTransactionNumber else {
                throw Rejection(.transactionNotFound, "transaction \(interrupted) was never created on device '\(name)'; resume a purchase of this device that the store failed (F-I1)")
            }
            if let transaction = deviceStates[slot].pending[interrupted.number], transaction.transactionState != .failed {
                throw Rejection(.transactionNotAwaitingStore, "transaction \(interrupted) is \(transaction.transactionState); only a failed (interrupted) purchase can be resumed (F-I1)")
            }
            guard !deviceStates[slot].resumedInterruptions.contains(interrupted.number) else {
                throw Rejection(.invalidArgument, "the interrupted purchase \(interrupted) was resumed already; it resumes once (F-I1)")
            }
            guard (1...Payment.maximumQuantity).contains(payment.quantity) else {
                throw Rejection(.invalidQuantity, "quantity must be 1 to \(Payment.maximumQuantity), got \(payment.quantity) for '\(payment.productIdentifier)' (R-Q7, F-P1)")
            }
            guard let product = catalog.product(payment.productIdentifier) else {
                throw Rejection(.unknownProduct, "product '\(payment.productIdentifier)' is not in the store's catalog; use one of the catalog's product identifiers (R-Q7)")
            }
            guard deviceStates[slot].pending.count < Self.maximumPendingPerDevice else {
                throw Rejection(.invalidArgument, "device '\(name)' already has \(deviceStates[slot].pending.count) unfinished transactions; finish some before resuming a purchase")
            }
            let key = TransactionKey(device: name, number: deviceStates[slot].nextTransactionNumber)
            return [.interruptedPurchaseResumed(key, interrupted: interrupted), .transactionAdded(key, payment),
                    .transactionPurchased(key, identifier: Self.transactionIdentifier(key), downloads: product.hostedContent, charged: charged)]

        case .finishTransaction(let key):
            let slot = try existingSlot(key.device)
            if deviceStates[slot].wasFinished(key.number) { return [] }  // Finishing twice is harmless (R-Q8).
            let transaction = try pendingTransaction(key, in: slot)
            switch transaction.transactionState {
            case .purchasing:
                throw Rejection(.transactionStillPurchasing, "transaction \(key) is still purchasing; finish it only after the store completed it (R-Q8)")
            case .deferred:
                throw Rejection(.transactionStillPurchasing, "transaction \(key) is deferred, waiting for approval; finish it once it is purchased or failed (R-Q8)")
            case .purchased, .failed, .restored:
                // Downloads still running lose their content: they are cancelled first (R-T4).
                var events: [Event] = []
                for download in transaction.downloads where download.started && !download.downloadState.isFinal {
                    events.append(.downloadCancelled(download.key))
                }
                events.append(.transactionFinished(key))
                return events
            }
        default:
            preconditionFailure("\(body.name) is not one of the commands transactionEvents decides")
        }
    }

    /// Restores (R-Q9) and receipt refreshes (R-R2), each delivered by the store in pieces.
    private func restoreAndReceiptEvents(_ body: CommandBody, catalog: Catalog) throws(Rejection) -> [Event] {
        switch body {
        case .restoreCompletedTransactions(let name, let username):
            let slot = try runningSlot(name)
            return [.restoreStarted(device: name, restore: deviceStates[slot].nextRestoreNumber, applicationUsername: username)]

        case .completeRestore(let name, let restore, let firstIndex, let originals, let isLast):
            let slot = try existingSlot(name)
            guard let progress = deviceStates[slot].restoresInProgress[restore] else {
                throw Rejection(.restoreNotInProgress, "restore \(restore) of device '\(name)' is not in progress; it was never started or already ended")
            }
            guard originals.count <= Self.maximumRestorePiece else {
                throw Rejection(.invalidArgument, "a restore piece holds at most \(Self.maximumRestorePiece) transactions, got \(originals.count); send the rest in further pieces")
            }
            // A piece sent again (a restarted store) is harmless; a piece that skips one is refused.
            if firstIndex < progress.restoredCount && firstIndex + originals.count <= progress.restoredCount && !isLast { return [] }
            guard firstIndex == progress.restoredCount else {
                throw Rejection(.invalidArgument, "restore \(restore) of device '\(name)' has \(progress.restoredCount) transactions restored; the next piece starts at \(progress.restoredCount), not \(firstIndex)")
            }
            var events: [Event] = []
            var number = deviceStates[slot].nextTransactionNumber
            for original in originals {
                guard let product = catalog.product(original.payment.productIdentifier) else {
                    throw Rejection(.unknownProduct, "restored product '\(original.payment.productIdentifier)' is not in the catalog")
                }
                guard product.isRestorable else {
                    throw Rejection(.invalidArgument, "product '\(product.identifier)' is a \(product.kind) and cannot be restored (R-Q9, F-R1)")
                }
                let key = TransactionKey(device: name, number: number)
                number += 1
                events.append(.transactionRestored(key, restore: restore, identifier: Self.transactionIdentifier(key),
                                                   original: original, downloads: product.hostedContent))
            }
            guard deviceStates[slot].pending.count + originals.count <= Self.maximumPendingPerDevice else {
                throw Rejection(.invalidArgument, "restoring \(originals.count) transactions would exceed \(Self.maximumPendingPerDevice) unfinished transactions on '\(name)'")
            }
            if isLast { events.append(.restoreFinished(device: name, restore: restore)) }
            return events

        case .failRestore(let name, let restore, let error):
            let slot = try existingSlot(name)
            guard deviceStates[slot].restoresInProgress[restore] != nil else {
                throw Rejection(.restoreNotInProgress, "restore \(restore) of device '\(name)' is not in progress")
            }
            return [.restoreFailed(device: name, restore: restore, error: error)]

        case .refreshReceipt(let name):
            let slot = try runningSlot(name)
            guard deviceStates[slot].receiptRefreshesInProgress.count < Self.maximumReceiptRefreshesInProgress else {
                throw Rejection(.invalidArgument, "device '\(name)' already waits for \(deviceStates[slot].receiptRefreshesInProgress.count) receipt refreshes; wait for requestDidFinish before asking again (R-R2)")
            }
            return [.receiptRefreshStarted(device: name, request: deviceStates[slot].nextReceiptRefreshNumber)]

        case .deliverReceipt(let name, let request, let firstIndex, let entries, let isLast):
            let slot = try existingSlot(name)
            guard let delivered = deviceStates[slot].receiptRefreshesInProgress[request] else {
                throw Rejection(.invalidArgument, "receipt refresh \(request) of device '\(name)' is not in progress; it was never asked for or already answered (R-R2)")
            }
            guard entries.count <= Self.maximumRestorePiece else {
                throw Rejection(.invalidArgument, "a receipt piece holds at most \(Self.maximumRestorePiece) entries, got \(entries.count); send the rest in further pieces")
            }
            // A piece that landed already (a restarted store sending it again) changes nothing.
            if firstIndex < delivered && firstIndex + entries.count <= delivered && !isLast { return [] }
            guard firstIndex == delivered else {
                throw Rejection(.invalidArgument, "receipt refresh \(request) of device '\(name)' has \(delivered) entries delivered; the next piece starts at \(delivered), not \(firstIndex)")
            }
            for entry in entries where catalog.product(entry.payment.productIdentifier) == nil {
                throw Rejection(.unknownProduct, "receipt entry \(entry.transactionIdentifier) names product '\(entry.payment.productIdentifier)', which is not in the catalog")
            }
            return [.receiptDelivered(device: name, request: request, firstIndex: firstIndex, entries: entries, isLast: isLast)]
        default:
            preconditionFailure("\(body.name) is not one of the commands restoreAndReceiptEvents decides")
        }
    }

    /// The commands of hosted-content downloads: the app's (start, pause, resume, cancel) and the downloader's.
    private func downloadCommandEvents(_ body: CommandBody) throws(Rejection) -> [Event] {
        switch body {
        case .startDownloads(let keys):
            // Starting a download that is already under way is harmless, like finishing
            // twice: an app relaunched while its start was in flight asks again (R-Q4).
            return try downloadEvents(keys, action: "start") { download throws(Rejection) in
                if download.started && !download.downloadState.isFinal { return nil }
                guard !download.started, download.downloadState == .waiting else {
                    throw Rejection(.invalidDownloadTransition, "download \(download.key) already ended (it is \(download.downloadState)); a download is started once")
                }
                return .downloadStarted(download.key)
            }

        case .pauseDownloads(let keys):
            return try downloadEvents(keys, action: "pause") { download throws(Rejection) in
                guard download.downloadState == .active else {
                    throw Rejection(.invalidDownloadTransition, "download \(download.key) is \(download.downloadState); only an active download can be paused")
                }
                return .downloadPaused(download.key)
            }

        case .resumeDownloads(let keys):
            return try downloadEvents(keys, action: "resume") { download throws(Rejection) in
                guard download.downloadState == .paused else {
                    throw Rejection(.invalidDownloadTransition, "download \(download.key) is \(download.downloadState); only a paused download can be resumed")
                }
                return .downloadResumed(download.key)
            }

        case .cancelDownloads(let keys):
            return try downloadEvents(keys, action: "cancel") { download throws(Rejection) in
                guard !download.downloadState.isFinal else {
                    throw Rejection(.invalidDownloadTransition, "download \(download.key) is already \(download.downloadState); it cannot be cancelled")
                }
                return .downloadCancelled(download.key)
            }

        case .reportDownloadProgress(let key, let progress, let timeRemaining):
            let download = try existingDownload(key)
            guard download.downloadState == .active else {
                throw Rejection(.invalidDownloadTransition, "download \(key) is \(download.downloadState); progress applies only to an active download")
            }
            guard progress.isFinite, progress >= download.progress, progress <= 1 else {
                throw Rejection(.invalidProgress, "progress \(progress) for \(key) must be between \(download.progress) (its current value) and 1")
            }
            guard timeRemaining.isFinite, timeRemaining >= 0 || timeRemaining == Download.timeRemainingUnknown else {
                throw Rejection(.invalidProgress, "timeRemaining \(timeRemaining) for \(key) must be 0 or more seconds, or -1 for unknown")
            }
            return [.downloadProgressed(key, progress: progress, timeRemaining: timeRemaining)]

        case .completeDownload(let key, let contentURL):
            let download = try existingDownload(key)
            guard download.downloadState == .active else {
                throw Rejection(.invalidDownloadTransition, "download \(key) is \(download.downloadState); only an active download can finish")
            }
            guard !contentURL.isEmpty else { throw Rejection(.invalidArgument, "a finished download needs a contentURL") }
            // Apps copy what the URL names, taken under the content root: '..' would leave it.
            guard FolderName.staysInside(contentURL) else {
                throw Rejection(.invalidArgument, "contentURL '\(contentURL)' leaves the content root; give a path inside it, without '..', like content/<device>/<transaction>/<content>-<version>")
            }
            return [.downloadFinished(key, contentURL: contentURL)]

        case .failDownload(let key, let error):
            let download = try existingDownload(key)
            guard download.downloadState == .active || download.downloadState == .paused else {
                throw Rejection(.invalidDownloadTransition, "download \(key) is \(download.downloadState); only an active or paused download can fail")
            }
            return [.downloadFailed(key, error: error)]
        default:
            preconditionFailure("\(body.name) is not one of the commands downloadCommandEvents decides")
        }
    }

    /// What the store does to a subscription or a purchase later: renewal, expiry, billing retry, refund, clearing (F-U1, F-U2, F-B1, F-K1, F-T2).
    private func storeActionEvents(_ body: CommandBody, catalog: Catalog) throws(Rejection) -> [Event] {
        switch body {
        case .renewSubscription(let name, let original):
            let slot = try existingSlot(name)
            let product = try subscriptionProduct(original, catalog: catalog, action: "renew")
            guard !deviceStates[slot].endedSubscriptions.contains(original.transactionIdentifier) else {
                throw Rejection(.invalidArgument, "the subscription started by \(original.transactionIdentifier) on '\(name)' has expired; buy the product again to start a new one (F-U2)")
            }
            guard deviceStates[slot].pending.count < Self.maximumPendingPerDevice else {
                throw Rejection(.invalidArgument, "device '\(name)' already has \(deviceStates[slot].pending.count) unfinished transactions; finish some before renewing")
            }
            let key = TransactionKey(device: name, number: deviceStates[slot].nextTransactionNumber)
            return [.subscriptionRenewed(key, identifier: Self.transactionIdentifier(key), original: original, downloads: product.hostedContent)]

        case .expireSubscription(let name, let original):
            let slot = try existingSlot(name)
            _ = try subscriptionProduct(original, catalog: catalog, action: "expire")
            // Expiring twice is harmless, like finishing twice (a test and the store may both end it).
            if deviceStates[slot].endedSubscriptions.contains(original.transactionIdentifier) { return [] }
            return [.subscriptionExpired(device: name, original: original)]

        case .beginBillingRetry(let name, let original, let grace):
            let slot = try existingSlot(name)
            _ = try subscriptionProduct(original, catalog: catalog, action: "retry billing for")
            guard !deviceStates[slot].endedSubscriptions.contains(original.transactionIdentifier) else {
                throw Rejection(.invalidArgument, "the subscription started by \(original.transactionIdentifier) on '\(name)' has expired; there is nothing to bill (F-B1)")
            }
            guard grace >= 0 else {
                throw Rejection(.invalidArgument, "a grace period of \(grace) ns is negative; use 0 for none or a duration (F-B1)")
            }
            return [.subscriptionBillingRetry(device: name, original: original, gracePeriodNanoseconds: grace)]

        case .refundPurchase(let name, let original):
            let slot = try existingSlot(name)
            guard catalog.product(original.payment.productIdentifier) != nil else {
                throw Rejection(.unknownProduct, "product '\(original.payment.productIdentifier)' is not in the store's catalog; refund a purchase of one of its products")
            }
            guard !original.transactionIdentifier.isEmpty else {
                throw Rejection(.invalidArgument, "a refund names the purchase's transactionIdentifier; it is empty")
            }
            guard !deviceStates[slot].revokedPurchases.contains(original.transactionIdentifier) else {
                throw Rejection(.invalidArgument, "purchase \(original.transactionIdentifier) on '\(name)' was refunded already; a purchase is refunded once (F-K1)")
            }
            return [.entitlementsRevoked(device: name, original: original)]

        case .clearTransactions(let name):
            _ = try existingSlot(name)
            return [.transactionsCleared(device: name)]
        default:
            preconditionFailure("\(body.name) is not one of the commands storeActionEvents decides")
        }
    }

    /// The identifier the store gives a purchased or restored transaction (R-T3): unique
    /// per processed payment, a restored one getting its own.
    public static func transactionIdentifier(_ key: TransactionKey) -> String { "\(key.device).\(key.number)" }

    /// The most receipt refreshes one device may wait for at once (R-R2), so the queue's memory stays bounded.
    public static let maximumReceiptRefreshesInProgress = 16

    /// The auto-renewable product a renewal or expiry names (F-U1, F-U2).
    private func subscriptionProduct(_ original: OriginalTransaction, catalog: Catalog, action: String) throws(Rejection) -> Product {
        guard let product = catalog.product(original.payment.productIdentifier) else {
            throw Rejection(.unknownProduct, "product '\(original.payment.productIdentifier)' is not in the store's catalog; \(action) a subscription of one of its products")
        }
        guard product.kind == .autoRenewableSubscription else {
            throw Rejection(.invalidArgument, "product '\(product.identifier)' is a \(product.kind), not an auto-renewable subscription; only those \(action)")
        }
        guard !original.transactionIdentifier.isEmpty else {
            throw Rejection(.invalidArgument, "a subscription is named by its first purchase's transactionIdentifier; it is empty")
        }
        return product
    }

    private func validateName(_ name: String, _ what: String) throws(Rejection) {
        guard !name.isEmpty, name.utf8.count <= 128 else {
            throw Rejection(.invalidArgument, "the \(what) name must have 1 to 128 bytes, got \(name.utf8.count)")
        }
    }

    private func requireKnown(_ key: TransactionKey, in slot: Int) throws(Rejection) {
        guard key.number >= 1, key.number < deviceStates[slot].nextTransactionNumber else {
            throw Rejection(.transactionNotFound, "transaction \(key) was never created on device '\(deviceStates[slot].device)'; report actions only for transactions the queue delivered")
        }
    }

    private func existingDownload(_ key: DownloadKey) throws(Rejection) -> Download {
        let slot = try existingSlot(key.transaction.device)
        let transaction = try pendingTransaction(key.transaction, in: slot)
        guard transaction.downloads.indices.contains(key.index) else {
            throw Rejection(.unknownDownload, "transaction \(key.transaction) has no download \(key.index); it has \(transaction.downloads.count)")
        }
        return transaction.downloads[key.index]
    }

    /// The events of a download command over every key, all or nothing; a transition
    /// returning nil changes nothing for that download.
    private func downloadEvents(_ keys: [DownloadKey], action: String, _ transition: (Download) throws(Rejection) -> Event?) throws(Rejection) -> [Event] {
        guard !keys.isEmpty else { throw Rejection(.invalidArgument, "\(action)Downloads needs at least one download") }
        // One key (most commands) cannot repeat: no set is built and hashed for it.
        guard keys.count == 1 || Set(keys).count == keys.count else { throw Rejection(.invalidArgument, "\(action)Downloads names the same download twice") }
        var events: [Event] = []
        for key in keys {
            let slot = try existingSlot(key.transaction.device)
            let transaction: PaymentTransaction
            do {
                transaction = try pendingTransaction(key.transaction, in: slot)
            } catch {
                if deviceStates[slot].wasFinished(key.transaction.number) {
                    throw Rejection(.downloadNotAllowed, "cannot \(action) download \(key): its transaction was finished, so its downloads can no longer be queued (R-T4, R-Q11)")
                }
                throw error
            }
            guard transaction.transactionState.isPaid else {
                throw Rejection(.downloadNotAllowed, "cannot \(action) download \(key): its transaction is \(transaction.transactionState); downloads need a purchased or restored transaction (R-Q11)")
            }
            guard transaction.downloads.indices.contains(key.index) else {
                throw Rejection(.unknownDownload, "transaction \(key.transaction) has no download \(key.index); it has \(transaction.downloads.count)")
            }
            if let event = try transition(transaction.downloads[key.index]) { events.append(event) }
        }
        return events
    }
}
