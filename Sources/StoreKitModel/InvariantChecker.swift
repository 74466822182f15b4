/// A broken lifecycle rule found in a log.
public struct Violation: Sendable, Hashable, CustomStringConvertible {
    public var sequence: UInt64
    public var rule: String
    public var message: String

    public init(sequence: UInt64, rule: String, message: String) {
        self.sequence = sequence
        self.rule = rule
        self.message = message
    }

    public var description: String { "#\(sequence) [\(rule)] \(message)" }
}

/// Checks StoreKit's lifecycle invariants over a stream of events, independently of
/// the queue's own validation, so that a bug in the queue, a hand-made log or an
/// observer that misbehaves on purpose is caught. A pure fold; memory is bounded by
/// the number of unfinished transactions and the violations kept.
public struct InvariantChecker: Sendable {
    public private(set) var violations: [Violation] = []
    public private(set) var violationCount = 0
    public let maximumKept: Int

    private var lastSequence: UInt64 = 0
    /// What is known of each transaction in the queue, found with one hash of its key per event
    /// (its state, identifier and downloads were four dictionaries, each hashed for most events).
    private var transactions: [TransactionKey: Tracked] = [:]
    private struct DownloadEntry {
        var state: DownloadState = .waiting
        var progress: Double = 0
        var started = false
        var cancelledBy: CommandID?
    }
    private struct Tracked {
        /// Nil for a transaction that was never added (a violation reported when it showed up).
        var state: TransactionState?
        var identifier: String?
        /// The downloads its last `transactionPurchased`/`Restored`/`subscriptionRenewed` gave it.
        var downloadCount = 0
        var downloads: [DownloadEntry] = []
    }
    /// Keys are numbered upwards per device, so the highest seen tells a reused key.
    private var highestNumber: [String: UInt64] = [:]
    /// Identifiers of unfinished transactions; with increasing keys that suffices to
    /// catch a duplicate without remembering every identifier ever given.
    private var identifiers: [String: TransactionKey] = [:]
    private var openRestores: Set<RestoreID> = []
    /// The highest restore number that ended, per device: the queue numbers a device's restores
    /// upwards, so one not open at or below it has ended (a set of every ended restore grew for the
    /// life of a queue).
    private var highestEndedRestore: [String: UInt64] = [:]

    private struct RestoreID: Hashable { var device: String; var number: UInt64 }

    public init(maximumKept: Int = 1_000) { self.maximumKept = maximumKept }

    private mutating func report(_ sequence: UInt64, _ rule: String, _ message: String) {
        violationCount += 1
        if violations.count < maximumKept { violations.append(Violation(sequence: sequence, rule: rule, message: message)) }
    }

