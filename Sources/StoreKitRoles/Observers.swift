import Foundation
import StoreKitModel

/// The built-in observer behaviours, written on the public observer API exactly as an
/// app would write them (and as users write theirs). The correct ones record what they do
/// (`contentGranted`, `contentKept`, `restoreShownDone`, `failureShown`) so invariants about
/// apps can be checked from the log; the buggy ones make, on purpose, the mistakes real apps make.
public enum ObserverBehavior: String, Sendable, Hashable, Codable, CaseIterable {
    /// Grant the product, then finish (ignores hosted content).
    case deliverThenFinish
    /// Download every piece of hosted content, keep it, grant, then finish (R-D3).
    case downloadThenFinish
    /// Selective restore (R-R5): of the restored transactions with content, downloads only those whose
    /// content the user does not have on the device yet, granting and finishing every other restored
    /// transaction at once; purchases as downloadThenFinish.
    case restoreThenFinish
    /// Only watches and counts; never finishes (a second observer, R-Q5).
    case audit
    /// Buggy on purpose: finishes right after starting downloads, losing content (R-T4).
    case finishBeforeDownloads
    /// Buggy on purpose: a second SDK that finishes every completed transaction at once; when
    /// it hears an update before the app's own observer, the app has not granted yet (R-Q5, R-T4).
    case sdkFinishesEarly
    /// Buggy on purpose: finishes when the first of several downloads ends (R-D3).
    case finishOnFirstDownload
    /// Buggy on purpose: treats progress 1.0 as finished and finishes then (R-D2).
    case finishAtFullProgress
    /// Buggy on purpose: credits on every delivery without remembering what it credited, so a
    /// consumable redelivered after a relaunch or delivered twice is credited twice (R-Q4).
    case creditEveryDelivery
    /// Buggy on purpose: the app attaches this observer a few steps after launch, so the
    /// transactions redelivered at launch are handled without it (R-Q4).
    case attachesLate
    /// Buggy on purpose: shows "restore done" as soon as StoreKit says so, while restored
    /// content is still downloading (R-O3, R-Q9).
    case restoreDoneEarly
    /// Buggy on purpose: treats a deferred transaction as failed and forgets it, so a later
    /// approval is never granted (R-T1).
    case deferredAsFailed

    /// The behaviours made wrong on purpose (for documentation and tests).
    public static let buggy: [ObserverBehavior] = [.sdkFinishesEarly, .finishOnFirstDownload, .finishAtFullProgress,
                                                   .creditEveryDelivery, .attachesLate, .restoreDoneEarly, .deferredAsFailed]

    /// Attached a few user steps after launch rather than at launch.
    public var attachesLate: Bool { self == .attachesLate }

    /// One line on what the behaviour does, for `--help` and docs.
    public var summary: String {
        switch self {
        case .deliverThenFinish: "grants the product, then finishes (ignores hosted content)"
        case .downloadThenFinish: "downloads every piece of hosted content, keeps it, grants, then finishes"
        case .restoreThenFinish: "selective restore: downloads the restored content the device lacks, finishes the other restored transactions at once"
        case .audit: "only watches and counts; never finishes (a second observer)"
        case .finishBeforeDownloads: "buggy: finishes right after starting downloads, losing content"
        case .sdkFinishesEarly: "buggy: a second SDK that finishes what it hears before the app granted it"
        case .finishOnFirstDownload: "buggy: finishes when the first of several downloads ends"
        case .finishAtFullProgress: "buggy: treats progress 1.0 as finished"
        case .creditEveryDelivery: "buggy: credits a consumable again on every delivery (relaunches, duplicates)"
        case .attachesLate: "buggy: attaches its observer after launch, missing what was redelivered"
        case .restoreDoneEarly: "buggy: shows the restore as done before its restored transactions are handled"
        case .deferredAsFailed: "buggy: treats a deferred transaction as failed, losing the later approval"
        }
    }

    /// Downloads hosted content before granting.
    var wantsContent: Bool {
        switch self {
        case .downloadThenFinish, .restoreThenFinish, .finishBeforeDownloads, .finishOnFirstDownload, .finishAtFullProgress,
             .restoreDoneEarly:
            true
        case .deliverThenFinish, .audit, .sdkFinishesEarly, .creditEveryDelivery, .attachesLate, .deferredAsFailed:
            false
        }
    }
}

