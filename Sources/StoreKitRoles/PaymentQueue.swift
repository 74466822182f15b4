import Foundation
import StoreKitModel

/// In which order a queue calls its observers. StoreKit guarantees none (R-Q5), so the
/// simulator can draw one per delivery from the run's choices.
public enum ObserverOrdering: String, Sendable, Hashable, Codable {
    case attachOrder
    case seededShuffle
}

/// SKStorefront: the App Store country of a queue (`PaymentQueue.storefront`). Apple's numeric
/// storefront identifiers are not published as a table, so `identifier` is the country code too.
public struct Storefront: Sendable, Hashable {
    /// ISO 3166-1 alpha-3, e.g. "USA", as a `.storekit` file's `_storefront` gives it.
    public var countryCode: String
    public var identifier: String { countryCode }
    public init(countryCode: String) { self.countryCode = countryCode }
}

/// SKPaymentQueue: the default queue of one device (app install, R-Q2). Apps never
/// create it; the runtime hands each device's app its queue. Calls that change state
/// become commands to the queue role; callbacks come when the resulting events arrive.
public final class PaymentQueue {
    public let device: String
    public let catalog: Catalog
    // Unchecked exclusivity on the hot state (the projection and every set and flag below): observers
    // call back into the queue only between accesses (the projection is applied before any callback),
    // never during one.
    @exclusivity(unchecked) private var projection = QueueProjection(commandWindow: 1, tracksCommands: false)
    @exclusivity(unchecked) private var observers: [ObserverBridge] = [] {
        didSet { attachedCache = nil }
    }
    /// The observers both added here and attached in the queue's view, in attach order: made
    /// again only when either list changes, not for every delivery.
    @exclusivity(unchecked) private var attachedCache: [ObserverBridge]? {
        didSet { swappedPairCache = nil }
    }
    /// With exactly two attached observers, the other order (`attachedCache` reversed), made once:
    /// a delivery's one draw picks either without copying the list.
    @exclusivity(unchecked) private var swappedPairCache: [ObserverBridge]?
    /// Commands not yet sent, each with who made it (an observer's name, or "device" for the
    /// user's script and the OS), for traces.
    /// Optional so that a drain moves each command out in place (`swap` with nil) instead of reversing
    /// the array to pop it from the end: nil only within a drain.
    @exclusivity(unchecked) private var outbox: [OutgoingCommand?] = []
    /// A struct rather than a tuple: an array of tuples is copied and destroyed through the
    /// runtime's generic tuple witnesses, which showed in exploration's profile.
    private struct OutgoingCommand {
        var body: CommandBody
        var sender: String
    }
    /// Counts the calls of observers (one delivery, to each attached observer): the objects an app's
    /// observers are handed are made once per delivery (`SKPaymentQueue.objects(of:delivery:notingReceipt:)`).
    @exclusivity(unchecked) private(set) var deliveryNumber: UInt64 = 0
    /// The observer whose callback is running, so its calls are attributed to it.
    @exclusivity(unchecked) private var calling: String?
    /// Transactions the app has granted, in its own persistent storage: survives quitting and
    /// being killed (only what was sent before a kill is kept). Rebuilt from the log on catch-up.
    @exclusivity(unchecked) public private(set) var granted: Set<TransactionKey> = []
    /// Products whose hosted content the app kept on this device (its own storage: survives quitting;
    /// rebuilt from the log on catch-up). A selective restore does not download them again (R-R5).
    @exclusivity(unchecked) public private(set) var productsWithKeptContent: Set<String> = []
    /// Downloads of unfinished transactions whose files the app kept, by transaction (its own
    /// storage: survives quitting; rebuilt from the log on catch-up).
    @exclusivity(unchecked) public private(set) var keptDownloads: [TransactionKey: Set<Int>] = [:]
    /// The restore that restored each unfinished restored transaction, so that a "restore done" the
    /// app's state shows is matched with a restore whose transactions it handled (StoreKitSim).
    @exclusivity(unchecked) package private(set) var restoreOfTransaction: [TransactionKey: UInt64] = [:]
    /// The restore whose `restoreCompletedTransactionsFinished` was delivered last.
    @exclusivity(unchecked) public private(set) var lastFinishedRestore: UInt64?
    /// Chance that one update is delivered to the observers twice (StoreKit may redeliver).
    public var duplicateDeliveryProbability: Double = 0
    /// Records callbacks and commands with their senders, when set (exploration traces).
    public var trace: AppTrace?
    /// What the host of the app's own code (StoreKitSim) keeps for this device across launches.
    public var appHost: AnyObject?
    /// The date the log's time 0 stands for (`Scenario.startDate`): the StoreKit API dates a
    /// transaction this plus its log time.
    public var startDate: Date = Scenario.defaultStartDate
    /// Set when the app quit, until the queue confirms it: what the queue says meanwhile was
    /// meant for the observers that went with the app, not for the next launch's.
    @exclusivity(unchecked) private var awaitingTermination = false
    @exclusivity(unchecked) private var finishRequested: Set<TransactionKey> = []
    /// Downloads this launch asked to start, so observers that are told twice ask once.
    @exclusivity(unchecked) private var startRequested: Set<DownloadKey> = []
    /// Restored transactions of the command being delivered, told to the observers in one
    /// `updatedTransactions` call once that command's events have arrived (F-C1).
    @exclusivity(unchecked) private var restoredBatch: (command: CommandID, keys: [TransactionKey], cause: UInt64)?
    /// The transaction a resumed interrupted purchase adds: StoreKit announces it purchased, never
    /// purchasing (F-I1), so its `transactionAdded` makes no callback.
    @exclusivity(unchecked) private var resumedPurchase: TransactionKey?
    /// Receipt pieces of refreshes still arriving, by request (R-R2); the last piece completes one.
    @exclusivity(unchecked) private var receiptPieces: [UInt64: [OriginalTransaction]] = [:]
    private let ordering: ObserverOrdering
    private let choices: ChoiceSource
    /// Callbacks made so far, per kind (counted in place: a dictionary keyed by name cost a
    /// string hash on every delivery).
    @exclusivity(unchecked) private var callbackTally = [Int](repeating: 0, count: Callback.allCases.count)

