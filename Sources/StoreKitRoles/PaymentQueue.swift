import StoreKitModel

/// SKPaymentTransactionObserver. Write your own and attach it with `PaymentQueue.add(_:)`;
/// the simulator calls it exactly as StoreKit would (R-O1 … R-O4).
public protocol PaymentTransactionObserver: AnyObject {
    /// The name the queue logs for this observer (unique per device).
    var observerName: String { get }
    /// Required: one or more transactions changed (R-O1).
    func paymentQueue(_ queue: PaymentQueue, updatedTransactions transactions: [PaymentTransaction])
    /// Transactions were finished and removed (R-O2).
    func paymentQueue(_ queue: PaymentQueue, removedTransactions transactions: [PaymentTransaction])
    /// Every restored transaction has been delivered (R-O3).
    func paymentQueueRestoreCompletedTransactionsFinished(_ queue: PaymentQueue)
    /// The restore failed (R-O3).
    func paymentQueue(_ queue: PaymentQueue, restoreCompletedTransactionsFailedWithError error: StoreError)
    /// Downloads changed state or progress (R-O4).
    func paymentQueue(_ queue: PaymentQueue, updatedDownloads downloads: [Download])
}

extension PaymentTransactionObserver {
    public func paymentQueue(_ queue: PaymentQueue, removedTransactions transactions: [PaymentTransaction]) {}
    public func paymentQueueRestoreCompletedTransactionsFinished(_ queue: PaymentQueue) {}
    public func paymentQueue(_ queue: PaymentQueue, restoreCompletedTransactionsFailedWithError error: StoreError) {}
    public func paymentQueue(_ queue: PaymentQueue, updatedDownloads downloads: [Download]) {}
}

/// In which order a queue calls its observers. StoreKit guarantees none (R-Q5), so the
/// simulator can draw one per delivery from the run's choices.
public enum ObserverOrdering: String, Sendable, Hashable, Codable {
    case attachOrder
    case seededShuffle
}

/// SKPaymentQueue: the default queue of one device (app install, R-Q2). Apps never
/// create it; the runtime hands each device's app its queue. Calls that change state
/// become commands to the queue role; callbacks come when the resulting events arrive.
public final class PaymentQueue {
    public let device: String
    public let catalog: Catalog
    private var projection = QueueProjection(commandWindow: 1)
    private var observers: [PaymentTransactionObserver] = []
    private var outbox: [CommandBody] = []
    private var finishRequested: Set<TransactionKey> = []
    /// Downloads this launch asked to start, so observers that are told twice ask once.
    private var startRequested: Set<DownloadKey> = []
    private let ordering: ObserverOrdering
    private let choices: ChoiceSource
    /// Callbacks made so far, per kind, for reports and tests.
    public private(set) var callbackCounts: [String: Int] = [:]

    public init(device: String, catalog: Catalog, ordering: ObserverOrdering = .seededShuffle, choices: ChoiceSource) {
        self.device = device
        self.catalog = catalog
        self.ordering = ordering
        self.choices = choices
    }

    // MARK: The StoreKit API

    /// False when the user may not authorise payments (R-Q1).
    public var canMakePayments: Bool { projection.device(device)?.canMakePayments ?? true }

    /// Pending (unfinished) transactions; undefined (empty here) while no observer is attached (R-Q6).
    public var transactions: [PaymentTransaction] {
        guard let state = projection.device(device), !state.observers.isEmpty else { return [] }
        return state.pendingTransactions
    }

    /// The device's state as this app last heard it.
    public var state: DeviceState? { projection.device(device) }

    /// Attaches an observer (R-Q3). Once the queue confirms it, every unfinished
    /// transaction is delivered to it (R-Q4).
    public func add(_ observer: PaymentTransactionObserver) {
        guard !observers.contains(where: { $0 === observer }) else { return }
        observers.append(observer)
        outbox.append(.attachObserver(device: device, observer: observer.observerName))
    }

    public func remove(_ observer: PaymentTransactionObserver) {
        guard let index = observers.firstIndex(where: { $0 === observer }) else { return }
        observers.remove(at: index)
        if attachedNames.contains(observer.observerName) {
            outbox.append(.detachObserver(device: device, observer: observer.observerName))
        }
    }

    /// Adds a payment (R-Q7). An unknown product or a quantity of 0 or less fails at once,
    /// as StoreKit's exception does; everything else is the queue's to judge.
    public func add(_ payment: Payment) throws(Rejection) {
        guard payment.quantity > 0 else {
            throw Rejection(.invalidQuantity, "quantity must be greater than 0, got \(payment.quantity) (R-Q7)")
        }
        guard catalog.product(payment.productIdentifier) != nil else {
            throw Rejection(.unknownProduct, "product '\(payment.productIdentifier)' is not registered with the store (R-Q7)")
        }
        outbox.append(.addPayment(device: device, payment: payment))
    }

    /// Finishes a transaction (R-Q8). Still purchasing is an error; finishing twice is harmless.
    public func finishTransaction(_ transaction: PaymentTransaction) throws(Rejection) {
        let current = projection.transaction(transaction.key) ?? transaction
        guard current.transactionState != .purchasing else {
            throw Rejection(.transactionStillPurchasing, "transaction \(transaction.key) is still purchasing; it cannot be finished yet (R-Q8)")
        }
        guard projection.transaction(transaction.key) != nil, finishRequested.insert(transaction.key).inserted else { return }
        outbox.append(.finishTransaction(transaction.key))
    }

