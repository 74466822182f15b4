import StoreKitModel

/// An invariant about apps and the queue, checkable from the log alone. Ids, statements and
/// rules are listed in docs/invariants.md.
public enum AppInvariant: String, Sendable, Hashable, Codable, CaseIterable {
    case grantBeforeFinish = "grant-before-finish"
    case grantedOnce = "granted-once"
    case noPurchaseLost = "no-purchase-lost"
    case downloadsBeforeFinish = "downloads-before-finish"
    case noCompletionFromProgress = "no-completion-from-progress"
    case queueDrains = "queue-drains"
    case restoreDoneAfterHandled = "restore-done-after-handled"
    case deferredApprovedGranted = "deferred-approved-granted"
    case launchObserversSeeRedeliveries = "launch-observers-see-redeliveries"
    case restoreDoneOnce = "restore-done-once"
    case allDownloadsStarted = "all-downloads-started"
    case restoreNotCreditedAsNew = "restore-not-credited-as-new"
    case revenueReportedOnce = "revenue-reported-once"
    case purchaseCompletionShownOnce = "purchase-completion-shown-once"
    case lateObserversSeeDeliveries = "late-observers-see-deliveries"

    /// One line: what must hold.
    public var statement: String {
        switch self {
        case .grantBeforeFinish: "A purchased or restored transaction is finished only after the app granted its content."
        case .grantedOnce: "A transaction is granted at most once, across relaunches and repeated deliveries (consumables are credited once per transaction)."
        case .noPurchaseLost: "Every purchased or restored transaction is granted before the run ends, across relaunches and kills."
        case .downloadsBeforeFinish: "A transaction is finished only when every download it started has ended."
        case .noCompletionFromProgress: "Nothing is granted or finished because a download's progress reached 1.0 while it was still active."
        case .queueDrains: "At the end of the run no transaction is left unfinished."
        case .restoreDoneAfterHandled: "A restore is shown done only after every transaction it restored was granted."
        case .deferredApprovedGranted: "A deferred transaction that is later approved is granted."
        case .launchObserversSeeRedeliveries: "Every observer of the app attaches before any transaction redelivered at launch is finished."
        case .restoreDoneOnce: "A restore the app heard finish is shown done exactly once, also when nothing was restored."
        case .allDownloadsStarted: "A transaction whose app started one of its downloads is finished only after it started every one of them."
        case .restoreNotCreditedAsNew: "A restored transaction is never credited as a new purchase: its credit is keyed by the original purchase."
        case .revenueReportedOnce: "A passive observer (analytics) reports each transaction as revenue at most once over all launches, and never a restored one."
        case .purchaseCompletionShownOnce: "The app tells its user that a purchase it asked for completed at most once, and only with the transaction that purchase's payment made."
        case .lateObserversSeeDeliveries: "An observer attached after launch finds every transaction delivered in that launch still unfinished, so it can handle it."
        }
    }

    /// The behaviour rules it comes from (docs/rules.md).
    public var rules: String {
        switch self {
        case .grantBeforeFinish: "R-T4, R-O1, R-Q5"
        case .grantedOnce: "R-Q4, R-T3"
        case .noPurchaseLost: "R-Q4, R-T4"
        case .downloadsBeforeFinish: "R-D3, R-T4"
        case .noCompletionFromProgress: "R-D2"
        case .queueDrains: "R-Q8, R-Q4"
        case .restoreDoneAfterHandled: "R-O3, R-Q9"
        case .deferredApprovedGranted: "R-T1"
        case .launchObserversSeeRedeliveries: "R-Q4, R-Q3"
        case .restoreDoneOnce: "R-O3"
        case .allDownloadsStarted: "R-D3, R-Q11"
        case .restoreNotCreditedAsNew: "R-Q9"
        case .revenueReportedOnce: "R-Q4, R-Q9"
        case .purchaseCompletionShownOnce: "R-Q7, R-O1, R-Q4"
        case .lateObserversSeeDeliveries: "R-Q3, R-Q5"
        }
    }
}

/// One broken invariant: where in the log and what happened.
public struct AppViolation: Sendable, Hashable, CustomStringConvertible {
    public var invariant: AppInvariant
    /// The record at which it was seen (the last record for end-of-run checks).
    public var sequence: UInt64
    public var message: String

    public var description: String { "[\(invariant.rawValue)] #\(sequence) \(message)" }
}

