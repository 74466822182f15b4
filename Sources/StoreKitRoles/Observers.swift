import Foundation
import StoreKitModel

/// The built-in observer behaviours, written on Apple's StoreKit 1 API (`BuiltInObserver`) exactly as
/// an app writes its observers, and as users write theirs. What they do is in the app's own storage
/// (`BuiltInAppStorage`: credits, kept files, failures and restores shown), which the simulator reads
/// as the app's `AppBelief`, as it reads a user's app; the buggy ones make, on purpose, the mistakes
/// real apps make.
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

/// What the built-in app keeps on a device's disk, shared by its observers and kept across launches
/// and kills: the simulator reads it as the app's `AppBelief` (docs/explore.md, "Your own observer").
public final class BuiltInAppStorage: @unchecked Sendable {
    /// Transactions granted, by their own `transactionIdentifier`: one granted is not granted again
    /// when delivered again (R-Q4); a restore is a transaction of its own, granted once too.
    private var granted: Set<String> = []
    /// Credits by the purchase they are for (a restored transaction's `original`), as `AppBelief.credits`.
    private var credits: [String: Int] = [:]
    /// Files kept, by "transactionIdentifier/contentIdentifier" (R-D3), and products whose content is on the device (R-R5).
    private var kept: Set<String> = []
    private var productsWithKeptContent: Set<String> = []
    private var contentKept: [AppBelief.KeptContent] = []
    private var failuresShown: [AppBelief.ShownFailure] = []
    private var restoresShownDone = 0
    /// Counts the changes to what `belief` reads: the simulator reads the belief again only when it moved.
    private(set) var generation: UInt64 = 0

    public init() {}

    /// The storage as the log shows it for `queue`'s device: what a restarted app process finds on the
    /// device's disk (a new process's queue has caught up on the log).
    init(restoring queue: PaymentQueue) {
        guard let pending = queue.pendingByNumber else { return }
        for key in queue.granted {
            guard let transaction = pending[key.number], let identifier = transaction.appStoreTransactionIdentifier else { continue }
            granted.insert(identifier)
            let original = transaction.originalTransaction.map { AppStoreIdentifier.transactionIdentifier($0.transactionIdentifier) }
            credits[original ?? identifier, default: 0] += 1
        }
        for (key, indices) in queue.keptDownloads {
            guard let transaction = pending[key.number], let identifier = transaction.appStoreTransactionIdentifier else { continue }
            for index in indices where transaction.downloads.indices.contains(index) {
                kept.insert(identifier + "/" + transaction.downloads[index].contentIdentifier)
            }
        }
        productsWithKeptContent = queue.productsWithKeptContent
    }

    /// What the app believes it did, for the invariants.
    public var belief: AppBelief {
        AppBelief(credits: credits, restoresShownDone: restoresShownDone, failuresShown: failuresShown, contentKept: contentKept)
    }

    /// Whether the app granted `transaction` itself (not only the purchase it restores).
    func granted(transaction: PaymentTransaction) -> Bool {
        transaction.appStoreTransactionIdentifier.map(granted.contains) ?? false
    }

    func wasGranted(_ transaction: SKPaymentTransaction) -> Bool {
        transaction.transactionIdentifier.map(granted.contains) ?? false
    }

    /// Credits `transaction`, keyed by the purchase it is for.
    func credit(_ transaction: SKPaymentTransaction) {
        guard let identifier = transaction.transactionIdentifier else { return }
        generation += 1
        granted.insert(identifier)
        credits[transaction.original?.transactionIdentifier ?? identifier, default: 0] += 1
    }

    func wasKept(_ download: SKDownload) -> Bool { kept.contains(Self.name(of: download)) }

    func keep(_ download: SKDownload) {
        generation += 1
        kept.insert(Self.name(of: download))
        productsWithKeptContent.insert(download.transaction.payment.productIdentifier)
        contentKept.append(AppBelief.KeptContent(download: download))
    }

    func hasKeptContent(of product: String) -> Bool { productsWithKeptContent.contains(product) }

    func showFailure(_ transaction: SKPaymentTransaction) {
        generation += 1
        failuresShown.append(AppBelief.ShownFailure(transaction: transaction))
    }

    func showRestoreDone() {
        generation += 1
        restoresShownDone += 1
    }

    private static func name(of download: SKDownload) -> String {
        (download.transaction.transactionIdentifier ?? "") + "/" + download.contentIdentifier
    }
}