/// The observer the simulator attaches for each behaviour.
public final class BuiltInObserver: PaymentTransactionObserver {
    public let observerName: String
    public let behavior: ObserverBehavior
    /// Where finished downloads are copied to keep them (the app's own storage), and the
    /// folder in it, relative to the content root; nil keeps nothing.
    public let storage: ContentStorage?
    public let persistentFolder: String
    // Unchecked exclusivity on the sets changed for every callback: only this observer's own methods
    // change them, one access at a time (the queue's methods it calls never call back), so the checks only cost time.
    /// Product identifiers unlocked so far (this launch).
    @exclusivity(unchecked) public private(set) var unlocked: Set<String> = []
    public private(set) var keptContent: [String] = []
    public private(set) var errors: [String] = []
    public private(set) var restoresFinished = 0
    public private(set) var restoresFailed = 0
    /// Restored transactions not yet handled that were delivered since the last restore ended: they
    /// belong to the next restore to end (StoreKit tells a restore's transactions before its end).
    @exclusivity(unchecked) private var restoredOutstanding: Set<TransactionKey> = []
    /// Restores that ended before their restored transactions were handled, oldest first: each is
    /// shown done once its own transactions are (R-O3). Kept apart so that a second restore started
    /// meanwhile neither delays nor swallows the first one's.
    @exclusivity(unchecked) private var restoresWaiting: [(restore: UInt64, outstanding: Set<TransactionKey>)] = []
    /// Transactions `deferredAsFailed` gave up on.
    @exclusivity(unchecked) private var forgotten: Set<TransactionKey> = []
    /// Restored transactions whose content the user passed over: granted and finished without downloading.
    @exclusivity(unchecked) private var passedOver: Set<TransactionKey> = []

    public init(name: String, behavior: ObserverBehavior, storage: ContentStorage?, persistentFolder: String = "apps") {
        self.observerName = name
        self.behavior = behavior
        self.storage = storage
        self.persistentFolder = persistentFolder
    }

    public func paymentQueue(_ queue: PaymentQueue, updatedTransactions transactions: [PaymentTransaction]) {
        guard behavior != .audit else { return }
        for transaction in transactions where !forgotten.contains(transaction.key) {
            switch transaction.transactionState {
            case .purchasing:
                continue
            case .deferred:
                // Correct apps wait for the decision; this bug shows a failure and forgets the payment.
                guard behavior == .deferredAsFailed else { continue }
                forgotten.insert(transaction.key)
                queue.failureShown(transaction)
            case .failed:
                if behavior != .sdkFinishesEarly { queue.failureShown(transaction) }
                finish(transaction, on: queue)
            case .purchased, .restored:
                if transaction.transactionState == .restored && !transaction.downloads.isEmpty && behavior.wantsContent {
                    restoredOutstanding.insert(transaction.key)
                    // Selective restore (R-R5): the user picks only content the device lacks; what the app
                    // already kept is not downloaded again. Decided before any download started.
                    if behavior == .restoreThenFinish, transaction.downloads.allSatisfy({ !$0.started }),
                       queue.hasKeptContent(of: transaction.payment.productIdentifier) {
                        passedOver.insert(transaction.key)
                    }
                }
                if passedOver.contains(transaction.key) {
                    grant(transaction, on: queue)
                    finish(transaction, on: queue)
                    continue
                }
                process(transaction, on: queue)
            }
        }
    }

    private func process(_ transaction: PaymentTransaction, on queue: PaymentQueue) {
        if behavior == .sdkFinishesEarly {
            finish(transaction, on: queue)
            return
        }
        guard behavior.wantsContent, !transaction.downloads.isEmpty else {
            grant(transaction, on: queue)
            finish(transaction, on: queue)
            return
        }
        let notStarted = transaction.downloads.filter { !$0.started && $0.downloadState == .waiting }
        queue.start(notStarted)
        if behavior == .finishBeforeDownloads {
            finish(transaction, on: queue)
        } else {
            // Delivered again after a relaunch (R-Q4): what finished while the app was not running is
            // kept now, as it would have been when it finished (R-D3). Looked up once: keeping a file
            // changes nothing the queue shows of the transaction.
            guard let current = queue.transaction(transaction.key) else { return }
            keepFinished(current, on: queue)
            if transaction.downloads.allSatisfy({ $0.downloadState.isFinal }) { completeIfDone(current, on: queue) }
        }
    }

