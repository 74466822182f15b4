/// One restore in progress on a device.
public struct RestoreProgress: Sendable, Hashable {
    public var number: UInt64
    public var applicationUsername: String?
    public var restoredCount: Int = 0
}

/// The queue of one device (app install) as projected from the log (R-Q2).
public struct DeviceState: Sendable, Hashable {
    public var device: String
    public var account: String
    public var isRunning = false
    public var canMakePayments = true
    /// Attached observers in the order they attached (R-Q3, R-Q5).
    public var observers: [String] = []
    /// Unfinished transactions by number (R-Q6). Finished ones leave, so memory stays bounded.
    public var pending: [UInt64: PaymentTransaction] = [:]
    public var nextTransactionNumber: UInt64 = 1
    public var restoresInProgress: [UInt64: RestoreProgress] = [:]
    public var nextRestoreNumber: UInt64 = 1
    public var launchCount = 0
    /// Payments the app added (restored transactions not counted): lets a restarted
    /// app resume its user's script where it stopped.
    public var paymentsAdded = 0
    /// Deferred transactions the parent declined: they stay deferred, with no callback (F-A1).
    public var declined: Set<UInt64> = []
    /// Original transaction identifiers of this device's subscriptions that ended (F-U2) and of its
    /// refunded purchases (F-K1): neither happens twice. One entry per subscription or refund.
    public var endedSubscriptions: Set<String> = []
    public var revokedPurchases: Set<String> = []
    /// Numbers of interrupted purchases the user resumed (F-I1): each resumes once.
    public var resumedInterruptions: Set<UInt64> = []
    /// Receipt refreshes asked for and not yet answered (R-R2): entries delivered so far, by request.
    public var receiptRefreshesInProgress: [UInt64: Int] = [:]
    public var nextReceiptRefreshNumber: UInt64 = 1

    public init(device: String, account: String) {
        self.device = device
        self.account = account
    }

    /// Pending transactions in the order the queue created them.
    public var pendingTransactions: [PaymentTransaction] {
        pending.values.sorted { $0.key.number < $1.key.number }
    }

    /// True when every unfinished transaction waits for nobody: each is a declined Ask to Buy
    /// request, which stays deferred for good (F-A1).
    public var onlyDeclinedPending: Bool {
        pending.count == declined.count && pending.keys.allSatisfy { declined.contains($0) }
    }

    /// True for a transaction number this queue created and has since finished.
    public func wasFinished(_ number: UInt64) -> Bool {
        // `index(forKey:)`: comparing `pending[number]` with nil copies the transaction out first.
        number < nextTransactionNumber && pending.index(forKey: number) == nil
    }
}

/// Totals kept while folding, for summaries.
public struct EventTotals: Sendable, Hashable {
    public var events = 0
    public var purchased = 0
    public var failed = 0
    public var restored = 0
    public var deferred = 0
    public var finished = 0
    public var downloadsFinished = 0
    public var downloadsFailed = 0
    public var downloadsCancelled = 0
    public var rejections = 0
    public var restoresFinished = 0
    public var restoresFailed = 0
    /// Ask to Buy requests the parent declined (F-A1).
    public var declined = 0
    /// Failed transactions by their SKError code.
    public var failuresByCode: [StoreError.Code: Int] = [:]
    /// Subscription renewals delivered as new purchased transactions (F-U1).
    public var renewed = 0
    /// Subscriptions that ended (F-U2).
    public var expired = 0
    /// Purchases refunded, their entitlements revoked (F-K1).
    public var revoked = 0
    /// Receipt refreshes answered (R-R2), and the entries their receipts listed.
    public var receiptsRefreshed = 0
    public var receiptEntries = 0

    public init() {}