    /// Callbacks made so far, per kind, for reports and tests.
    public var callbackCounts: [String: Int] {
        var counts: [String: Int] = [:]
        for callback in Callback.allCases where callbackTally[callback.index] > 0 { counts[callback.rawValue] = callbackTally[callback.index] }
        return counts
    }

    /// The observer callbacks, named as StoreKit names them (traces and `callbackCounts`).
    enum Callback: String, CaseIterable {
        case updatedTransactions, removedTransactions, restoreCompletedTransactionsFinished, restoreCompletedTransactionsFailed, updatedDownloads,
             didRevokeEntitlementsForProductIdentifiers, requestDidFinish
        var index: Int {
            switch self {
            case .updatedTransactions: 0
            case .removedTransactions: 1
            case .restoreCompletedTransactionsFinished: 2
            case .restoreCompletedTransactionsFailed: 3
            case .updatedDownloads: 4
            case .didRevokeEntitlementsForProductIdentifiers: 5
            case .requestDidFinish: 6
            }
        }
    }

    public init(device: String, catalog: Catalog, ordering: ObserverOrdering = .seededShuffle, choices: ChoiceSource) {
        self.device = device
        self.catalog = catalog
        self.ordering = ordering
        self.choices = choices
    }

    // MARK: The StoreKit API

    /// False when the user may not authorise payments (R-Q1).
    public var canMakePayments: Bool { readState { $0.canMakePayments } ?? true }

    /// SKPaymentQueue's `storefront`: the App Store country the user buys in, the catalog's
    /// `_storefront` test setting (F-S4); nil when the catalog sets none.
    public var storefront: Storefront? { catalog.testSettings.storefront.map(Storefront.init(countryCode:)) }

    /// Pending (unfinished) transactions; undefined (empty here) while no observer is attached (R-Q6).
    public var transactions: [PaymentTransaction] {
        readState { $0.observers.isEmpty ? [] : $0.pendingTransactions } ?? []
    }