/// Checks every `AppInvariant` over a log, event by event, then at its end. A pure fold;
/// memory is bounded by the transactions of the run not yet finished, plus the restores.
public struct AppInvariantMonitor: Sendable {
    public private(set) var violations: [AppViolation] = []

    private struct Tracked: Sendable {
        var state: TransactionState = .purchasing
        var wasDeferred = false
        var grants = 0
        var downloads: [TrackedDownload] = []
    }

    private struct TrackedDownload: Sendable {
        var state: DownloadState = .waiting
        var progress: Double = 0
        var started = false
        var cancelledBy: CommandID?
    }

    /// Only launches with transactions pending are kept (the others cannot break
    /// `launchObserversSeeRedeliveries`), so most finishes look up nothing here.
    private struct DeviceLaunch: Sendable {
        var pendingAtLaunch: Set<UInt64> = []
        var finishedSinceLaunch: [UInt64] = []
    }

    private struct RestoreID: Hashable, Sendable {
        var device: String
        var number: UInt64
    }

    private var transactions: [TransactionKey: Tracked] = [:]
    private var launches: [String: DeviceLaunch] = [:]
    private var restored: [RestoreID: [TransactionKey]] = [:]
    /// Grants of finished transactions, per device, so a late second grant is still seen.
    private var finishedGrants: [TransactionKey: Int] = [:]
    /// Revenue reports per transaction, over the whole run (also after its finish).
    private var revenueReports: [TransactionKey: Int] = [:]
    private var lastSequence: UInt64 = 0
    /// Observers attached per device now: a restore that ends while none is attached is heard by no one.
    private var attachedObservers: [String: Int] = [:]
    /// Per device, the first transaction finished in its current launch that was not redelivered at
    /// that launch (those are `launchObserversSeeRedeliveries`'): an observer attached after it missed it.
    private var finishedThisLaunch: [String: TransactionKey] = [:]
    /// Purchase completions the app showed as their own, per transaction, over the whole run.
    private var completionsShown: Set<TransactionKey> = []
    /// Finished restores the app heard, with how often each was shown done, and whether the app
    /// ended (quit, killed) since: not showing one then is no fault of the app's.
    private var restoresHeard: [RestoreID: (shown: Int, appEnded: Bool)] = [:]
    /// Restores under way that the running launch of their app asked for: a launch that ended took
    /// the screen that would say "done" with it.
    private var restoresOfThisLaunch: Set<RestoreID> = []

    public init() {}

    private mutating func report(_ invariant: AppInvariant, _ sequence: UInt64, _ message: String) {
        violations.append(AppViolation(invariant: invariant, sequence: sequence, message: message))
    }