    /// Adds another partition's totals (every field: keep this beside them).
    public mutating func add(_ other: EventTotals) {
        events += other.events
        purchased += other.purchased
        failed += other.failed
        restored += other.restored
        deferred += other.deferred
        finished += other.finished
        downloadsFinished += other.downloadsFinished
        downloadsFailed += other.downloadsFailed
        downloadsCancelled += other.downloadsCancelled
        rejections += other.rejections
        restoresFinished += other.restoresFinished
        restoresFailed += other.restoresFailed
        declined += other.declined
        renewed += other.renewed
        expired += other.expired
        revoked += other.revoked
        receiptsRefreshed += other.receiptsRefreshed
        receiptEntries += other.receiptEntries
        failuresByCode.merge(other.failuresByCode, uniquingKeysWith: +)
    }
}

/// The state of a queue partition: a pure fold over its events. `decide` validates a
/// command against it and says which events the command causes, or why it is refused.
public struct QueueProjection: Sendable {
    /// Devices in registration order, found by name through `deviceSlots`; the device of the
    /// last change is compared first (a command's events, and every event an app hears, concern
    /// one device, and comparing a short name costs less than hashing it).
    @usableFromInline var deviceStates: [DeviceState] = []
    @usableFromInline var deviceSlots: [String: Int] = [:]
    @usableFromInline var lastDeviceName = ""
    @usableFromInline var lastDeviceSlot = -1

    /// Every registered device by name (built on each call: for reports and tests, not hot paths).
    public var devices: [String: DeviceState] {
        Dictionary(uniqueKeysWithValues: deviceStates.map { ($0.device, $0) })
    }

    /// Devices registered.
    public var deviceCount: Int { deviceStates.count }
    /// The most devices one queue (partition) registers; beyond, `registerDevice` is refused
    /// (`tooManyDevices`), so a client inventing devices cannot grow the queue's memory without bound.
    /// Larger fleets are spread over partitions. Part of the rules (a replay decides the same), so
    /// changed only by tests of the rule.
    public var maximumDevices = QueueProjection.defaultMaximumDevices
    public static let defaultMaximumDevices = 250_000

    @inlinable func slot(of name: String) -> Int? {
        if lastDeviceSlot >= 0, name == lastDeviceName { return lastDeviceSlot }
        return deviceSlots[name]
    }
    /// The run's header, boxed: the projection is copied whenever a class reads it to call a
    /// method, and the header's eight strings would each be retained and released.
    private var headerBox: HeaderBox?
    public var header: RunHeader? { headerBox?.header }
    public var seed: UInt64? { header?.seed }
    public private(set) var lastSequence: UInt64 = 0
    public private(set) var totals = EventTotals()
    /// Recently applied command ids, so that a retried command takes effect once.
    public private(set) var recentCommands: CommandWindow

    /// The most transactions one device may have unfinished at once.
    public static let maximumPendingPerDevice = 10_000
    /// The most restored transactions in one `completeRestore` command.
    public static let maximumRestorePiece = 100

    /// Whether applied command ids are remembered (`recentCommands`): only a projection that
    /// decides commands needs them; an app's view of its queue does not.
    public let tracksCommands: Bool

    public init(commandWindow: Int = 65_536, tracksCommands: Bool = true) {
        recentCommands = CommandWindow(capacity: commandWindow)
        self.tracksCommands = tracksCommands
    }

    /// Pending transactions summed over every device.
    public var pendingCount: Int { deviceStates.reduce(0) { $0 + $1.pending.count } }

    /// Notes a command accepted as a harmless no-op (it causes no event, e.g. a second finish,
    /// R-Q8), so its sender's next command does not look as if it skipped ahead of it (a live
    /// queue answers "retry later" to that, and the sender would wait for an event that never comes).
    public mutating func noteNoOperation(_ id: CommandID) {
        recentCommands.insert(id, sequence: lastSequence)
    }

    // MARK: Folding