    /// The pending transaction with `key`, as `transactions` holds it (nil while no observer is
    /// attached): one lookup, where searching `transactions` sorts every pending one.
    func transaction(_ key: TransactionKey) -> PaymentTransaction? {
        guard key.device == device else { return nil }
        return readState { $0.observers.isEmpty ? nil : $0.pending[key.number] } ?? nil
    }

    /// The device's state as this app last heard it.
    public var state: DeviceState? { projection.device(device) }

    /// The device's pending transactions by number, read in place (`state` copies the whole device state).
    var pendingByNumber: [UInt64: PaymentTransaction]? { readState { $0.pending } }

    // The projection is read through an exclusive (inout) access: a method called on the stored
    // property copies the whole projection (retaining every field) for the call, and `device(_:)`
    // copies the device's whole state; these run several times per delivered event.
    @inline(__always)
    private func readState<Result>(_ read: (DeviceState) -> Result) -> Result? { Self.read(device, in: &projection, read) }

    @inline(__always)
    private static func read<Result>(_ device: String, in projection: inout QueueProjection, _ read: (DeviceState) -> Result) -> Result? {
        projection.withDevice(device, read)
    }

    @inline(__always)
    private func lookUp(_ key: TransactionKey) -> PaymentTransaction? { Self.lookUp(key, in: &projection) }

    /// Reads one field of a pending transaction in place: `lookUp` copies the whole transaction
    /// (its strings and downloads retained and released) for a caller that needs its state or one download.
    @inline(__always)
    private static func readPending<Result>(_ key: TransactionKey, in projection: inout QueueProjection,
                                            _ read: (PaymentTransaction) -> Result) -> Result? {
        projection.withDevice(key.device) { state in state.pending.index(forKey: key.number).map { read(state.pending.values[$0]) } } ?? nil
    }

    @inline(__always)
    private static func lookUp(_ key: TransactionKey, in projection: inout QueueProjection) -> PaymentTransaction? {
        projection.transaction(key)
    }

    /// Attaches an observer (R-Q3). Once the queue confirms it, every unfinished
    /// transaction is delivered to it (R-Q4).
    func add(_ observer: ObserverBridge) {
        guard !observers.contains(where: { $0 === observer }) else { return }
        observers.append(observer)
        enqueue(.attachObserver(device: device, observer: observer.observerName))
    }

    func remove(_ observer: ObserverBridge) {
        guard let index = observers.firstIndex(where: { $0 === observer }) else { return }
        observers.remove(at: index)
        if attachedNames.contains(observer.observerName) {
            enqueue(.detachObserver(device: device, observer: observer.observerName))
        }
    }

    /// Adds a payment (R-Q7). An unknown product or a quantity of 0 or less fails at once,
    /// as StoreKit's exception does; everything else is the queue's to judge.
    public func add(_ payment: Payment) throws(Rejection) {
        guard payment.quantity > 0 else {
            throw Rejection(.invalidQuantity, "quantity must be greater than 0, got \(payment.quantity) (R-Q7)")
        }
        guard payment.quantity <= Payment.maximumQuantity else {
            throw Rejection(.invalidQuantity, "quantity must be at most \(Payment.maximumQuantity), got \(payment.quantity) (F-P1)")
        }
        guard catalog.product(payment.productIdentifier) != nil else {
            throw Rejection(.unknownProduct, "product '\(payment.productIdentifier)' is not registered with the store (R-Q7)")
        }
        enqueue(.addPayment(device: device, payment: payment))
    }

    /// Finishes a transaction (R-Q8). Still purchasing is an error; finishing twice is harmless.
    public func finishTransaction(_ transaction: PaymentTransaction) throws(Rejection) {
        let currentState = Self.readPending(transaction.key, in: &projection) { $0.transactionState }
        guard (currentState ?? transaction.transactionState) != .purchasing else {
            throw Rejection(.transactionStillPurchasing, "transaction \(transaction.key) is still purchasing; it cannot be finished yet (R-Q8)")
        }
        guard let currentState else { return }
        // Only a finish the queue will accept (a complete transaction) is remembered, so that a second
        // one is not sent. A deferred transaction's finish is sent and refused (the log shows the app's
        // mistake); remembered, it would swallow the app's correct finish after approval.
        if currentState.isComplete {
            guard finishRequested.insert(transaction.key).inserted else { return }
        }
        enqueue(.finishTransaction(transaction.key))
    }

