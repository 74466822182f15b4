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
        case .deviceRegistered(let device, _):
            return slot(of: device) == nil ? nil : "device '\(device)' registered twice"
        case .appLaunched(let device):
            return onDevice(device, "the app launched") { $0.isRunning ? "it is running already" : nil }
        case .appTerminated(let device):
            return onDevice(device, "the app terminated") { $0.isRunning ? nil : "it is not running" }
        case .observerAttached(let device, let observer):
            return onDevice(device, "observer '\(observer)' attached") { state in
                !state.isRunning ? "the app is not running" : state.observers.contains(observer) ? "it is attached already" : nil
            }
        case .observerDetached(let device, let observer):
            return onDevice(device, "observer '\(observer)' detached") { $0.observers.contains(observer) ? nil : "it is not attached" }
        case .interruptedPurchaseResumed(let key, let interrupted):
            return onDevice(key.device, "purchase \(interrupted) resumed") { state in
                state.resumedInterruptions.contains(interrupted.number) ? "it was resumed already" : nil
            }
        case .paymentsAllowedChanged(let device, _), .transactionsCleared(let device):
            return onDevice(device, event.name) { _ in nil }
        case .appActionRecorded(let action):
            return onDevice(action.device, "an app action recorded") { _ in nil }
        case .subscriptionExpired(let device, let original), .subscriptionBillingRetry(let device, let original, _):
            return onDevice(device, "subscription \(original.transactionIdentifier) changed") { state in
                state.endedSubscriptions.contains(original.transactionIdentifier) ? "it has expired" : nil
            }
        case .entitlementsRevoked(let device, let original):
            return onDevice(device, "purchase \(original.transactionIdentifier) refunded") { state in
                state.revokedPurchases.contains(original.transactionIdentifier) ? "it was refunded already" : nil
            }
        case .receiptRefreshStarted(let device, let request):
            return onDevice(device, "receipt refresh \(request) started") { state in
                !state.isRunning ? "the app is not running"
                    : request < state.nextReceiptRefreshNumber ? "it started before (next is \(state.nextReceiptRefreshNumber))" : nil
            }
        case .receiptDelivered(let device, let request, let firstIndex, _, _):
            return onDevice(device, "receipt refresh \(request) delivered from entry \(firstIndex)") { state in
                guard let delivered = state.receiptRefreshesInProgress[request] else { return "it is not in progress" }
                return firstIndex == delivered ? nil : "\(delivered) entries were delivered"
            }
        case .commandRejected:
            return nil
        }
    }

    /// An event about a registered device, whose state `broken` finds no fault with.
    private func onDevice(_ device: String, _ what: String, _ broken: (DeviceState) -> String?) -> String? {
        guard let slot = slot(of: device) else { return "\(what) on unregistered device '\(device)'" }
        return broken(deviceStates[slot]).map { "\(what) on '\(device)', but \($0)" }
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