    public mutating func check(_ recorded: RecordedEvent) {
        let sequence = recorded.sequence
        if lastSequence != 0 && sequence != lastSequence + 1 {
            report(sequence, "log.sequence", "sequence \(sequence) follows \(lastSequence); sequence numbers must increase by one")
        }
        lastSequence = sequence
        switch recorded.event {
        case .transactionAdded(let key, let payment):
            checkNewKey(key, sequence)
            if payment.quantity <= 0 { report(sequence, "R-Q7", "transaction \(key) has quantity \(payment.quantity)") }
            transactions[key, default: Tracked()].state = .purchasing
        case .transactionDeferred(let key):
            transition(key, to: .deferred, allowedFrom: Self.fromPurchasing, sequence)
        case .transactionPurchased(let key, let identifier, let contents, _):
            let index = transition(key, to: .purchased, allowedFrom: Self.fromPurchasingOrDeferred, sequence)
            register(identifier, downloads: contents.count, of: key, at: index, sequence)
        case .transactionFailed(let key, _):
            transition(key, to: .failed, allowedFrom: Self.fromPurchasingOrDeferred, sequence)
        case .restoreStarted(let device, let number, _):
            openRestores.insert(RestoreID(device: device, number: number))
        case .transactionRestored(let key, let restore, let identifier, let original, let contents):
            let id = RestoreID(device: key.device, number: restore)
            if !openRestores.contains(id) {
                let ended = restore <= highestEndedRestore[key.device] ?? 0
                report(sequence, "R-Q9", ended ? "transaction \(key) was restored by restore \(restore) after that restore had ended"
                                                : "transaction \(key) was restored by restore \(restore), which was never started")
            }
            checkNewKey(key, sequence)
            if identifier == original.transactionIdentifier {
                report(sequence, "R-T3", "restored transaction \(key) reuses its original's identifier \(identifier)")
            }
            let index = transactions.updateValue(forKey: key, default: Tracked()) { $0.state = .restored }
            register(identifier, downloads: contents.count, of: key, at: index, sequence)
        case .subscriptionRenewed(let key, let identifier, let original, let contents):
            // A renewal is a new transaction with its own identifier (R-T3, F-U1).
            checkNewKey(key, sequence)
            if identifier == original.transactionIdentifier {
                report(sequence, "R-T3", "renewal \(key) reuses its original's identifier \(identifier)")
            }
            let index = transactions.updateValue(forKey: key, default: Tracked()) { $0.state = .purchased }
            register(identifier, downloads: contents.count, of: key, at: index, sequence)
        case .restoreFinished(let device, let number), .restoreFailed(let device, let number, _):
            let id = RestoreID(device: device, number: number)
            if openRestores.remove(id) == nil {
                report(sequence, "R-Q9", "restore \(number) of \(device) ended without having started, or ended twice")
            }
            highestEndedRestore[device] = max(highestEndedRestore[device] ?? 0, number)
        case .transactionFinished(let key):
            guard let index = transactions.index(forKey: key), let state = transactions.values[index].state else {
                report(sequence, "R-Q8", "transaction \(key) was finished but is not in the queue")
                return
            }
            if !state.isComplete { report(sequence, "R-Q8", "transaction \(key) was finished while \(state)") }
            let tracked = transactions.remove(at: index).value
            for (downloadIndex, download) in tracked.downloads.prefix(tracked.downloadCount).enumerated() where download.started {
                // The queue cancels downloads still running when their transaction is finished,
                // in the same command: content lost either way.
                let cancelledByFinish = download.state == .cancelled && download.cancelledBy != nil && download.cancelledBy == recorded.commandID
                if !download.state.isFinal || cancelledByFinish {
                    report(sequence, "R-D3", "transaction \(key) was finished before download \(downloadIndex) ended: its content is lost")
                }
            }
            if let identifier = tracked.identifier { identifiers[identifier] = nil }
        case .downloadStarted(let key):
            guard let index = downloadAllowed(key, sequence) else { return }
            if moveDownload(key, to: .active, allowedFrom: Self.fromWaiting, in: index, sequence) {
                transactions.values[index].downloads[key.index].started = true
            }
        case .downloadProgressed(let key, let progress, _):
            guard let index = transactions.index(forKey: key.transaction), transactions.values[index].downloads.indices.contains(key.index) else {
                return report(sequence, "R-D1", "progress for unknown download \(key)")
            }
            let download = transactions.values[index].downloads[key.index]
            if download.state != .active { report(sequence, "R-D2", "download \(key) progressed while \(download.state)") }
            if !(0...1).contains(progress) || progress < download.progress {
                report(sequence, "R-D1", "download \(key) progress went from \(download.progress) to \(progress)")
            }
            transactions.values[index].downloads[key.index].progress = progress
        case .downloadPaused(let key):
            moveDownload(key, to: .paused, allowedFrom: Self.fromActive, sequence)
        case .downloadResumed(let key):
            moveDownload(key, to: .active, allowedFrom: Self.fromPaused, sequence)
        case .downloadFinished(let key, let url):
            moveDownload(key, to: .finished, allowedFrom: Self.fromActive, sequence)
            if url.isEmpty { report(sequence, "R-D1", "download \(key) finished without a contentURL") }
        case .downloadFailed(let key, _):
            moveDownload(key, to: .failed, allowedFrom: Self.fromActiveOrPaused, sequence)
        case .downloadCancelled(let key):
            guard let index = transactions.index(forKey: key.transaction) else { return reportMissingDownload(key, .cancelled, sequence) }
            if moveDownload(key, to: .cancelled, allowedFrom: Self.fromWaitingActiveOrPaused, in: index, sequence) {
                transactions.values[index].downloads[key.index].cancelledBy = recorded.commandID
            }
        case .askToBuyDeclined(let key):
            // Only an Ask to Buy request waiting for the parent can be declined; it stays deferred (F-A1).
            if let state = transactions[key]?.state, state != .deferred {
                report(sequence, "F-A1", "transaction \(key) was declined while \(state); only a deferred transaction can be declined")
            }
        default:
            break
        }
    }

    // The allowed earlier states, made once (an array literal per call would be allocated per event).
    private static let fromPurchasing: [TransactionState] = [.purchasing]
    private static let fromPurchasingOrDeferred: [TransactionState] = [.purchasing, .deferred]
    private static let fromWaiting: [DownloadState] = [.waiting]
    private static let fromActive: [DownloadState] = [.active]
    private static let fromPaused: [DownloadState] = [.paused]
    private static let fromActiveOrPaused: [DownloadState] = [.active, .paused]
    private static let fromWaitingActiveOrPaused: [DownloadState] = [.waiting, .active, .paused]