    /// Asks the store to restore the account's completed purchases (R-Q9, R-Q10).
    public func restoreCompletedTransactions(applicationUsername: String? = nil) {
        enqueue(.restoreCompletedTransactions(device: device, applicationUsername: applicationUsername))
    }

    /// SKReceiptRefreshRequest's `start()` (R-R2): the store sends the latest receipt; the observers
    /// hear `receiptRefreshFinished` once all of it arrived. Creates no transactions.
    public func refreshReceipt() {
        enqueue(.refreshReceipt(device: device))
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
        enqueue(make(downloads.map(\.key)))
    }

    // MARK: The app's own asynchronous work

    /// Asynchronous work the app started and whose completion has not come yet, by number: the
    /// app's process holds it, so a quit or a kill loses it (its completion never comes).
    @exclusivity(unchecked) private var work: [UInt64: Work] = [:]
    /// Work started since the runtime last took it (`takeStartedWork`), to be timed.
    @exclusivity(unchecked) private var startedWork: [(number: UInt64, canFail: Bool)] = []
    @exclusivity(unchecked) private var nextWorkNumber: UInt64 = 1
    private struct Work {
        var canFail: Bool
        var sender: String
        var completion: (_ succeeded: Bool) -> Void
    }

    /// Starts a piece of the app's asynchronous work (a request to its server, a timer): the runtime
    /// times its completion (in exploration, a choice: before or after the next delivery, and, when
    /// `canFail`, whether it fails), then calls `completion` as an app callback. Returns its number.
    @discardableResult
    public func startWork(canFail: Bool, completion: @escaping (_ succeeded: Bool) -> Void) -> UInt64 {
        let number = nextWorkNumber
        nextWorkNumber += 1
        work[number] = Work(canFail: canFail, sender: calling ?? "device", completion: completion)
        startedWork.append((number, canFail))
        return number
    }

    /// Work started since the last call, for the runtime to time.
    public func takeStartedWork() -> [(number: UInt64, canFail: Bool)] {
        guard !startedWork.isEmpty else { return [] }
        defer { startedWork = [] }
        return startedWork
    }

    /// True while some work the app started has not completed.
    public var hasPendingWork: Bool { !work.isEmpty }

    /// Whether work `number` can fail; nil when it is no longer awaited (completed, or lost with its launch).
    public func awaitedWorkCanFail(_ number: UInt64) -> Bool? { work[number]?.canFail }

    /// Work `number` completes: its completion runs, attributed to whoever started it. False when
    /// it is no longer awaited (the launch that started it ended).
    @discardableResult
    public func completeWork(_ number: UInt64, succeeded: Bool) -> Bool {
        guard let finished = work.removeValue(forKey: number) else { return false }
        let previous = calling
        calling = finished.sender
        finished.completion(succeeded)
        calling = previous
        return true
    }

    // MARK: The app's side of the runtime

    /// Sends app-lifecycle commands that have no StoreKit method (the OS does these).
    public func enqueue(_ command: CommandBody) { outbox.append(OutgoingCommand(body: command, sender: calling ?? "device")) }

    // MARK: What the app did (recorded in the log, so invariants about apps can be checked; package
    // access: the built-in behaviours call these, and StoreKitSim calls them for what it reads from an app's state)

    /// The app gave the user what `transaction` paid for. Record it once per transaction: a
    /// transaction can be delivered again (after a relaunch, R-Q4), so check `wasGranted` first.
    package func contentGranted(_ transaction: PaymentTransaction) {
        granted.insert(transaction.key)
        enqueue(.recordAppAction(.contentGranted(transaction.key, observer: calling ?? "app",
                                                 productIdentifier: transaction.payment.productIdentifier)))
    }