    public mutating func check(_ recorded: RecordedEvent) {
        let sequence = recorded.sequence
        lastSequence = sequence
        switch recorded.event {
        case .transactionAdded(let key, _):
            transactions[key] = Tracked()
        case .transactionDeferred(let key):
            modify(key) { $0.state = .deferred; $0.wasDeferred = true }
        case .transactionPurchased(let key, _, let contents, _):
            modify(key) { $0.state = .purchased; $0.downloads = contents.map { _ in TrackedDownload() } }
        case .subscriptionRenewed(let key, _, _, let contents):
            // A renewal is a purchase the app must deliver like any other (F-U1).
            transactions[key] = Tracked(state: .purchased, downloads: contents.map { _ in TrackedDownload() })
        case .transactionRestored(let key, let restore, _, _, let contents):
            transactions[key] = Tracked(state: .restored, downloads: contents.map { _ in TrackedDownload() })
            restored[RestoreID(device: key.device, number: restore), default: []].append(key)
        case .transactionFailed(let key, _):
            modify(key) { $0.state = .failed }
        case .askToBuyDeclined(let key):
            // Declined stays deferred for good and is never delivered (F-A1): nothing is owed to the user.
            transactions[key] = nil
        case .downloadStarted(let key):
            update(key) { $0.started = true; $0.state = .active }
        case .downloadProgressed(let key, let progress, _):
            update(key) { $0.progress = progress }
        case .downloadPaused(let key):
            update(key) { $0.state = .paused }
        case .downloadResumed(let key):
            update(key) { $0.state = .active }
        case .downloadFinished(let key, _):
            update(key) { $0.state = .finished; $0.progress = 1 }
        case .downloadFailed(let key, _):
            update(key) { $0.state = .failed }
        case .downloadCancelled(let key):
            update(key) { $0.state = .cancelled; $0.cancelledBy = recorded.commandID }
        case .restoreStarted(let device, let restore, _):
            restoresOfThisLaunch.insert(RestoreID(device: device, number: restore))
        case .restoreFinished(let device, let restore):
            let id = RestoreID(device: device, number: restore)
            if restoresOfThisLaunch.remove(id) != nil, attachedObservers[device, default: 0] > 0 { restoresHeard[id] = (0, false) }
        case .restoreFailed(let device, let restore, _):
            restoresOfThisLaunch.remove(RestoreID(device: device, number: restore))
        case .observerDetached(let device, _):
            attachedObservers[device] = max(0, attachedObservers[device, default: 0] - 1)
        case .appTerminated(let device):
            attachedObservers[device] = 0
            if !finishedThisLaunch.isEmpty { finishedThisLaunch[device] = nil }
            if !restoresOfThisLaunch.isEmpty { restoresOfThisLaunch = restoresOfThisLaunch.filter { $0.device != device } }
            if !restoresHeard.isEmpty {
                for key in restoresHeard.keys where key.device == device { restoresHeard[key]?.appEnded = true }
            }
        case .appLaunched(let device):
            let pending = transactions.keys.filter { $0.device == device }.map(\.number)
            launches[device] = pending.isEmpty ? nil : DeviceLaunch(pendingAtLaunch: Set(pending))
            if !finishedThisLaunch.isEmpty { finishedThisLaunch[device] = nil }
        case .observerAttached(let device, let observer):
            attachedObservers[device, default: 0] += 1
            if !launches.isEmpty, let missed = launches[device]?.finishedSinceLaunch.first {
                report(.launchObserversSeeRedeliveries, sequence,
                       "observer \(observer) attached to \(device) after transaction #\(missed), redelivered at launch, was finished without it")
            } else if !finishedThisLaunch.isEmpty, let missed = finishedThisLaunch[device] {
                report(.lateObserversSeeDeliveries, sequence,
                       "observer \(observer) attached to \(device) after transaction \(missed), delivered in this launch, was finished without it")
            }
        case .transactionFinished(let key):
            finished(key, recorded)
        case .appActionRecorded(let action):
            appAction(action, sequence)
        default:
            break
        }
    }

    /// Changes a tracked transaction in place: one hash of its key, no copy of its downloads.
    private mutating func modify(_ key: TransactionKey, _ change: (inout Tracked) -> Void) {
        guard let index = transactions.index(forKey: key) else { return }
        change(&transactions.values[index])
    }

    private mutating func update(_ key: DownloadKey, _ change: (inout TrackedDownload) -> Void) {
        modify(key.transaction) { tracked in
            guard tracked.downloads.indices.contains(key.index) else { return }
            change(&tracked.downloads[key.index])
        }
    }

    /// A download still under way at 1.0: what an app that infers completion from progress acts on.
    private func activeAtFullProgress(_ tracked: Tracked, cancelledBy command: CommandID?) -> Int? {
        tracked.downloads.firstIndex { download in
            download.started && download.progress >= 1
                && (!download.state.isFinal || (download.state == .cancelled && command != nil && download.cancelledBy == command))
        }
    }

    private mutating func finished(_ key: TransactionKey, _ recorded: RecordedEvent) {
        let sequence = recorded.sequence
        guard let tracked = transactions.removeValue(forKey: key) else { return }
        if tracked.state.isPaid {
            if let index = activeAtFullProgress(tracked, cancelledBy: recorded.commandID) {
                report(.noCompletionFromProgress, sequence, "transaction \(key) was finished while download \(index) was at progress 1.0 but not finished")
            } else if let index = tracked.downloads.firstIndex(where: { download in
                download.started && (!download.state.isFinal
                    || (download.state == .cancelled && download.cancelledBy != nil && download.cancelledBy == recorded.commandID))
            }) {
                report(.downloadsBeforeFinish, sequence, "transaction \(key) was finished before its download \(index) ended: the content is lost")
            } else if tracked.downloads.contains(where: \.started), let index = tracked.downloads.firstIndex(where: { download in
                // Still waiting, or cancelled by this finish (the queue cancels what has not ended).
                !download.started && (!download.state.isFinal
                    || (download.state == .cancelled && download.cancelledBy != nil && download.cancelledBy == recorded.commandID))
            }) {
                report(.allDownloadsStarted, sequence, "transaction \(key) was finished while its download \(index) was never started: the content is lost")
            }
            if tracked.grants == 0 {
                report(.grantBeforeFinish, sequence, "transaction \(key) (\(tracked.state)) was finished before the app granted it")
            }
        }
        finishedGrants[key] = tracked.grants
        // In place: a copy taken out and stored back would copy its array at the append.
        if !launches.isEmpty, let index = launches.index(forKey: key.device), launches.values[index].pendingAtLaunch.contains(key.number) {
            launches.values[index].finishedSinceLaunch.append(key.number)
        } else if finishedThisLaunch[key.device] == nil {
            finishedThisLaunch[key.device] = key
        }
    }