    /// Moves a transaction to `state`; returns its entry's index (nil when it is not in the queue).
    @discardableResult
    private mutating func transition(_ key: TransactionKey, to state: TransactionState, allowedFrom: [TransactionState],
                                     _ sequence: UInt64) -> Dictionary<TransactionKey, Tracked>.Index? {
        guard let index = transactions.index(forKey: key), let current = transactions.values[index].state else {
            report(sequence, "R-T1", "transaction \(key) became \(state) but is not in the queue")
            return nil
        }
        if !allowedFrom.contains(current) {
            report(sequence, "R-T1", "transaction \(key) went from \(current) to \(state); a completed transaction never changes state")
        }
        transactions.values[index].state = state
        return index
    }

    /// A paid transaction's identifier and downloads (`index`: its entry, when it has one).
    private mutating func register(_ identifier: String, downloads count: Int, of key: TransactionKey,
                                   at index: Dictionary<TransactionKey, Tracked>.Index?, _ sequence: UInt64) {
        if let holder = identifiers.updateValue(key, forKey: identifier), holder != key {
            report(sequence, "R-T3", "transaction identifier \(identifier) was given to \(holder) and again to \(key)")
        }
        let index = index ?? transactions.updateValue(forKey: key, default: Tracked()) { _ in }
        transactions.values[index].identifier = identifier
        transactions.values[index].downloadCount = count
        // Entries past `count` (from an earlier registration of a reused key) are kept, as before.
        var downloads = transactions.values[index].downloads
        transactions.values[index].downloads = []
        if downloads.count < count { downloads.append(contentsOf: repeatElement(DownloadEntry(), count: count - downloads.count)) }
        for download in 0..<count { downloads[download] = DownloadEntry() }
        transactions.values[index].downloads = downloads
    }

    private mutating func checkNewKey(_ key: TransactionKey, _ sequence: UInt64) {
        let highest: UInt64
        if let index = highestNumber.index(forKey: key.device) {
            highest = highestNumber.values[index]
            if key.number > highest { highestNumber.values[index] = key.number }
        } else {
            highest = 0
            highestNumber[key.device] = key.number
        }
        if transactions[key]?.state != nil || highest >= key.number {
            report(sequence, "R-T3", "transaction \(key) was created twice or out of order")
        }
    }

    /// The transaction's entry when its download may start (it is in the queue and paid).
    private mutating func downloadAllowed(_ key: DownloadKey, _ sequence: UInt64) -> Dictionary<TransactionKey, Tracked>.Index? {
        guard let index = transactions.index(forKey: key.transaction), let state = transactions.values[index].state else {
            report(sequence, "R-T4", "download \(key) started after its transaction was finished")
            return nil
        }
        if !state.isPaid {
            report(sequence, "R-Q11", "download \(key) started while its transaction was \(state)")
            return nil
        }
        return index
    }

    private mutating func reportMissingDownload(_ key: DownloadKey, _ state: DownloadState, _ sequence: UInt64) {
        report(sequence, "R-D2", "download \(key) became \(state) but does not exist (or its transaction was finished)")
    }

    private mutating func moveDownload(_ key: DownloadKey, to state: DownloadState, allowedFrom: [DownloadState], _ sequence: UInt64) {
        guard let index = transactions.index(forKey: key.transaction) else { return reportMissingDownload(key, state, sequence) }
        moveDownload(key, to: state, allowedFrom: allowedFrom, in: index, sequence)
    }

    /// Moves a download of the transaction at `index` to `state`; false when it does not exist.
    @discardableResult
    private mutating func moveDownload(_ key: DownloadKey, to state: DownloadState, allowedFrom: [DownloadState],
                                       in index: Dictionary<TransactionKey, Tracked>.Index, _ sequence: UInt64) -> Bool {
        guard transactions.values[index].downloads.indices.contains(key.index) else {
            reportMissingDownload(key, state, sequence)
            return false
        }
        let current = transactions.values[index].downloads[key.index].state
        if !allowedFrom.contains(current) {
            report(sequence, "R-D2", "download \(key) went from \(current) to \(state)")
        }
        transactions.values[index].downloads[key.index].state = state
        return true
    }
}

private extension Dictionary {
    /// The entry of `key` (added as `defaultValue` when missing), changed by `change`: one hash.
    mutating func updateValue(forKey key: Key, default defaultValue: @autoclosure () -> Value, _ change: (inout Value) -> Void) -> Index {
        if let index = index(forKey: key) {
            change(&values[index])
            return index
        }
        var value = defaultValue()
        change(&value)
        self[key] = value
        return index(forKey: key)!
    }
}