    /// True when the app's persistent storage says `transaction` was granted (also across relaunches).
    package func wasGranted(_ transaction: PaymentTransaction) -> Bool { granted.contains(transaction.key) }

    /// The app moved a finished download's file to its own storage (R-D3).
    package func contentKept(_ download: Download) {
        keptDownloads[download.key.transaction, default: []].insert(download.key.index)
        enqueue(.recordAppAction(.contentKept(download.key, observer: calling ?? "app")))
    }

    /// True when the app's storage says it kept `download`'s file (also across relaunches).
    package func wasKept(_ download: Download) -> Bool {
        keptDownloads[download.key.transaction]?.contains(download.key.index) ?? false
    }

    /// The app told the user that the last finished restore is done (R-O3).
    package func restoreShownDone() {
        guard let restore = lastFinishedRestore else { return }
        restoreShownDone(restore: restore)
    }

    /// The app told the user that an earlier restore (its `lastFinishedRestore` when it ended) is done.
    package func restoreShownDone(restore: UInt64) {
        enqueue(.recordAppAction(.restoreShownDone(device: device, restore: restore, observer: calling ?? "app")))
    }

    /// The app showed a failed transaction's error to the user.
    package func failureShown(_ transaction: PaymentTransaction) {
        enqueue(.recordAppAction(.failureShown(transaction.key, observer: calling ?? "app")))
    }

    /// The app's own state says it told `report` about `transaction` (StoreKitSim reads it from the app).
    package func transactionReported(_ transaction: PaymentTransaction, _ report: AppReport) {
        enqueue(.recordAppAction(.transactionReported(transaction.key, observer: calling ?? "app", report: report)))
    }

    /// The app quits: its observer objects go with it, and the queue detaches them.
    public func terminateApp() {
        forgetLaunch()
        awaitingTermination = true
        finishRequested.removeAll()
        startRequested.removeAll()
        outbox.append(OutgoingCommand(body: .terminateApp(device: device), sender: "device"))
    }

    /// The queue recorded this app's termination without the app asking (another client's
    /// `terminateApp`, as the system may end an app): its observers are gone, as on a quit.
    public func terminatedElsewhere() { forgetLaunch() }

    /// Counts the launches that ended: the app's objects (StoreKitSim's) belong to the launch they were made in.
    package private(set) var launchNumber = 0

    /// What a launch held that ends with the app: its observers and a restore batch being told.
    private func forgetLaunch() {
        launchNumber += 1
        observers.removeAll()
        restoredBatch = nil
        work.removeAll()
        startedWork.removeAll()
    }

    /// Commands made and not yet drained.
    public var pendingCommandCount: Int { outbox.count }

    /// The commands made and not yet drained, in order.
    public var pendingCommands: [CommandBody] { outbox.compactMap { $0?.body } }

    /// Commands produced since the last call, in the order they were made.
    public func drainOutbox() -> [CommandBody] {
        drainOutbox(keepingFirst: .max).map(\.body)
    }

    /// The first `count` commands produced since the last call, with who made each; the rest
    /// are dropped (the app was killed before sending them), and so are their grants.
    public func drainOutbox(keepingFirst count: Int) -> [(body: CommandBody, sender: String)] {
        // A new empty outbox, not `removeAll(keepingCapacity:)`: each of a replay's thousands of
        // apps would otherwise hold one as large as its largest burst so far.
        defer { outbox = [] }
        for command in outbox[min(count, outbox.count)...] { forgetUnsent(command!.body) }
        return outbox[..<min(count, outbox.count)].map { ($0!.body, $0!.sender) }
    }

    /// `drainOutbox(keepingFirst:)` handing each kept command to `body`, in order, without an
    /// array of its own; the outbox keeps its capacity (the deterministic runtime drains an app
    /// after every reaction). `body` must not call back into this queue.
    /// Each command is moved out of the outbox (swapped with nil, in order), not copied.
    public func drainOutbox(keepingFirst count: Int, _ body: (_ command: consuming CommandBody, _ sender: String) -> Void) {
        guard !outbox.isEmpty else { return }
        for index in outbox.indices {
            var taken: OutgoingCommand?
            swap(&taken, &outbox[index])
            guard let command = taken else { continue }
            if index < count {
                body(command.body, command.sender)
            } else {
                forgetUnsent(command.body)
            }
        }
        outbox.removeAll(keepingCapacity: true)
    }