/// The built-in behaviours' observer: an `SKPaymentTransactionObserver` on Apple's API alone, with
/// the app's state in `BuiltInAppStorage`. Attached through `SKPaymentQueue` (`PaymentQueue.add(_:)`
/// below), under its `observerName`.
public final class BuiltInObserver: NSObject, SKPaymentTransactionObserver, @unchecked Sendable {
    public let observerName: String
    public let behavior: ObserverBehavior
    /// Where finished downloads are copied to keep them (the app's own storage), and the
    /// folder in it, relative to the content root; nil keeps nothing.
    public let storage: ContentStorage?
    public let persistentFolder: String
    /// The app's own storage on the device, set when the observer is attached.
    var app: BuiltInAppStorage!
    /// Product identifiers unlocked so far (this launch).
    public private(set) var unlocked: Set<String> = []
    public private(set) var keptContent: [String] = []
    public private(set) var errors: [String] = []
    public private(set) var restoresFinished = 0
    public private(set) var restoresFailed = 0
    // Transactions by their object: a launch's queue hands one object per transaction.
    /// Restored transactions not yet handled that were delivered since the last restore ended: they
    /// belong to the next restore to end (StoreKit tells a restore's transactions before its end).
    private var restoredOutstanding: Set<ObjectIdentifier> = []
    /// Restores that ended before their restored transactions were handled, oldest first: each is
    /// shown done once its own transactions are (R-O3). Kept apart so that a second restore started
    /// meanwhile neither delays nor swallows the first one's.
    private var restoresWaiting: [Set<ObjectIdentifier>] = []
    /// Transactions `deferredAsFailed` gave up on.
    private var forgotten: Set<ObjectIdentifier> = []
    /// Restored transactions whose content the user passed over: granted and finished without downloading.
    private var passedOver: Set<ObjectIdentifier> = []

    public init(name: String, behavior: ObserverBehavior, storage: ContentStorage?, persistentFolder: String = "apps") {
        self.observerName = name
        self.behavior = behavior
        self.storage = storage
        self.persistentFolder = persistentFolder
    }

    public func paymentQueue(_ queue: SKPaymentQueue, updatedTransactions transactions: [SKPaymentTransaction]) {
        guard behavior != .audit else { return }
        for transaction in transactions where !forgotten.contains(ObjectIdentifier(transaction)) {
            let object = ObjectIdentifier(transaction)
            switch transaction.transactionState {
            case .purchasing:
                continue
            case .deferred:
                // Correct apps wait for the decision; this bug shows a failure and forgets the payment.
                guard behavior == .deferredAsFailed else { continue }
                forgotten.insert(object)
                app.showFailure(transaction)
            case .failed:
                if behavior != .sdkFinishesEarly { app.showFailure(transaction) }
                queue.finishTransaction(transaction)
            case .purchased, .restored:
                if transaction.transactionState == .restored && !transaction.downloads.isEmpty && behavior.wantsContent {
                    restoredOutstanding.insert(object)
                    // Selective restore (R-R5): the user picks only content the device lacks; what the app
                    // already kept is not downloaded again. Decided before any download started.
                    if behavior == .restoreThenFinish, transaction.downloads.allSatisfy({ $0.state == .waiting }),
                       app.hasKeptContent(of: transaction.payment.productIdentifier) {
                        passedOver.insert(object)
                    }
                }
                if passedOver.contains(object) {
                    complete(transaction, on: queue)
                    continue
                }
                process(transaction, on: queue)
            }
        }
    }

    private func process(_ transaction: SKPaymentTransaction, on queue: SKPaymentQueue) {
        if behavior == .sdkFinishesEarly {
            queue.finishTransaction(transaction)
            return
        }
        guard behavior.wantsContent, !transaction.downloads.isEmpty else {
            complete(transaction, on: queue)
            return
        }
        let notStarted = transaction.downloads.filter { $0.state == .waiting }
        if !notStarted.isEmpty { queue.start(notStarted) }
        if behavior == .finishBeforeDownloads {
            queue.finishTransaction(transaction)
        } else {
            // Delivered again after a relaunch (R-Q4): what finished while the app was not running is
            // kept now, as it would have been when it finished (R-D3).
            keepFinished(transaction)
            completeIfDone(transaction, on: queue)
        }
    }