    public func paymentQueue(_ queue: PaymentQueue, updatedDownloads downloads: [Download]) {
        guard behavior.wantsContent, behavior != .finishBeforeDownloads else { return }
        for download in downloads {
            if behavior == .finishAtFullProgress, download.progress >= 1, !download.downloadState.isFinal {
                // The bug: progress 1.0 is not "finished" (R-D2).
                if let transaction = queue.transaction(download.key.transaction) { complete(transaction, on: queue) }
                continue
            }
            guard download.downloadState.isFinal else { continue }
            // Looked up once: keeping a file changes nothing the queue shows of the transaction.
            guard let transaction = queue.transaction(download.key.transaction) else { continue }
            if download.downloadState == .finished { keepFinished(transaction, on: queue) }
            if behavior == .finishOnFirstDownload {
                complete(transaction, on: queue)
            } else {
                completeIfDone(transaction, on: queue)
            }
        }
    }

    /// Finishes only when every download of the transaction has ended (R-D3).
    private func completeIfDone(_ transaction: PaymentTransaction, on queue: PaymentQueue) {
        guard transaction.downloads.allSatisfy({ $0.downloadState.isFinal }) else { return }
        complete(transaction, on: queue)
    }

    private func complete(_ transaction: PaymentTransaction, on queue: PaymentQueue) {
        grant(transaction, on: queue)
        finish(transaction, on: queue)
    }

    /// Grants once per transaction, across relaunches, by the app's persistent record (R-Q4);
    /// `creditEveryDelivery` is the bug of not checking it.
    private func grant(_ transaction: PaymentTransaction, on queue: PaymentQueue) {
        unlocked.insert(transaction.payment.productIdentifier)
        if behavior == .creditEveryDelivery || !queue.wasGranted(transaction) { queue.contentGranted(transaction) }
        // Removing from an empty set still hashes the key.
        if !restoredOutstanding.isEmpty { restoredOutstanding.remove(transaction.key) }
        guard !restoresWaiting.isEmpty else { return }
        var index = 0
        while index < restoresWaiting.count {
            if restoresWaiting[index].outstanding.remove(transaction.key) != nil, restoresWaiting[index].outstanding.isEmpty {
                queue.restoreShownDone(restore: restoresWaiting.remove(at: index).restore)
            } else {
                index += 1
            }
        }
    }

    /// Keeps each finished download of the transaction not kept yet, in index order: the one just
    /// reported, and any that finished while the app was not running (R-D3, R-Q4).
    private func keepFinished(_ transaction: PaymentTransaction, on queue: PaymentQueue) {
        for download in transaction.downloads where download.downloadState == .finished && !queue.wasKept(download) {
            if let url = download.contentURL { keep(url, download, on: queue) }
        }
    }

    /// Moves the downloaded file somewhere persistent before its URL becomes invalid (R-D3, R-T4).
    private func keep(_ contentURL: String, _ download: Download, on queue: PaymentQueue) {
        guard let storage else {
            queue.contentKept(download)
            return
        }
        let destination = "\(persistentFolder)/\(download.contentIdentifier)-\(download.contentVersion)"
        do {
            try storage.copy(contentURL, to: destination)
            keptContent.append(destination)
            queue.contentKept(download)
        } catch {
            errors.append("could not keep \(contentURL): \(error)")
        }
    }

    private func finish(_ transaction: PaymentTransaction, on queue: PaymentQueue) {
        do {
            try queue.finishTransaction(transaction)
        } catch {
            errors.append("\(error)")
        }
    }

    /// Shows the restore done once its restored transactions are handled (R-O3);
    /// `restoreDoneEarly` shows it at once.
    public func paymentQueueRestoreCompletedTransactionsFinished(_ queue: PaymentQueue) {
        restoresFinished += 1
        guard behavior != .audit, behavior != .sdkFinishesEarly else { return }
        if restoredOutstanding.isEmpty || behavior == .restoreDoneEarly {
            queue.restoreShownDone()
        } else if let restore = queue.lastFinishedRestore {
            restoresWaiting.append((restore, restoredOutstanding))
        }
        restoredOutstanding = []
    }

    public func paymentQueue(_ queue: PaymentQueue, restoreCompletedTransactionsFailedWithError error: StoreError) {
        restoresFailed += 1
    }
}