    /// A command the app made is not sent after all (a replay drops what the recorded app lost
    /// as it quit): a grant it carried is not in the app's storage, as with `drainOutbox(keepingFirst:)`.
    public func withdraw(_ body: CommandBody) { forgetUnsent(body) }

    /// What an unsent command said the app did is not in its storage.
    private func forgetUnsent(_ body: CommandBody) {
        switch body {
        case .recordAppAction(.contentGranted(let key, _, _)): granted.remove(key)
        case .recordAppAction(.contentKept(let key, _)): keptDownloads[key.transaction]?.remove(key.index)
        default: break
        }
    }

    /// Calls `body` on each observer as StoreKit would, attributing what they do to them.
    private func call(_ targets: [ObserverBridge], _ callback: Callback, _ detail: @autoclosure () -> String,
                      cause: UInt64, _ body: (ObserverBridge) -> Void) {
        deliveryNumber += 1
        callbackTally[callback.index] += targets.count
        for observer in targets {
            trace?.callback(device: device, observer: observer.observerName, callback: callback.rawValue, detail: detail(), cause: cause)
            calling = observer.observerName
            body(observer)
            calling = nil
        }
    }

    private var attachedNames: [String] { readState { $0.observers } ?? [] }

    /// Observers attached right now, in this delivery's order (R-Q5).
    private func attachedObservers() -> [ObserverBridge] {
        let attached: [ObserverBridge]
        if let cached = attachedCache {
            attached = cached
        } else {
            let names = attachedNames
            attached = observers.filter { names.contains($0.observerName) }
            attachedCache = attached
        }
        guard ordering == .seededShuffle else { return attached }
        guard attached.count == 2 else { return Self.shuffled(attached, .observerOrder, choices) }
        // The draw `shuffled` makes for two (one, at the first position), without a copy per delivery.
        guard choices.index(.observerOrder, count: 2) == 1 else { return attached }
        if let swapped = swappedPairCache { return swapped }
        let swapped = [attached[1], attached[0]]
        swappedPairCache = swapped
        return swapped
    }

    /// `ChoiceSource.shuffled` (the same draws), written for observers: the generic version is not
    /// specialised across the existential and cost a metadata lookup per call. The copy is made
    /// only when a draw moves an observer (the array given is shared otherwise).
    static func shuffled(_ observers: [ObserverBridge], _ kind: ChoiceKind, _ choices: ChoiceSource) -> [ObserverBridge] {
        guard observers.count > 1 else { return observers }
        var order: [ObserverBridge]?
        for position in 0..<(observers.count - 1) {
            let pick = position + choices.index(kind, count: observers.count - position)
            if pick != position {
                if order == nil { order = observers }
                order!.swapAt(position, pick)
            }
        }
        return order ?? observers
    }

    /// Forgets the attached observers when an event changes the queue's list of them.
    private func noteObserverChanges(_ event: Event) {
        switch event {
        case .deviceRegistered, .appLaunched, .appTerminated, .observerAttached, .observerDetached: attachedCache = nil
        default: break
        }
    }

    /// Applies an event without calling observers: a restarted app catching up on what
    /// happened while it was gone. It then relaunches, and the queue delivers every
    /// unfinished transaction again (R-Q4).
    public func catchUp(_ recorded: RecordedEvent) {
        projection.apply(recorded)
        noteObserverChanges(recorded.event)
        switch recorded.event {
        case .appActionRecorded(.contentGranted(let key, _, _)): granted.insert(key)
        case .appActionRecorded(.contentKept(let key, _)): noteKept(key)
        case .transactionFinished(let key): forgetFinished(key)
        default: break
        }
    }

