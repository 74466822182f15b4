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
    private var states: [TransactionKey: TransactionState] = [:]
    private typealias DownloadEntry = (state: DownloadState, progress: Double, started: Bool, cancelledBy: CommandID?)
    private var downloads: [DownloadKey: DownloadEntry] = [:]
    /// Keys are numbered upwards per device, so the highest seen tells a reused key.
    private var highestNumber: [String: UInt64] = [:]
    /// Identifiers of unfinished transactions; with increasing keys that suffices to
    /// catch a duplicate without remembering every identifier ever given.
    private var identifiers: [String: TransactionKey] = [:]
    private var identifierOfKey: [TransactionKey: String] = [:]
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
            states[key] = .purchasing
        case .transactionDeferred(let key):
            transition(key, to: .deferred, allowedFrom: [.purchasing], sequence)
        case .transactionPurchased(let key, let identifier, let contents, _):
            transition(key, to: .purchased, allowedFrom: [.purchasing, .deferred], sequence)
            registerIdentifier(identifier, key, sequence)
            registerDownloads(key, count: contents.count)
        case .transactionFailed(let key, _):
            transition(key, to: .failed, allowedFrom: [.purchasing, .deferred], sequence)
        case .restoreStarted(let device, let number, _):
            openRestores.insert(RestoreID(device: device, number: number))
        case .transactionRestored(let key, let restore, let identifier, let original, let contents):
            checkRestored(key, restore: restore, identifier: identifier, original: original, downloads: contents.count, sequence)
        case .subscriptionRenewed(let key, let identifier, let original, let contents):
            // A renewal is a new transaction with its own identifier (R-T3, F-U1).
            checkNewKey(key, sequence)
            if identifier == original.transactionIdentifier {
                report(sequence, "R-T3", "renewal \(key) reuses its original's identifier \(identifier)")
            }
            states[key] = .purchased
            registerIdentifier(identifier, key, sequence)
            registerDownloads(key, count: contents.count)
        case .restoreFinished(let device, let number), .restoreFailed(let device, let number, _):
            let id = RestoreID(device: device, number: number)
            if openRestores.remove(id) == nil {
                report(sequence, "R-Q9", "restore \(number) of \(device) ended without having started, or ended twice")
            }
            highestEndedRestore[device] = max(highestEndedRestore[device] ?? 0, number)
        case .transactionFinished(let key):
            checkFinished(key, commandID: recorded.commandID, sequence)
        case .downloadStarted(let key):
            guard checkDownloadAllowed(key, sequence) else { return }
            if let index = moveDownload(key, to: .active, allowedFrom: [.waiting], sequence) { downloads.values[index].started = true }
        case .downloadProgressed(let key, let progress, _):
            checkProgress(key, progress: progress, sequence)
        case .downloadPaused(let key):
            moveDownload(key, to: .paused, allowedFrom: [.active], sequence)
        case .downloadResumed(let key):
            moveDownload(key, to: .active, allowedFrom: [.paused], sequence)
        case .downloadFinished(let key, let url):
            moveDownload(key, to: .finished, allowedFrom: [.active], sequence)
            if url.isEmpty { report(sequence, "R-D1", "download \(key) finished without a contentURL") }
        case .downloadFailed(let key, _):
            moveDownload(key, to: .failed, allowedFrom: [.active, .paused], sequence)
        case .downloadCancelled(let key):
            if let index = moveDownload(key, to: .cancelled, allowedFrom: [.waiting, .active, .paused], sequence) {
                downloads.values[index].cancelledBy = recorded.commandID
            }
        case .askToBuyDeclined(let key):
            // Only an Ask to Buy request waiting for the parent can be declined; it stays deferred (F-A1).
            if let state = states[key], state != .deferred {
                report(sequence, "F-A1", "transaction \(key) was declined while \(state); only a deferred transaction can be declined")
            }
        default:
            break
        }
    }

    /// R-Q9: restored by a restore under way; R-T3: with an identifier of its own.
    private mutating func checkRestored(_ key: TransactionKey, restore: UInt64, identifier: String, original: OriginalTransaction,
                                        downloads count: Int, _ sequence: UInt64) {
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
        states[key] = .restored
        registerIdentifier(identifier, key, sequence)
        registerDownloads(key, count: count)
    }

    /// R-Q8: finished only once complete; R-D3: not before its downloads ended. Forgets the transaction.
    private mutating func checkFinished(_ key: TransactionKey, commandID: CommandID?, _ sequence: UInt64) {
        guard let state = states[key] else {
            report(sequence, "R-Q8", "transaction \(key) was finished but is not in the queue")
            return
        }
        if !state.isComplete { report(sequence, "R-Q8", "transaction \(key) was finished while \(state)") }
        for index in 0..<downloadCount(key) {
            let downloadKey = DownloadKey(transaction: key, index: index)
            if let download = downloads[downloadKey], download.started {
                // The queue cancels downloads still running when their transaction is finished,
                // in the same command: content lost either way.
                let cancelledByFinish = download.state == .cancelled && download.cancelledBy != nil && download.cancelledBy == commandID
                if !download.state.isFinal || cancelledByFinish {
                    report(sequence, "R-D3", "transaction \(key) was finished before download \(index) ended: its content is lost")
                }
            }
            downloads[downloadKey] = nil
        }
        states[key] = nil
        downloadCounts[key] = nil
        if let identifier = identifierOfKey.removeValue(forKey: key) { identifiers[identifier] = nil }
    }

    /// R-D1: progress of a known download, between 0 and 1, never going back; R-D2: only while active.
    private mutating func checkProgress(_ key: DownloadKey, progress: Double, _ sequence: UInt64) {
        guard let index = downloads.index(forKey: key) else { return report(sequence, "R-D1", "progress for unknown download \(key)") }
        let download = downloads.values[index]
        if download.state != .active { report(sequence, "R-D2", "download \(key) progressed while \(download.state)") }
        if !(0...1).contains(progress) || progress < download.progress {
            report(sequence, "R-D1", "download \(key) progress went from \(download.progress) to \(progress)")
        }
        downloads.values[index].progress = progress
    }

    // Each transition finds its entry once (`index(forKey:)`) rather than hashing the key to read
    // and again to write: the check runs on every event.
    private mutating func transition(_ key: TransactionKey, to state: TransactionState, allowedFrom: [TransactionState], _ sequence: UInt64) {
        guard let index = states.index(forKey: key) else {
            return report(sequence, "R-T1", "transaction \(key) became \(state) but is not in the queue")
        }
        let current = states.values[index]
        if !allowedFrom.contains(current) {
            report(sequence, "R-T1", "transaction \(key) went from \(current) to \(state); a completed transaction never changes state")
        }
        states.values[index] = state
    }

    // One hash per dictionary: `updateValue` and `index(forKey:)` rather than a read, then a write.
    private mutating func registerIdentifier(_ identifier: String, _ key: TransactionKey, _ sequence: UInt64) {
        if let holder = identifiers.updateValue(key, forKey: identifier), holder != key {
            report(sequence, "R-T3", "transaction identifier \(identifier) was given to \(holder) and again to \(key)")
        }
        identifierOfKey[key] = identifier
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
        if states.index(forKey: key) != nil || highest >= key.number {
            report(sequence, "R-T3", "transaction \(key) was created twice or out of order")
        }
    }

    private var downloadCounts: [TransactionKey: Int] = [:]

    private mutating func registerDownloads(_ key: TransactionKey, count: Int) {
        downloadCounts[key] = count
        for index in 0..<count { downloads[DownloadKey(transaction: key, index: index)] = (.waiting, 0, false, nil) }
    }

    private func downloadCount(_ key: TransactionKey) -> Int { downloadCounts[key] ?? 0 }

    private mutating func checkDownloadAllowed(_ key: DownloadKey, _ sequence: UInt64) -> Bool {
        guard let state = states[key.transaction] else {
            report(sequence, "R-T4", "download \(key) started after its transaction was finished")
            return false
        }
        if !state.isPaid {
            report(sequence, "R-Q11", "download \(key) started while its transaction was \(state)")
            return false
        }
        return true
    }

    /// Moves a download to `state`; returns its entry's index (for a further change without hashing again).
    @discardableResult
    private mutating func moveDownload(_ key: DownloadKey, to state: DownloadState, allowedFrom: [DownloadState],
                                       _ sequence: UInt64) -> Dictionary<DownloadKey, DownloadEntry>.Index? {
        guard let index = downloads.index(forKey: key) else {
            report(sequence, "R-D2", "download \(key) became \(state) but does not exist (or its transaction was finished)")
            return nil
        }
        let current = downloads.values[index].state
        if !allowedFrom.contains(current) {
            report(sequence, "R-D2", "download \(key) went from \(current) to \(state)")
        }
        downloads.values[index].state = state
        return index
    }
}