    public mutating func apply(_ recorded: RecordedEvent) {
        noteEvent(sequence: recorded.sequence, commandID: recorded.event.isOutOfWindowRejection ? nil : recorded.commandID)
        switch recorded.event {
        case .runStarted(let header): headerBox = HeaderBox(header)
        case .deviceRegistered(let device, let account):
            let state = DeviceState(device: device, account: account)
            if let existing = deviceSlots[device] {
                deviceStates[existing] = state
            } else {
                deviceSlots[device] = deviceStates.count
                deviceStates.append(state)
            }
        case .appLaunched(let device): launchApp(device: slot(of: device))
        case .appTerminated(let device):
            modifyDevice(device) { state in
                state.isRunning = false
                state.observers.removeAll()
            }
        case .observerAttached(let device, let observer): attachObserver(device: slot(of: device), observer)
        case .observerDetached(let device, let observer): modifyDevice(device) { $0.observers.removeAll { $0 == observer } }
        case .paymentsAllowedChanged(let device, let allowed): modifyDevice(device) { $0.canMakePayments = allowed }
        case .transactionAdded(let key, let payment): addTransaction(device: slot(of: key.device), key, payment)
        case .transactionDeferred(let key): deferTransaction(device: slot(of: key.device), number: key.number)
        case .transactionPurchased(let key, let identifier, let contents, let charged):
            purchaseTransaction(device: slot(of: key.device), key, identifier: identifier, date: recorded.timestamp,
                                contents: contents, charged: charged)
        case .transactionFailed(let key, let error): failTransaction(device: slot(of: key.device), number: key.number, error: error)
        case .restoreStarted(let device, let number, let username):
            modifyDevice(device) { state in
                state.restoresInProgress[number] = RestoreProgress(number: number, applicationUsername: username)
                if state.nextRestoreNumber <= number { state.nextRestoreNumber = number + 1 }
            }
        case .transactionRestored(let key, let restore, let identifier, let original, let contents):
            totals.restored += 1
            var transaction = Self.completed(key, .restored, identifier: identifier, original: original, date: recorded.timestamp, contents: contents)
            transaction.restoreNumber = restore
            modifyDevice(key.device) { state in
                state.pending[key.number] = transaction
                state.nextTransactionNumber = max(state.nextTransactionNumber, key.number + 1)
                state.restoresInProgress[restore]?.restoredCount += 1
            }
        case .restoreFinished(let device, let restore):
            totals.restoresFinished += 1
            modifyDevice(device) { $0.restoresInProgress[restore] = nil }
        case .restoreFailed(let device, let restore, _):
            totals.restoresFailed += 1
            modifyDevice(device) { $0.restoresInProgress[restore] = nil }
        case .transactionFinished(let key): finishTransaction(device: slot(of: key.device), number: key.number)
        case .downloadStarted(let key): changeDownload(device: slot(of: key.transaction.device), key, .started)
        case .downloadProgressed(let key, let progress, let timeRemaining):
            changeDownload(device: slot(of: key.transaction.device), key, .progressed(progress: progress, timeRemaining: timeRemaining))
        case .downloadPaused(let key): changeDownload(device: slot(of: key.transaction.device), key, .paused)
        case .downloadResumed(let key): changeDownload(device: slot(of: key.transaction.device), key, .resumed)
        case .downloadFinished(let key, let contentURL):
            changeDownload(device: slot(of: key.transaction.device), key, .finished(contentURL: contentURL))
        case .downloadFailed(let key, let error): changeDownload(device: slot(of: key.transaction.device), key, .failed(error))
        case .downloadCancelled(let key): changeDownload(device: slot(of: key.transaction.device), key, .cancelled)
        case .commandRejected: totals.rejections += 1
        case .appActionRecorded: break
        case .askToBuyDeclined(let key):
            totals.declined += 1
            modifyDevice(key.device) { state in
                if state.pending[key.number] != nil { state.declined.insert(key.number) }
            }
        case .subscriptionRenewed(let key, let identifier, let original, let contents):
            totals.renewed += 1
            var transaction = Self.completed(key, .purchased, identifier: identifier, original: original, date: recorded.timestamp, contents: contents)
            transaction.charged = true
            modifyDevice(key.device) { state in
                state.pending[key.number] = transaction
                state.nextTransactionNumber = max(state.nextTransactionNumber, key.number + 1)
            }
        case .subscriptionExpired(let device, let original):
            totals.expired += 1
            modifyDevice(device) { $0.endedSubscriptions.insert(original.transactionIdentifier) }
        case .entitlementsRevoked(let device, let original):
            totals.revoked += 1
            modifyDevice(device) { $0.revokedPurchases.insert(original.transactionIdentifier) }
        case .interruptedPurchaseResumed(let key, let interrupted):
            modifyDevice(key.device) { state in
                state.resumedInterruptions.insert(interrupted.number)
                // The transactionAdded that follows is the store's, not a payment the user added again.
                state.paymentsAdded -= 1
            }
        case .receiptRefreshStarted(let device, let request):
            modifyDevice(device) { state in
                state.receiptRefreshesInProgress[request] = 0
                state.nextReceiptRefreshNumber = max(state.nextReceiptRefreshNumber, request + 1)
            }
        case .receiptDelivered(let device, let request, _, let entries, let isLast):
            totals.receiptEntries += entries.count
            if isLast { totals.receiptsRefreshed += 1 }
            modifyDevice(device) { state in
                if isLast { state.receiptRefreshesInProgress[request] = nil } else { state.receiptRefreshesInProgress[request]? += entries.count }
            }
        case .subscriptionBillingRetry, .transactionsCleared: break  // The store's concern: the queue holds no subscription state but ended ones.
        }
    }