    /// Whether the app already kept the hosted content of `product` on this device (R-R5).
    public func hasKeptContent(of product: String) -> Bool { productsWithKeptContent.contains(product) }

    /// A finished transaction is never delivered again: what the app noted about it need not be remembered.
    private func forgetFinished(_ key: TransactionKey) {
        granted.remove(key)
        if !restoreOfTransaction.isEmpty { restoreOfTransaction[key] = nil }
        if !keptDownloads.isEmpty { keptDownloads[key] = nil }
    }

    private func noteKept(_ key: DownloadKey) {
        keptDownloads[key.transaction, default: []].insert(key.index)
        // Kept before its transaction is finished, so the transaction is still in the queue.
        if let product = Self.readPending(key.transaction, in: &projection, { $0.payment.productIdentifier }) { productsWithKeptContent.insert(product) }
    }

    /// Applies one event of this device and calls the observers as StoreKit would.
    public func deliver(_ recorded: RecordedEvent) {
        // A command's events arrive one after another: one of another command (or its restoreFinished)
        // means the batch is complete (F-C1).
        if let batch = restoredBatch, !Self.continues(batch.command, recorded) { flushRestored() }
        // One look at the event before the projection changes (each `if case` with a binding
        // copies the whole event out, and this runs for every event of the device).
        var finished: TransactionKey?
        var kept: DownloadKey?
        switch recorded.event {
        case .transactionFinished(let key): finished = key
        case .appActionRecorded(.contentKept(let key, _)): kept = key
        case .appTerminated: awaitingTermination = false
        default: break
        }
        let before = finished.flatMap { lookUp($0) }
        projection.apply(recorded)
        if let finished { forgetFinished(finished) }
        if let kept { noteKept(kept) }
        noteObserverChanges(recorded.event)
        let cause = recorded.sequence
        guard !awaitingTermination else { return }
        switch recorded.event {
        case .observerAttached(_, let name):
            // Every unfinished transaction is delivered again to a newly attached observer (R-Q4).
            guard let observer = observers.first(where: { $0.observerName == name }),
                  let pending = readState({ $0.pendingTransactions }), !pending.isEmpty else { return }
            call([observer], .updatedTransactions, Self.describe(pending), cause: cause) { $0.paymentQueue(self, updatedTransactions: pending) }
        case .appTerminated:
            receiptPieces.removeAll()
            finishRequested.removeAll()
            startRequested.removeAll()
        case .transactionRestored(let key, let restore, _, _, _):
            restoreOfTransaction[key] = restore
            // StoreKit tells a restore's transactions together, several per call (F-C1).
            guard let command = recorded.commandID else { return updated(key, cause: cause) }
            if restoredBatch == nil { restoredBatch = (command, [], cause) }
            restoredBatch?.keys.append(key)
            // A full piece is a whole command: the store sends the next only once it has seen this one.
            if restoredBatch?.keys.count == QueueProjection.maximumRestorePiece { flushRestored() }
        case .interruptedPurchaseResumed(let key, _):
            resumedPurchase = key
        case .transactionAdded(let key, _) where key == resumedPurchase:
            resumedPurchase = nil
        case .transactionAdded(let key, _), .transactionDeferred(let key), .transactionPurchased(let key, _, _, _),
             .transactionFailed(let key, _), .subscriptionRenewed(let key, _, _, _):
            updated(key, cause: cause)
        case .transactionFinished(let key):
            finishRequested.remove(key)
            for download in before?.downloads ?? [] { startRequested.remove(download.key) }
            guard let transaction = before else { return }
            call(attachedObservers(), .removedTransactions, Self.describe([transaction]), cause: cause) { $0.paymentQueue(self, removedTransactions: [transaction]) }
        case .entitlementsRevoked(_, let original):
            let products = [original.payment.productIdentifier]
            call(attachedObservers(), .didRevokeEntitlementsForProductIdentifiers, products.joined(separator: ","), cause: cause) {
                $0.paymentQueue(self, didRevokeEntitlementsForProductIdentifiers: products)
            }
        case .receiptDelivered(_, let request, let firstIndex, let entries, let isLast):
            // A refresh asked for by an earlier launch died with it, as an SKRequest does.
            guard firstIndex == receiptPieces[request]?.count ?? 0 else { receiptPieces[request] = nil; return }
            receiptPieces[request, default: []] += entries
            guard isLast, let receipt = receiptPieces.removeValue(forKey: request) else { return }
            call(attachedObservers(), .requestDidFinish, Self.describe(receipt: receipt, request: request), cause: cause) {
                $0.paymentQueue(self, receiptRefreshFinished: receipt)
            }
        case .restoreFinished(_, let restore):
            lastFinishedRestore = restore
            call(attachedObservers(), .restoreCompletedTransactionsFinished, "restore \(restore)", cause: cause) {
                $0.paymentQueueRestoreCompletedTransactionsFinished(self)
            }
        case .restoreFailed(_, let restore, let error):
            call(attachedObservers(), .restoreCompletedTransactionsFailed, "restore \(restore)", cause: cause) {
                $0.paymentQueue(self, restoreCompletedTransactionsFailedWithError: error)
            }
        case .downloadStarted(let key), .downloadProgressed(let key, _, _), .downloadPaused(let key), .downloadResumed(let key),
             .downloadFinished(let key, _), .downloadFailed(let key, _), .downloadCancelled(let key):
            guard let download = Self.readPending(key.transaction, in: &projection, { $0.downloads[safe: key.index] }) ?? nil else { return }
            call(attachedObservers(), .updatedDownloads, "\(key) \(download.downloadState) \(Int(download.progress * 100))%", cause: cause) { $0.paymentQueue(self, updatedDownloads: [download]) }
        default:
            break
        }
    }

