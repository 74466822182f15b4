/// The state machine every event the queue engine appends must follow, checked against the
/// projection before the event is applied. `decide` only makes events that follow it, so an event
/// that breaks it is a bug in this program, not bad input: the engine stops at once
/// (`precondition`) instead of logging a state no rule allows. Events folded from a log that was
/// read back (a rebuild, a replay, `log cat`) are not checked here: a log is outside input.
/// What observers do wrong is the `InvariantChecker`'s to report, never a reason to stop.
extension QueueProjection {
    /// Why `event` cannot follow the current state, or nil when it may.
    public func brokenTransition(_ event: Event) -> String? {
        switch event {
        case .runStarted:
            return lastSequence == 0 ? nil : "a run starts only at the log's first sequence, not after \(lastSequence)"
        case .transactionAdded(let key, _):
            return newTransaction(key)
        case .transactionRestored(let key, let restore, _, _, _):
            if let broken = newTransaction(key) { return broken }
            return restoreInProgress(key.device, restore)
        case .subscriptionRenewed(let key, _, _, _):
            return newTransaction(key)
        case .transactionDeferred(let key):
            return transaction(key, allowed: [.purchasing], "be deferred")
        case .transactionPurchased(let key, _, _, _):
            return transaction(key, allowed: [.purchasing, .deferred], "be purchased")
        case .transactionFailed(let key, _):
            return transaction(key, allowed: [.purchasing, .deferred], "fail")
        case .askToBuyDeclined(let key):
            return transaction(key, allowed: [.deferred], "be declined")
        case .transactionFinished(let key):
            return transaction(key, allowed: [.purchased, .failed, .restored], "be finished")
        case .downloadStarted(let key):
            return download(key) { !$0.started && $0.downloadState == .waiting }
        case .downloadProgressed(let key, _, _), .downloadPaused(let key), .downloadFinished(let key, _):
            return download(key) { $0.downloadState == .active }
        case .downloadFailed(let key, _):
            return download(key) { $0.downloadState == .active || $0.downloadState == .paused }
        case .downloadResumed(let key):
            return download(key) { $0.downloadState == .paused }
        case .downloadCancelled(let key):
            return download(key) { !$0.downloadState.isFinal }
        case .restoreStarted(let device, let restore, _):
            guard let slot = slot(of: device) else { return "restore \(restore) started on unregistered device '\(device)'" }
            return restore >= deviceStates[slot].nextRestoreNumber ? nil
                : "restore \(restore) of '\(device)' started again (next is \(deviceStates[slot].nextRestoreNumber))"
        case .restoreFinished(let device, let restore), .restoreFailed(let device, let restore, _):
            return restoreInProgress(device, restore)
        case .deviceRegistered, .appLaunched, .interruptedPurchaseResumed, .appTerminated, .observerAttached, .observerDetached, .paymentsAllowedChanged,
             .commandRejected, .appActionRecorded, .subscriptionExpired, .entitlementsRevoked, .subscriptionBillingRetry,
             .transactionsCleared, .receiptRefreshStarted, .receiptDelivered:
            return nil
        }
    }

    /// A transaction the queue creates: on a registered device, with a number it never used, and
    /// within the bound on a device's unfinished transactions.
    private func newTransaction(_ key: TransactionKey) -> String? {
        guard let slot = slot(of: key.device) else { return "transaction \(key) created on an unregistered device" }
        let next = deviceStates[slot].nextTransactionNumber
        guard key.number >= next else { return "transaction \(key) created with a number already used (the next is \(next))" }
        let pending = deviceStates[slot].pending.count
        return pending < Self.maximumPendingPerDevice ? nil : "transaction \(key) created on a device that already holds \(pending) unfinished ones"
    }

    /// A pending transaction whose state is one of `allowed`.
    private func transaction(_ key: TransactionKey, allowed: [TransactionState], _ change: String) -> String? {
        guard let slot = slot(of: key.device) else { return "transaction \(key) is on an unregistered device and cannot \(change)" }
        guard let index = deviceStates[slot].pending.index(forKey: key.number) else { return "transaction \(key) is not pending and cannot \(change)" }
        let state = deviceStates[slot].pending.values[index].transactionState
        return allowed.contains(state) ? nil : "transaction \(key) is \(state) and cannot \(change)"
    }

    /// A download of a pending transaction, in a state `allows`.
    private func download(_ key: DownloadKey, allows: (Download) -> Bool) -> String? {
        let transactionKey = key.transaction
        guard let slot = slot(of: transactionKey.device),
              let index = deviceStates[slot].pending.index(forKey: transactionKey.number) else {
            return "download \(key) changed, but its transaction is not pending"
        }
        let downloads = deviceStates[slot].pending.values[index].downloads
        guard downloads.indices.contains(key.index) else { return "download \(key) does not exist (its transaction has \(downloads.count))" }
        return allows(downloads[key.index]) ? nil : "download \(key) cannot change from \(downloads[key.index].downloadState) this way"
    }

    private func restoreInProgress(_ device: String, _ restore: UInt64) -> String? {
        guard let slot = slot(of: device) else { return "restore \(restore) of unregistered device '\(device)'" }
        return deviceStates[slot].restoresInProgress[restore] != nil ? nil : "restore \(restore) of '\(device)' is not in progress"
    }
}