    /// Asks the store to restore the account's completed purchases (R-Q9, R-Q10).
    public func restoreCompletedTransactions(applicationUsername: String? = nil) {
        outbox.append(.restoreCompletedTransactions(device: device, applicationUsername: applicationUsername))
    }

    /// Starts downloads (R-Q11); ones this launch already asked for are not asked for again.
    public func start(_ downloads: [Download]) {
        let fresh = downloads.filter { startRequested.insert($0.key).inserted }
        send(fresh, CommandBody.startDownloads)
    }
    public func pause(_ downloads: [Download]) { send(downloads, CommandBody.pauseDownloads) }
    public func resume(_ downloads: [Download]) { send(downloads, CommandBody.resumeDownloads) }
    public func cancel(_ downloads: [Download]) { send(downloads, CommandBody.cancelDownloads) }

    private func send(_ downloads: [Download], _ make: ([DownloadKey]) -> CommandBody) {
        guard !downloads.isEmpty else { return }
        outbox.append(make(downloads.map(\.key)))
    }

    // MARK: The app's side of the runtime

    /// Sends app-lifecycle commands that have no StoreKit method (the OS does these).
    public func enqueue(_ command: CommandBody) { outbox.append(command) }

    /// The app quits: its observer objects go with it, and the queue detaches them.
    public func terminateApp() {
        observers.removeAll()
        finishRequested.removeAll()
        startRequested.removeAll()
        outbox.append(.terminateApp(device: device))
    }

    /// Commands produced since the last call, in the order they were made.
    public func drainOutbox() -> [CommandBody] {
        defer { outbox.removeAll(keepingCapacity: true) }
        return outbox
    }

    private var attachedNames: [String] { projection.device(device)?.observers ?? [] }

    /// Observers attached right now, in this delivery's order (R-Q5).
    private func attachedObservers() -> [PaymentTransactionObserver] {
        let names = attachedNames
        let attached = observers.filter { names.contains($0.observerName) }
        return ordering == .seededShuffle ? choices.shuffled(attached, .observerOrder) : attached
    }

    private func count(_ callback: String, _ calls: Int) {
        if calls > 0 { callbackCounts[callback, default: 0] += calls }
    }

    /// Applies an event without calling observers: a restarted app catching up on what
    /// happened while it was gone. It then relaunches, and the queue delivers every
    /// unfinished transaction again (R-Q4).
    public func catchUp(_ recorded: RecordedEvent) {
        projection.apply(recorded)
    }

    /// Applies one event of this device and calls the observers as StoreKit would.
    public func deliver(_ recorded: RecordedEvent) {
        let before: PaymentTransaction? = if case .transactionFinished(let key) = recorded.event { projection.transaction(key) } else { nil }
        projection.apply(recorded)
        switch recorded.event {
        case .observerAttached(_, let name):
            // Every unfinished transaction is delivered again to a newly attached observer (R-Q4).
            guard let observer = observers.first(where: { $0.observerName == name }),
                  let pending = projection.device(device)?.pendingTransactions, !pending.isEmpty else { return }
            count("updatedTransactions", 1)
            observer.paymentQueue(self, updatedTransactions: pending)
        case .appTerminated:
            finishRequested.removeAll()
            startRequested.removeAll()
        case .transactionAdded(let key, _), .transactionDeferred(let key), .transactionPurchased(let key, _, _, _),
             .transactionFailed(let key, _), .transactionRestored(let key, _, _, _, _):
            guard let transaction = projection.transaction(key) else { return }
            let targets = attachedObservers()
            count("updatedTransactions", targets.count)
            for observer in targets { observer.paymentQueue(self, updatedTransactions: [transaction]) }
        case .transactionFinished(let key):
            finishRequested.remove(key)
            for download in before?.downloads ?? [] { startRequested.remove(download.key) }
            guard let transaction = before else { return }
            let targets = attachedObservers()
            count("removedTransactions", targets.count)
            for observer in targets { observer.paymentQueue(self, removedTransactions: [transaction]) }
        case .restoreFinished:
            let targets = attachedObservers()
            count("restoreCompletedTransactionsFinished", targets.count)
            for observer in targets { observer.paymentQueueRestoreCompletedTransactionsFinished(self) }
        case .restoreFailed(_, _, let error):
            let targets = attachedObservers()
            count("restoreCompletedTransactionsFailed", targets.count)
            for observer in targets { observer.paymentQueue(self, restoreCompletedTransactionsFailedWithError: error) }
        case .downloadStarted(let key), .downloadProgressed(let key, _, _), .downloadPaused(let key), .downloadResumed(let key),
             .downloadFinished(let key, _), .downloadFailed(let key, _), .downloadCancelled(let key):
            guard let download = projection.transaction(key.transaction)?.downloads[safe: key.index] else { return }
            let targets = attachedObservers()
            count("updatedDownloads", targets.count)
            for observer in targets { observer.paymentQueue(self, updatedDownloads: [download]) }
        default:
            break
        }
    }
}