    // MARK: Fold steps
    // The events of a purchase's lifecycle, each in one place: `apply(_:)` finds the device by
    // name, `EncodedEventFold` by its encoded bytes, and both then take these same steps. A
    // device that is not registered (`nil`) changes nothing but the totals.

    /// What every event does first: its sequence, its count, and its command id (nil: not remembered).
    @inline(__always)
    mutating func noteEvent(sequence: UInt64, commandID: CommandID?) {
        lastSequence = sequence
        totals.events += 1
        if tracksCommands, let commandID { recentCommands.insert(commandID, sequence: sequence) }
    }

    /// The name of the device in `slot`, the same string the projection keeps.
    @inline(__always)
    func deviceName(at slot: Int) -> String { deviceStates[slot].device }

    mutating func launchApp(device slot: Int?) {
        guard let slot else { return }
        modifyDevice(at: slot) { state in
            state.isRunning = true
            state.launchCount += 1
        }
    }

    mutating func attachObserver(device slot: Int?, _ observer: String) {
        guard let slot else { return }
        modifyDevice(at: slot) { $0.observers.append(observer) }
    }

    mutating func addTransaction(device slot: Int?, _ key: TransactionKey, _ payment: Payment) {
        guard let slot else { return }
        modifyDevice(at: slot) { state in
            state.pending[key.number] = PaymentTransaction(key: key, payment: payment)
            state.paymentsAdded += 1
            state.nextTransactionNumber = max(state.nextTransactionNumber, key.number + 1)
        }
    }

    mutating func deferTransaction(device slot: Int?, number: UInt64) {
        totals.deferred += 1
        updateTransaction(device: slot, number: number) { $0.transactionState = .deferred }
    }

    mutating func purchaseTransaction(device slot: Int?, _ key: TransactionKey, identifier: String, date: Int64,
                                      contents: [HostedContent], charged: Bool) {
        totals.purchased += 1
        updateTransaction(device: slot, number: key.number) { transaction in
            transaction.transactionState = .purchased
            transaction.transactionIdentifier = identifier
            transaction.transactionDate = date
            transaction.charged = charged
            transaction.downloads = Self.downloads(of: key, contents)
        }
    }

    mutating func failTransaction(device slot: Int?, number: UInt64, error: StoreError) {
        totals.failed += 1
        totals.failuresByCode[error.code, default: 0] += 1
        updateTransaction(device: slot, number: number) { transaction in
            transaction.transactionState = .failed
            transaction.error = error
        }
    }

    mutating func finishTransaction(device slot: Int?, number: UInt64) {
        totals.finished += 1
        guard let slot else { return }
        modifyDevice(at: slot) { state in
            state.pending[number] = nil
            // Removing from an empty set still hashes the number; most devices have no declined request.
            if !state.declined.isEmpty { state.declined.remove(number) }
            Self.shrinkIfSparse(&state.pending)
        }
    }

