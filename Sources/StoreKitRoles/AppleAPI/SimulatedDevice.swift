import Foundation
import StoreKitModel

/// One simulated device as its app's code sees it: the queue of the launch now running, the
/// app's receipt file, and the asynchronous work it started. Every callback into the app's code
/// runs with its device bound (`run`), so `SKPaymentQueue.default()` and
/// `Bundle.main.appStoreReceiptURL` are that device's, whichever thread the runtime uses.
public final class SimulatedDevice: @unchecked Sendable {
    /// The device whose app code is running on this task or thread, if any.
    @TaskLocal package static var current: SimulatedDevice?

    public let name: String
    package let queue: PaymentQueue
    package let storage: DeviceStorage
    /// This launch's `SKPaymentQueue` (a launch's objects go with it, as an app process's do).
    private(set) lazy var paymentQueue = SKPaymentQueue(device: self)

    /// Reads what the app believes (`SimulatedApp`'s `belief`); nil when the test gives no way.
    let readBelief: (() -> AppBelief)?
    /// Counts the changes to what `readBelief` reads, when the app's storage counts them (the built-in
    /// app's): the belief is read only after it moved. nil: read after every callback.
    let beliefGeneration: (() -> UInt64)?
    /// Depth of `run` calls: the app's state is read once its outermost callback returned.
    private var depth = 0

    /// The launch of the app this device's objects belong to (`PaymentQueue.launchNumber`).
    let launch: Int
    /// Whether the app's storage says it granted a transaction it finishes (`grantIfOwned`); nil: its
    /// belief's credits say so, of the transaction or of the purchase it restores.
    let owns: ((PaymentTransaction) -> Bool)?

    init(queue: PaymentQueue, storage: DeviceStorage, readBelief: (() -> AppBelief)? = nil, beliefGeneration: (() -> UInt64)? = nil,
         owns: ((PaymentTransaction) -> Bool)? = nil) {
        self.beliefGeneration = beliefGeneration
        self.name = queue.device
        self.queue = queue
        self.launch = queue.launchNumber
        self.owns = owns
        self.storage = storage
        self.readBelief = readBelief
    }

    /// Restores this launch heard finish and the app has not shown done yet, oldest first.
    var restoresToShow: [UInt64] = []
    /// The restores noted in `restoresToShow`: each is noted once, whichever observer hears it first.
    var notedRestores: Set<UInt64> = []

    /// Receipt refreshes this launch started, oldest first: the store answers them in order.
    var receiptRefreshes: [SKReceiptRefreshRequest] = []

    /// A receipt refresh's answer arrived (the receipt file is already updated).
    func finishReceiptRefresh() {
        guard !receiptRefreshes.isEmpty else { return }
        receiptRefreshes.removeFirst().finished()
    }

    /// Runs `body` as this device's app code.
    func run<Result>(_ body: () throws -> Result) rethrows -> Result {
        depth += 1
        defer {
            // The app's tasks that this made ready run now, as the app's code, before its state is read.
            if depth == 1, executor.hasReady { Self.$current.withValue(self) { executor.runReady() } }
            depth -= 1
            if depth == 0 { noteBelief() }
        }
        return try Self.$current.withValue(self, operation: body)
    }

    /// Where this launch's tasks run (`Task { … }` in the app's code); a kill drops what is waiting.
    package let executor = SimulatedExecutor()