    /// Tells the attached observers that `key` changed.
    private func updated(_ key: TransactionKey, cause: UInt64) {
        guard let transaction = lookUp(key) else { return }
        updated([transaction], cause: cause)
    }

    /// Tells the attached observers that `transactions` changed, in one `updatedTransactions` call each.
    private func updated(_ transactions: [PaymentTransaction], cause: UInt64) {
        guard !transactions.isEmpty else { return }
        let targets = attachedObservers()
        call(targets, .updatedTransactions, Self.describe(transactions), cause: cause) { $0.paymentQueue(self, updatedTransactions: transactions) }
        if duplicateDeliveryProbability > 0, !targets.isEmpty, choices.chance(.duplicateDelivery, duplicateDeliveryProbability) {
            // StoreKit may tell observers about the same update again; apps must cope.
            call(attachedObservers(), .updatedTransactions, Self.describe(transactions) + " (again)", cause: cause) {
                $0.paymentQueue(self, updatedTransactions: transactions)
            }
        }
    }

    private func flushRestored() {
        guard let batch = restoredBatch else { return }
        restoredBatch = nil
        updated(batch.keys.compactMap { lookUp($0) }, cause: batch.cause)
    }

    /// True when `recorded` is another restored transaction of `command`.
    private static func continues(_ command: CommandID, _ recorded: RecordedEvent) -> Bool {
        if case .transactionRestored = recorded.event { return recorded.commandID == command }
        return false
    }

    /// "t3 purchased, t4 restored": transactions as a trace shows them.
    static func describe(_ transactions: [PaymentTransaction]) -> String {
        transactions.map { "t\($0.key.number) \($0.transactionState)" }.joined(separator: ", ")
    }

    /// `receipt 2: 3 entries`, naming the entries at an introductory offer when there are any (F-O3):
    /// `receipt 2: 3 entries (1 free trial, 1 introductory price)`.
    static func describe(receipt: [OriginalTransaction], request: UInt64) -> String {
        let trials = receipt.count { $0.isTrialPeriod }, offers = receipt.count { $0.isInIntroductoryOfferPeriod }
        let marked = [(trials, "free trial"), (offers, "introductory price")].filter { $0.0 > 0 }.map { "\($0.0) \($0.1)" }
        return "receipt \(request): \(receipt.count) entries" + (marked.isEmpty ? "" : " (\(marked.joined(separator: ", ")))")
    }
}