    /// What a download event does to its download.
    enum DownloadChange {
        case started
        case progressed(progress: Double, timeRemaining: Double)
        case paused
        case resumed
        case finished(contentURL: String)
        case failed(StoreError)
        case cancelled
    }

    mutating func changeDownload(device slot: Int?, _ key: DownloadKey, _ change: DownloadChange) {
        switch change {
        case .finished: totals.downloadsFinished += 1
        case .failed: totals.downloadsFailed += 1
        case .cancelled: totals.downloadsCancelled += 1
        case .started, .progressed, .paused, .resumed: break
        }
        updateTransaction(device: slot, number: key.transaction.number) { transaction in
            guard transaction.downloads.indices.contains(key.index) else { return }
            Self.change(&transaction.downloads[key.index], change)
        }
    }

    @inline(__always)
    private static func change(_ download: inout Download, _ change: DownloadChange) {
        switch change {
        case .started:
            download.started = true
            download.downloadState = .active
        case .progressed(let progress, let timeRemaining):
            download.progress = progress
            download.timeRemaining = timeRemaining
        case .paused:
            download.downloadState = .paused
        case .resumed:
            download.downloadState = .active
        case .finished(let contentURL):
            download.downloadState = .finished
            download.progress = 1
            download.timeRemaining = 0
            download.contentURL = contentURL
        case .failed(let error):
            download.downloadState = .failed
            download.error = error
            download.timeRemaining = Download.timeRemainingUnknown
        case .cancelled:
            download.downloadState = .cancelled
            download.timeRemaining = Download.timeRemainingUnknown
        }
    }

    /// A transaction the store completed with no payment of this device's app: restored, or a renewal.
    private static func completed(_ key: TransactionKey, _ state: TransactionState, identifier: String, original: OriginalTransaction,
                                  date: Int64, contents: [HostedContent]) -> PaymentTransaction {
        var transaction = PaymentTransaction(key: key, payment: original.payment)
        transaction.transactionState = state
        transaction.transactionIdentifier = identifier
        transaction.transactionDate = date
        transaction.originalTransaction = original
        transaction.downloads = downloads(of: key, contents)
        return transaction
    }

    private static func downloads(of key: TransactionKey, _ contents: [HostedContent]) -> [Download] {
        contents.enumerated().map { index, content in Download(key: DownloadKey(transaction: key, index: index), content: content) }
    }

    /// A dictionary keeps the room of its largest size: a device that once held a restore's
    /// hundreds of transactions would keep that room for the rest of the run, so a long run's
    /// memory would follow the log, not what is pending. Rebuilt when far emptier than its room
    /// (rarely: only after most of a large burst was finished).
    @inline(__always)
    static func shrinkIfSparse(_ pending: inout [UInt64: PaymentTransaction]) {
        guard pending.capacity > 32, pending.count * 8 < pending.capacity else { return }
        var smaller = [UInt64: PaymentTransaction](minimumCapacity: pending.count)
        for (number, transaction) in pending { smaller[number] = transaction }
        pending = smaller
    }

    /// Changes a registered device in place with one hash lookup (an unknown one is left alone,
    /// as `devices[name]?.field = …` would): the fold runs once per event in every runtime.
    @inline(__always)
    private mutating func modifyDevice(_ name: String, _ change: (inout DeviceState) -> Void) {
        guard let index = slot(of: name) else { return }
        modifyDevice(at: index, change)
    }

    @inline(__always)
    private mutating func modifyDevice(at index: Int, _ change: (inout DeviceState) -> Void) {
        if index != lastDeviceSlot {
            lastDeviceSlot = index
            lastDeviceName = deviceStates[index].device
        }
        change(&deviceStates[index])
    }

    @inline(__always)
    private mutating func updateTransaction(device slot: Int?, number: UInt64, _ change: (inout PaymentTransaction) -> Void) {
        guard let slot else { return }
        modifyDevice(at: slot) { state in
            guard let index = state.pending.index(forKey: number) else { return }
            change(&state.pending.values[index])
        }
    }

    // MARK: Lookups