    /// Records in the log what the app's own state says it did since it was last read: each new
    /// credit of a transaction as `contentGranted` (and, keyed by a restored transaction's own
    /// identifier, as `transactionReported` `creditedAsNewPurchase`), each restore shown done as
    /// `restoreShownDone`, each revenue report as `transactionReported` `revenue`, each failure shown
    /// as `failureShown`, each file kept as `contentKept`, attributed to the
    /// observer whose callback is running. Called after each callback and before
    /// each command the app makes, so a credit the app made before a finish is logged before it.
    func noteBelief(finishing: PaymentTransaction? = nil) {
        guard let readBelief else { return }
        if let beliefGeneration {
            // Unchanged since last read: nothing new to log, only a finish's kept files to check.
            let generation = beliefGeneration()
            guard generation != storage.lastBeliefGeneration else {
                if let finishing { keepIfOwned(finishing, storage.lastBelief) }
                return
            }
            storage.lastBeliefGeneration = generation
        }
        let belief = readBelief()
        let before = storage.lastBelief
        storage.lastBelief = belief
        // In the order an app does these within one callback: shows a failure or keeps a file, tells its
        // user a purchase completed, credits, shows a restore done once what it restored is credited, finishes.
        for failure in belief.failuresShown.dropFirst(before.failuresShown.count) where failure.transaction.key.device == name {
            queue.failureShown(failure.transaction)
        }
        for kept in belief.contentKept.dropFirst(before.contentKept.count) where kept.download.key.transaction.device == name {
            queue.contentKept(kept.download)
        }
        if let finishing { keepIfOwned(finishing, belief) }
        for completion in belief.purchaseCompletionsShown.dropFirst(before.purchaseCompletionsShown.count)
        where completion.transaction.key.device == name {
            // A transaction object of another device, or a restored one's `original`, is none of this queue's.
            let own = completion.paymentTransaction == completion.transaction.key
            queue.transactionReported(completion.transaction, own ? .purchaseCompletionShown : .otherPurchaseCompletionShown)
        }
        noteCredits(belief, before: before, finishing: finishing)
        if belief.restoresShownDone > before.restoresShownDone {
            // Each "done" shown is for the oldest restore this launch heard finish, has not shown yet and
            // whose restored transactions the app handled (granted, or finishing now); else the oldest.
            for _ in before.restoresShownDone..<belief.restoresShownDone {
                if !restoresToShow.isEmpty {
                    let index = restoresToShow.firstIndex { isHandled($0, finishing: finishing) } ?? 0
                    queue.restoreShownDone(restore: restoresToShow.remove(at: index))
                } else {
                    queue.restoreShownDone()
                }
            }
        }
    }

    /// Whether every unfinished transaction `restore` restored is granted or is the one finishing.
    private func isHandled(_ restore: UInt64, finishing: PaymentTransaction?) -> Bool {
        guard let pending = queue.pendingByNumber else { return true }
        return !queue.restoreOfTransaction.contains { key, of in
            of == restore && key != finishing?.key && pending[key.number] != nil && !queue.granted.contains(key)
        }
    }

    /// The app finishes `transaction`, whose files its state says it kept though no record of that was
    /// logged (a kill dropped it; the app's storage kept the file): logged as kept then, before the finish.
    private func keepIfOwned(_ transaction: PaymentTransaction, _ belief: AppBelief) {
        guard !transaction.downloads.isEmpty, !belief.contentKept.isEmpty else { return }
        for kept in belief.contentKept where kept.download.key.transaction == transaction.key && !queue.wasKept(kept.download) {
            queue.contentKept(kept.download)
        }
    }

    /// Each new credit and revenue report, logged against the transaction it is for.
    private func noteCredits(_ belief: AppBelief, before: AppBelief, finishing: PaymentTransaction?) {
        guard !belief.credits.isEmpty || !belief.revenueReported.isEmpty, let pending = queue.pendingByNumber, !pending.isEmpty else { return }
        // In transaction order: the app's dictionary has none.
        var revenue: [TransactionKey: (transaction: PaymentTransaction, times: Int)] = [:]
        for (identifier, count) in belief.revenueReported where count > before.revenueReported[identifier] ?? 0 {
            guard let transaction = Self.transaction(creditedAs: identifier, in: pending) else { continue }
            revenue[transaction.key, default: (transaction, 0)].times += count - (before.revenueReported[identifier] ?? 0)
        }
        for key in revenue.keys.sorted() {
            let report = revenue[key]!
            for _ in 0..<report.times { queue.transactionReported(report.transaction, .revenue) }
        }
        var grants: [TransactionKey: (transaction: PaymentTransaction, times: Int)] = [:]
        var creditedAsNew: Set<TransactionKey> = []
        for (identifier, count) in belief.credits where count > before.credits[identifier] ?? 0 {
            // The transaction being finished is the one a credit just before its finish is for;
            // otherwise the one with that identifier, or the newest restore of it.
            let finished = finishing.flatMap { finishing in
                finishing.appStoreTransactionIdentifier == identifier
                    || finishing.originalTransaction.map { AppStoreIdentifier.transactionIdentifier($0.transactionIdentifier) } == identifier ? finishing : nil
            }
            guard let transaction = finished ?? Self.transaction(creditedAs: identifier, in: pending) else { continue }
            grants[transaction.key, default: (transaction, 0)].times += count - (before.credits[identifier] ?? 0)
            // A restored transaction's credits are keyed by its original purchase (R-Q9).
            if transaction.transactionState == .restored, transaction.appStoreTransactionIdentifier == identifier { creditedAsNew.insert(transaction.key) }
        }
        for key in grants.keys.sorted() {
            let grant = grants[key]!
            for _ in 0..<grant.times { queue.contentGranted(grant.transaction) }
            if creditedAsNew.contains(key) { queue.transactionReported(grant.transaction, .creditedAsNewPurchase) }
        }
    }