    public func paymentQueue(_ queue: SKPaymentQueue, updatedDownloads downloads: [SKDownload]) {
        guard behavior.wantsContent, behavior != .finishBeforeDownloads else { return }
        for download in downloads {
            if behavior == .finishAtFullProgress, download.progress >= 1, !Self.hasEnded(download) {
                // The bug: progress 1.0 is not "finished" (R-D2).
                complete(download.transaction, on: queue)
                continue
            }
            guard Self.hasEnded(download) else { continue }
            let transaction = download.transaction
            if download.state == .finished { keepFinished(transaction) }
            if behavior == .finishOnFirstDownload {
                complete(transaction, on: queue)
            } else {
                completeIfDone(transaction, on: queue)
            }
        }
    }

    private static func hasEnded(_ download: SKDownload) -> Bool {
        download.state == .finished || download.state == .failed || download.state == .cancelled
    }

    /// Finishes only when every download of the transaction has ended (R-D3).
    private func completeIfDone(_ transaction: SKPaymentTransaction, on queue: SKPaymentQueue) {
        guard transaction.downloads.allSatisfy(Self.hasEnded) else { return }
        complete(transaction, on: queue)
    }

    private func complete(_ transaction: SKPaymentTransaction, on queue: SKPaymentQueue) {
        grant(transaction)
        queue.finishTransaction(transaction)
    }

    /// Grants once per transaction, across relaunches, by the app's persistent record (R-Q4);
    /// `creditEveryDelivery` is the bug of not checking it.
    private func grant(_ transaction: SKPaymentTransaction) {
        unlocked.insert(transaction.payment.productIdentifier)
        if behavior == .creditEveryDelivery || !app.wasGranted(transaction) { app.credit(transaction) }
        let object = ObjectIdentifier(transaction)
        // Removing from an empty set still hashes the key.
        if !restoredOutstanding.isEmpty { restoredOutstanding.remove(object) }
        guard !restoresWaiting.isEmpty else { return }
        var index = 0
        while index < restoresWaiting.count {
            if restoresWaiting[index].remove(object) != nil, restoresWaiting[index].isEmpty {
                restoresWaiting.remove(at: index)
                app.showRestoreDone()
            } else {
                index += 1
            }
        }
    }

    /// Keeps each finished download of the transaction not kept yet, in order: the one just
    /// reported, and any that finished while the app was not running (R-D3, R-Q4).
    private func keepFinished(_ transaction: SKPaymentTransaction) {
        for download in transaction.downloads where download.state == .finished && !app.wasKept(download) {
            if let url = download.contentURL { keep(url, download) }
        }
    }

    /// Moves the downloaded file somewhere persistent before its URL becomes invalid (R-D3, R-T4).
    private func keep(_ contentURL: URL, _ download: SKDownload) {
        guard let storage else {
            app.keep(download)
            return
        }
        let destination = "\(persistentFolder)/\(download.contentIdentifier)-\(download.contentVersion)"
        do {
            try storage.copy(contentURL.relativePath, to: destination)
            keptContent.append(destination)
            app.keep(download)
        } catch {
            errors.append("could not keep \(contentURL.relativePath): \(error)")
        }
    }

    /// Shows the restore done once its restored transactions are handled (R-O3);
    /// `restoreDoneEarly` shows it at once.
    public func paymentQueueRestoreCompletedTransactionsFinished(_ queue: SKPaymentQueue) {
        restoresFinished += 1
        guard behavior != .audit, behavior != .sdkFinishesEarly else { return }
        if restoredOutstanding.isEmpty || behavior == .restoreDoneEarly {
            app.showRestoreDone()
        } else {
            restoresWaiting.append(restoredOutstanding)
        }
        restoredOutstanding = []
    }

    public func paymentQueue(_ queue: SKPaymentQueue, restoreCompletedTransactionsFailedWithError error: any Error) {
        restoresFailed += 1
    }
}

extension PaymentQueue {
    /// Attaches a built-in observer the way the app's code does, `SKPaymentQueue.default().add(_:)`,
    /// under its `observerName`, as this launch's app code; its app storage is the device's.
    package func add(_ observer: BuiltInObserver) { add(observer, named: observer.observerName) }

    /// Attaches `observer` as the app's code of this launch does, `SKPaymentQueue.default().add(_:)`,
    /// under `name` (what the queue logs). The app's storage on the device is the built-in app's.
    package func add(_ observer: any SKPaymentTransactionObserver, named name: String) {
        // The built-in app records each transaction it grants, so what it owns is what it granted itself.
        let (device, app) = SimulatedApp.launchDevice(on: self, storage: { BuiltInAppStorage(restoring: self) }, belief: \.belief,
                                                      generation: \.generation, owns: { $0.granted(transaction: $1) })
        (observer as? BuiltInObserver)?.app = app
        device.run { SKPaymentQueue.default().add(observer, named: name) }
    }
}