    // Inlinable so that a class holding a projection (an app's queue, the engine) reads one
    // device instead of copying (retaining and releasing) the whole projection to call these.
    @inlinable public func device(_ name: String) -> DeviceState? { slot(of: name).map { deviceStates[$0] } }

    @inlinable public func transaction(_ key: TransactionKey) -> PaymentTransaction? {
        guard let slot = slot(of: key.device) else { return nil }
        return deviceStates[slot].pending[key.number]
    }

    /// Reads a registered device in place (nil when `name` is not registered): `device(_:)`
    /// returns a copy, every field retained and released, which a caller reading one field pays for.
    @inlinable public func withDevice<Result>(_ name: String, _ read: (DeviceState) -> Result) -> Result? {
        guard let slot = slot(of: name) else { return nil }
        return read(deviceStates[slot])
    }

    /// True when `name` is registered (no copy of its state).
    @inlinable public func isRegistered(_ name: String) -> Bool { slot(of: name) != nil }

    /// Device names in a stable order (dictionary order is random per process).
    public var deviceNames: [String] { deviceStates.map(\.device).sorted() }
}

/// A bounded memory of applied command ids. Senders number their commands upwards,
/// so for each origin it keeps one bit for each of the last `capacity` numbers below
/// the highest seen: O(1) per event and fixed memory per origin. A number older than
/// the window counts as applied: retries come within seconds, never tens of thousands
/// of commands later. (An origin that restarts must take a new name; the bus adds an
/// incarnation to every origin for that reason.)
public struct CommandWindow: Sendable {
    public let capacity: Int
    /// The most senders (origins) remembered; a command from a new one beyond this is refused
    /// (`tooManySenders`), so hostile names cannot grow the queue's memory without bound.
    public let maximumOrigins: Int
    /// Each origin's window, in the order origins were first seen, found through `slots`; the
    /// last origin used is checked first (a command's events share it, and comparing a short
    /// string costs less than hashing it).
    private var windows: [OriginWindow] = []
    private var slots: [String: Int] = [:]
    private var lastOrigin = ""
    private var lastSlot = -1

    /// The first `originsCompared` origins by slot (those of `windows`' first slots).
    private var origins: [String] = []

    private func slot(of origin: String) -> Int? {
        if lastSlot >= 0, origin == lastOrigin { return lastSlot }
        // A run's few senders (its roles) take turns: comparing their short names costs less than
        // hashing one, several times per command.
        if windows.count <= Self.originsCompared { return origins.firstIndex(of: origin) }
        return slots[origin]
    }

    /// Up to this many senders, a sender is found by comparing names, not by hashing.
    static let originsCompared = 8

    /// How many recent commands per origin keep the last sequence they produced (what a
    /// duplicate's ACK carries); older duplicates are answered with the log's last sequence.
    static let recentSequences = 16

    private struct OriginWindow: Sendable {
        var highest: UInt64 = 0
        /// One bit per slot (`number % capacity`), grown as the origin's numbers grow, so a sender
        /// that sent a few commands costs a few words, not the whole window.
        var bits: [UInt64] = []
        /// (number, last sequence) of the origin's most recent commands, by `number % recentSequences`.
        var recent = [(number: UInt64, sequence: UInt64)](repeating: (0, 0), count: CommandWindow.recentSequences)

        mutating func record(_ number: UInt64, sequence: UInt64, capacity: UInt64) {
            if number > highest {
                // Slots for numbers that fall out of the window are cleared before reuse.
                if number - highest >= capacity {
                    for index in bits.indices { bits[index] = 0 }
                } else {
                    var clearing = highest + 1
                    while clearing < number {
                        let slot = Int(clearing % capacity)
                        if slot >> 6 < bits.count { bits[slot >> 6] &= ~(1 << UInt64(slot & 63)) }
                        clearing += 1
                    }
                }
                highest = number
            } else if highest - number >= capacity {
                return
            }
            // The window's capacity is a power of two unless chosen otherwise: a mask instead of a division.
            let slot = Int(capacity & (capacity - 1) == 0 ? number & (capacity - 1) : number % capacity)
            if slot >> 6 >= bits.count { bits.append(contentsOf: repeatElement(0, count: (slot >> 6) + 1 - bits.count)) }
            bits[slot >> 6] |= 1 << UInt64(slot & 63)
            let recentSlot = Int(number % UInt64(CommandWindow.recentSequences))
            if recent[recentSlot].number == number {
                recent[recentSlot].sequence = max(recent[recentSlot].sequence, sequence)
            } else if number > recent[recentSlot].number {
                recent[recentSlot] = (number, sequence)
            }
        }