    /// The app finishes `transaction`, which its own state says it owns though no credit of it was
    /// logged: a restore of something it credited before, or a credit whose record a kill dropped
    /// (the app's storage kept it). It is logged as granted then, just before the finish.
    func grantIfOwned(_ transaction: PaymentTransaction) {
        guard transaction.transactionState.isPaid, !queue.wasGranted(transaction) else { return }
        if let owns {
            if owns(transaction) { queue.contentGranted(transaction) }
            return
        }
        guard !storage.lastBelief.credits.isEmpty else { return }
        let identifiers = [transaction.transactionIdentifier, transaction.originalTransaction?.transactionIdentifier]
            .map { $0.map(AppStoreIdentifier.transactionIdentifier) }
        guard identifiers.contains(where: { ($0.flatMap { storage.lastBelief.credits[$0] } ?? 0) > 0 }) else { return }
        queue.contentGranted(transaction)
    }

    /// The unfinished transaction that the app's credit keyed by `identifier` (Apple's decimal form, as
    /// the app reads it) is for: the one with that transaction identifier, or the newest restored one
    /// whose original has it.
    static func transaction(creditedAs identifier: String, in pending: [UInt64: PaymentTransaction]) -> PaymentTransaction? {
        var found: PaymentTransaction?
        for transaction in pending.values {
            if transaction.appStoreTransactionIdentifier == identifier { return transaction }
            guard transaction.originalTransaction.map({ AppStoreIdentifier.transactionIdentifier($0.transactionIdentifier) }) == identifier else { continue }
            if found.map({ $0.key < transaction.key }) ?? true { found = transaction }
        }
        return found
    }

    /// Starts asynchronous work of the app: `completion` runs later, as the app's code on this
    /// device (in exploration its timing, and when `canFail` its failure, are choices).
    func startWork(canFail: Bool, completion: @escaping (_ succeeded: Bool) -> Void) {
        queue.startWork(canFail: canFail) { [self] succeeded in run { completion(succeeded) } }
    }
}

/// What a device keeps across its app's launches: its receipt file.
package final class DeviceStorage: @unchecked Sendable {
    let device: String
    /// The folder of the app's bundle on this device; the receipt is `StoreKit/receipt` in it, as on iOS.
    let bundleFolder: URL
    /// What the app's own state said when last read (it survives launches, as the app's storage does).
    var lastBelief = AppBelief()
    /// The app storage's count of changes when `lastBelief` was read, when it counts them.
    var lastBeliefGeneration: UInt64?
    /// The receipt's entries as the device last knew them, by transaction identifier, in order.
    package private(set) var receiptEntries: [OriginalTransaction] = []
    /// The purchase each restored or renewed entry stands for (its `original_transaction_id`).
    package private(set) var originalIdentifiers: [String: String] = [:]
    private var receiptIdentifiers: Set<String> = []
    /// Whether the receipt file holds `receiptEntries` (set by StoreKitSim, which writes it).
    package var receiptWritten = false
    package var madeFolder = false

    /// The folder made for this device alone, removed with it.
    private let root: URL

    init(device: String, root: URL) {
        self.device = device
        self.root = root
        self.bundleFolder = root.appendingPathComponent(device.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? "device", isDirectory: true)
    }

    deinit {
        if madeFolder { try? FileManager.default.removeItem(at: root) }
    }

    package var receiptURL: URL { bundleFolder.appendingPathComponent("StoreKit/receipt") }

    /// Whether the receipt has the entry of transaction `identifier` already (checked before one is made).
    func hasReceiptEntry(_ identifier: String) -> Bool { receiptIdentifiers.contains(identifier) }

    /// A purchase or a restore lands in the device's receipt, as StoreKit updates it.
    func note(_ entry: OriginalTransaction, original: String?) {
        guard receiptIdentifiers.insert(entry.transactionIdentifier).inserted else { return }
        receiptEntries.append(entry)
        if let original { originalIdentifiers[entry.transactionIdentifier] = original }
        receiptWritten = false
    }

    /// A refreshed receipt replaces what the device had.
    func replaceReceipt(with entries: [OriginalTransaction]) {
        receiptEntries = entries
        originalIdentifiers = [:]
        receiptIdentifiers = Set(entries.map(\.transactionIdentifier))
        receiptWritten = false
    }

}