    private mutating func appAction(_ action: AppAction, _ sequence: UInt64) {
        switch action {
        case .contentGranted(let key, let observer, _):
            var grants = 0
            if let position = transactions.index(forKey: key) {
                if let index = activeAtFullProgress(transactions.values[position], cancelledBy: nil) {
                    report(.noCompletionFromProgress, sequence, "\(observer) granted transaction \(key) while download \(index) was at progress 1.0 but not finished")
                }
                transactions.values[position].grants += 1
                grants = transactions.values[position].grants
            } else if let earlier = finishedGrants[key] {
                grants = earlier + 1
                finishedGrants[key] = grants
            }
            if grants > 1 { report(.grantedOnce, sequence, "\(observer) granted transaction \(key) again (grant number \(grants))") }
        case .restoreShownDone(let device, let restore, let observer):
            let id = RestoreID(device: device, number: restore)
            if let heard = restoresHeard[id] {
                restoresHeard[id]?.shown = heard.shown + 1
                if heard.shown >= 1 {
                    report(.restoreDoneOnce, sequence, "\(observer) showed restore \(restore) of \(device) done again (time \(heard.shown + 1))")
                }
            }
            for key in restored[RestoreID(device: device, number: restore)] ?? [] {
                let grants = transactions[key]?.grants ?? finishedGrants[key] ?? 0
                if grants == 0 {
                    report(.restoreDoneAfterHandled, sequence, "\(observer) showed restore \(restore) of \(device) done before restored transaction \(key) was granted")
                    break
                }
            }
        case .transactionReported(let key, let observer, .creditedAsNewPurchase):
            if transactions[key]?.state == .restored {
                report(.restoreNotCreditedAsNew, sequence, "\(observer) credited restored transaction \(key) as a new purchase, not as its original purchase")
            }
        case .transactionReported(let key, let observer, .revenue):
            let reports = revenueReports[key, default: 0] + 1
            revenueReports[key] = reports
            if transactions[key]?.state == .restored {
                report(.revenueReportedOnce, sequence, "\(observer) reported restored transaction \(key) as revenue")
            } else if reports > 1 {
                report(.revenueReportedOnce, sequence, "\(observer) reported transaction \(key) as revenue again (report number \(reports))")
            }
        case .transactionReported(let key, let observer, .purchaseCompletionShown):
            if !completionsShown.insert(key).inserted {
                report(.purchaseCompletionShownOnce, sequence, "\(observer) told its user again that the purchase of transaction \(key) completed")
            }
        case .transactionReported(let key, let observer, .otherPurchaseCompletionShown):
            report(.purchaseCompletionShownOnce, sequence,
                   "\(observer) told its user that a purchase it asked for completed with transaction \(key), which another payment made")
        case .contentKept, .failureShown:
            break
        }
    }

    /// The end-of-run checks: nothing lost, nothing left unfinished.
    public mutating func finish() {
        for (id, heard) in restoresHeard.sorted(by: { ($0.key.device, $0.key.number) < ($1.key.device, $1.key.number) })
        where heard.shown == 0 && !heard.appEnded {
            report(.restoreDoneOnce, lastSequence, "restore \(id.number) of \(id.device) finished and was never shown done")
        }
        for key in transactions.keys.sorted() {
            guard let tracked = transactions[key] else { continue }
            if tracked.state.isPaid && tracked.grants == 0 {
                if tracked.wasDeferred {
                    report(.deferredApprovedGranted, lastSequence, "transaction \(key) was deferred, then approved, and never granted")
                } else {
                    report(.noPurchaseLost, lastSequence, "transaction \(key) (\(tracked.state)) was never granted")
                }
            } else {
                report(.queueDrains, lastSequence, "transaction \(key) is still \(tracked.state) at the end of the run")
            }
        }
    }
}