        func contains(_ number: UInt64, capacity: UInt64) -> Bool {
            guard number <= highest else { return false }
            if highest - number >= capacity { return true }
            let slot = Int(number % capacity)
            return slot >> 6 < bits.count && bits[slot >> 6] & (1 << UInt64(slot & 63)) != 0
        }
    }

    public init(capacity: Int, maximumOrigins: Int = 50_000) {
        precondition(capacity > 0, "a command window needs room for at least one id")
        precondition(maximumOrigins > 0, "a command window needs room for at least one sender")
        self.capacity = (capacity + 63) / 64 * 64
        self.maximumOrigins = maximumOrigins
    }

    /// True for a number so far above its origin's highest that accepting it would mark
    /// every real command of that origin as old (a forged id).
    public func isFarAhead(_ id: CommandID) -> Bool {
        id.number > highest(of: id.origin) &+ UInt64(capacity)
    }

    /// True for an origin not seen yet when `maximumOrigins` are remembered already.
    public func isOriginOverLimit(_ origin: String) -> Bool {
        windows.count >= maximumOrigins && slot(of: origin) == nil
    }

    /// Senders remembered.
    public var originCount: Int { windows.count }

    /// True when the number skips past the next one expected from its origin: an earlier command
    /// of that sender is still on its way (lost with a queue that restarted and being retried).
    /// Senders number their commands 1, 2, 3, … from 1, and their commands depend on each other's
    /// effects (a payment on its device's registration), so such a command waits. An origin not
    /// seen yet expects 1. A number beyond the window's reach does not skip ahead: it is forged.
    public func skipsAhead(_ id: CommandID) -> Bool {
        id.number > highest(of: id.origin) &+ 1 && !isFarAhead(id)
    }

    /// The highest number applied for an origin (0 for an unknown one).
    public func highest(of origin: String) -> UInt64 { slot(of: origin).map { windows[$0].highest } ?? 0 }

    public func contains(_ id: CommandID) -> Bool {
        guard let slot = slot(of: id.origin) else { return false }
        return windows[slot].contains(id.number, capacity: UInt64(capacity))
    }

    /// The last sequence the command with this id produced, for one of its origin's most recent
    /// commands; nil otherwise (not applied, or too old to be remembered).
    public func lastSequence(of id: CommandID) -> UInt64? {
        guard let slot = slot(of: id.origin), windows[slot].contains(id.number, capacity: UInt64(capacity)) else { return nil }
        let entry = windows[slot].recent[Int(id.number % UInt64(Self.recentSequences))]
        return entry.number == id.number ? entry.sequence : nil
    }

    /// Ids remembered: at most `capacity` per origin.
    public var count: Int { windows.reduce(0) { $0 + $1.bits.reduce(0) { $0 + $1.nonzeroBitCount } } }

    /// Records that `id` produced the event at `sequence` (a command's events are inserted in turn).
    public mutating func insert(_ id: CommandID, sequence: UInt64 = 0) {
        let slot: Int
        if let known = self.slot(of: id.origin) {
            slot = known
        } else {
            slot = windows.count
            windows.append(OriginWindow())
            if slot < Self.originsCompared { origins.append(id.origin) }
            slots[id.origin] = slot
        }
        if slot != lastSlot {
            lastOrigin = id.origin
            lastSlot = slot
        }
        windows[slot].record(id.number, sequence: sequence, capacity: UInt64(capacity))
    }
}

/// Shares one run header between copies of a projection.
private final class HeaderBox: Sendable {
    let header: RunHeader
    init(_ header: RunHeader) { self.header = header }
}
