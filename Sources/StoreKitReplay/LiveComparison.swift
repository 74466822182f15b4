import StoreKitModel
import StoreKitRoles
import StoreKitRuntime

/// Compares a live replay's log with its recording by what must hold when timing is real.
///
/// Live, the queue hears the processes' commands in an order real time decides: a store
/// decision of one transaction and a download report of another may come in either order, and
/// restored transactions may take other numbers. So the logs are not compared record by record
/// but as *tracks*, each a sequence whose order one sender or one causal chain fixes:
///
/// * a device's app-side events: registered, launched, quit, observers attached and detached,
///   payments allowed, payments added, restores started, and refusals of those commands (one
///   app process sends them, in order);
/// * a transaction's outcome and end: deferred, purchased, failed or restored, finished (the
///   final state), and refusals of commands about it;
/// * a download's events: started, each progress, paused, resumed, finished, failed, cancelled;
/// * a restore's end: finished or failed;
/// * a receipt refresh's answer: its pieces (where each starts, the products listed, the last);
/// * what one observer did about one transaction or restore (its app actions).
///
/// Transactions are named by identity (the device's n-th payment, the n-th transaction of a
/// restore), never by the number the queue gave them. Events are compared by what they say,
/// without their command id, timestamp, key number or content path. A track that differs is
/// one divergence: `different` where both logs have an event at the first difference,
/// `missing` where only the recording has one, `extra` where only the replay has one.
public struct LiveComparison {
    /// A built-in observer by its place on the device (`downloadThenFinish-1` is "observer 1"): an
    /// observer's new name in a what-if replay is not a divergence, what it does is. Other names
    /// (users' own observers) stay as they are.
    static func place(_ observer: String) -> String {
        guard let dash = observer.lastIndex(of: "-"), let number = Int(observer[observer.index(after: dash)...]),
              ObserverBehavior(rawValue: String(observer[..<dash])) != nil else { return observer }
        return "observer \(number)"
    }

    public enum Track: Hashable, Sendable, CustomStringConvertible {
        case device(String)
        case transaction(TransactionIdentity)
        case download(TransactionIdentity, index: Int)
        case restore(device: String, restore: UInt64)
        case receipt(device: String, request: UInt64)
        case observer(device: String, observer: String, subject: String)
        /// The store's later decisions about a purchase: its subscription's expiry, a refund, a billing retry.
        case laterDecisions(TransactionIdentity)
        /// The store's actions about a device's account (its transactions cleared), apart from the app's events.
        case storeActions(device: String)

        public var device: String {
            switch self {
            case .device(let device), .restore(let device, _), .receipt(let device, _), .observer(let device, _, _), .storeActions(let device): device
            case .transaction(let identity), .download(let identity, _), .laterDecisions(let identity): identity.device
            }
        }

        public var description: String {
            switch self {
            case .device(let device): "\(device)'s app-side events"
            case .transaction(let identity): "the outcome of \(identity)"
            case .download(let identity, let index): "download \(index) of \(identity)"
            case .restore(let device, let restore): "the end of \(device)'s restore \(restore)"
            case .receipt(let device, let request): "the receipt of \(device)'s refresh \(request)"
            case .observer(_, let observer, let subject): "what \(observer) did about \(subject)"
            case .laterDecisions(let identity): "what the store later decided about \(identity)"
            case .storeActions(let device): "the store's actions about \(device)'s account"
            }
        }
    }

    struct Entry {
        var signature: String
        var event: RecordedEvent
    }

    /// Tracks of one log, in the order they first appear.
    struct Tracks {
        var order: [Track] = []
        var entries: [Track: [Entry]] = [:]
        var identities = TransactionIdentities()
        var records = 0
        var commands = 0
        private var lastCommand: CommandID?

        mutating func add(_ recorded: RecordedEvent) {
            records += 1
            if let id = recorded.commandID, id != lastCommand { commands += 1 }
            lastCommand = recorded.commandID
            _ = identities.learn(recorded.event)
            guard let (track, signature) = LiveComparison.classify(recorded.event, identities) else { return }
            if entries[track] == nil { order.append(track) }
            entries[track, default: []].append(Entry(signature: signature, event: recorded))
        }
    }

    public struct Outcome: Sendable {
        public var tracks = 0
        public var differingTracks: [Track] = []
        public var result = ReplayResult()
    }

    /// Reads both logs (each at most `LiveReplayPlan.maximumRecords` records) and compares them.
    public static func compare(recording: Recording, replayed: Recording) throws -> Outcome {
        let recorded = try read(recording)
        let live = try read(replayed)
        var outcome = Outcome()
        var result = ReplayResult()
        result.events = live.records
        result.comparedEvents = recorded.records
        result.commands = live.commands
        var first: (position: UInt64, divergence: Divergence)?
        let tracks = recorded.order + live.order.filter { recorded.entries[$0] == nil }
        outcome.tracks = tracks.count
        for track in tracks {
            let was = recorded.entries[track] ?? []
            let now = live.entries[track] ?? []
            let common = min(was.count, now.count)
            guard let index = (0..<common).first(where: { was[$0].signature != now[$0].signature }) ?? (was.count == now.count ? nil : common)
            else { continue }
            outcome.differingTracks.append(track)
            let kind: Divergence.Kind = index < was.count && index < now.count ? .different : index < was.count ? .missing : .extra
            switch kind {
            case .different: result.different += 1
            case .missing: result.missing += 1
            case .extra: result.extra += 1
            }
            // Where in the replayed log it happened: at its event, or after the track's last one there.
            let position = index < now.count ? now[index].event.sequence : (index > 0 ? now[index - 1].event.sequence + 1 : UInt64(live.records) + 1)
            if first == nil || position < first!.position {
                first = (position, Divergence(kind: kind, sequence: position, recorded: index < was.count ? was[index].event : nil,
                                              replayed: index < now.count ? now[index].event : nil, device: track.device,
                                              context: nil, handledBefore: 0, track: track.description))
            }
        }
        if var divergence = first?.divergence {
            divergence.context = try context(in: replayed, device: divergence.device, before: divergence.sequence)
            result.firstDivergence = divergence
        }
        outcome.result = result
        return outcome
    }

    private static func read(_ recording: Recording) throws -> Tracks {
        var tracks = Tracks()
        try recording.forEachRecord { sequence, timestamp, payload in
            guard tracks.records < LiveReplayPlan.maximumRecords else {
                throw ReplayInputError("\(recording.location) has more than \(LiveReplayPlan.maximumRecords) records, more than a live comparison holds")
            }
            do {
                tracks.add(try LogProjection.decode(sequence: sequence, timestamp: timestamp, payload: payload))
            } catch {
                throw ReplayInputError("\(recording.location): \(error)")
            }
        }
        return tracks
    }

    /// The device's last events before `sequence` in the replayed log, and its projection there.
    private static func context(in log: Recording, device: String, before sequence: UInt64) throws -> DivergenceContext {
        var projection = QueueProjection(commandWindow: 64)
        var preceding: [RecordedEvent] = []
        try log.forEachRecord(through: sequence > 1 ? sequence - 1 : 0) { sequence, timestamp, payload in
            let recorded = try LogProjection.decode(sequence: sequence, timestamp: timestamp, payload: payload)
            projection.apply(recorded)
            if recorded.event.device == device {
                preceding.append(recorded)
                if preceding.count > ReplaySession.contextEvents { preceding.removeFirst() }
            }
        }
        return DivergenceContext(device: device, precedingEvents: preceding, state: projection.device(device))
    }

    /// The track an event belongs to and what it says there (nil: not compared, the header).
    static func classify(_ event: Event, _ identities: TransactionIdentities) -> (Track, String)? {
        func transaction(_ key: TransactionKey) -> Track {
            identities.identity(of: key).map { .transaction($0) } ?? .device(key.device)
        }
        func download(_ key: DownloadKey) -> Track {
            identities.identity(of: key.transaction).map { .download($0, index: key.index) } ?? .device(key.transaction.device)
        }
        func subject(_ key: TransactionKey) -> String { identities.identity(of: key)?.description ?? "an unknown transaction" }
        switch event {
        case .runStarted: return nil
        case .deviceRegistered(let device, let account): return (.device(device), "registered to \(account)")
        case .appLaunched(let device): return (.device(device), "launched")
        case .appTerminated(let device): return (.device(device), "quit")
        case .observerAttached(let device, let observer): return (.device(device), "attached \(Self.place(observer))")
        case .observerDetached(let device, let observer): return (.device(device), "detached \(Self.place(observer))")
        case .paymentsAllowedChanged(let device, let allowed): return (.device(device), "payments allowed \(allowed)")
        case .transactionAdded(let key, let payment):
            // A resumed interrupted purchase is the store's addition: on its own track, not among the user's payments.
            if case .resumed(_, _)? = identities.identity(of: key) { return (transaction(key), "added \(payment.productIdentifier) ×\(payment.quantity)") }
            return (.device(key.device), "added \(payment.productIdentifier) ×\(payment.quantity)")
        case .restoreStarted(let device, let restore, _): return (.device(device), "restore \(restore) started")
        case .transactionDeferred(let key): return (transaction(key), "deferred")
        case .transactionPurchased(let key, _, let downloads, let charged):
            return (transaction(key), "purchased\(charged ? "" : " (not charged)") with \(downloads.count) downloads")
        case .transactionFailed(let key, let error): return (transaction(key), "failed: \(error.code)")
        case .transactionRestored(let key, _, _, let original, let downloads):
            return (transaction(key), "restored \(original.payment.productIdentifier) with \(downloads.count) downloads")
        case .transactionFinished(let key): return (transaction(key), "finished")
        case .restoreFinished(let device, let restore): return (.restore(device: device, restore: restore), "finished")
        case .restoreFailed(let device, let restore, let error): return (.restore(device: device, restore: restore), "failed: \(error.code)")
        case .downloadStarted(let key): return (download(key), "started")
        case .downloadProgressed(let key, let progress, _): return (download(key), "progress \(progress)")
        case .downloadPaused(let key): return (download(key), "paused")
        case .downloadResumed(let key): return (download(key), "resumed")
        case .downloadFinished(let key, _): return (download(key), "finished")
        case .downloadFailed(let key, let error): return (download(key), "failed: \(error.code)")
        case .downloadCancelled(let key): return (download(key), "cancelled")
        case .askToBuyDeclined(let key): return (transaction(key), "declined by the parent")
        // The store's later decisions, replayed live from the recording after their recorded delay
        // from the purchase: a renewal is a transaction of its own; an expiry or a refund is told
        // on a track of the purchase's own, apart from its outcome (whose finish the app times).
        case .subscriptionRenewed(let key, _, _, let downloads): return (transaction(key), "renewed with \(downloads.count) downloads")
        case .subscriptionExpired(let device, let original):
            return (identities.purchase(named: original.transactionIdentifier).map { .laterDecisions($0) } ?? .device(device), "expired")
        case .entitlementsRevoked(let device, let original):
            return (identities.purchase(named: original.transactionIdentifier).map { .laterDecisions($0) } ?? .device(device),
                    "refunded \(original.payment.productIdentifier)")
        // The store's recorded decisions, sent by a live replay too: an interruption's resumption on the
        // resumed purchase's track, a billing retry among the purchase's later decisions, a clearing on
        // the account's device's track of the store's actions.
        case .interruptedPurchaseResumed(let key, _): return (transaction(key), "resumed")
        case .subscriptionBillingRetry(let device, let original, _):
            return (identities.purchase(named: original.transactionIdentifier).map { .laterDecisions($0) } ?? .device(device), "billing retry")
        case .transactionsCleared(let device): return (.storeActions(device: device), "transactions cleared")
        // The app asks (one of its actions, in order); the recorded store's pieces answer, replayed
        // live with the recorded pagination, listing the live run's purchases of the same identity:
        // compared by position and product, not by identifier or date.
        case .receiptRefreshStarted(let device, let request): return (.device(device), "receipt refresh \(request) started")
        case .receiptDelivered(let device, let request, let firstIndex, let entries, let isLast):
            // An entry at an introductory or promotional offer names it (F-O3, F-O7): the live store must decide the same.
            let products = entries.map { entry in
                entry.payment.productIdentifier + (entry.introductoryOfferPeriod.map { " \($0.name)" } ?? "")
                    + (entry.promotionalOfferIdentifier.map { " offer \($0)" } ?? "")
            }
                .joined(separator: ",")
            return (.receipt(device: device, request: request), "entries from \(firstIndex): [\(products)]\(isLast ? ", last" : "")")
        case .appActionRecorded(let action):
            switch action {
            case .contentGranted(let key, let observer, let product):
                return (.observer(device: key.device, observer: Self.place(observer), subject: subject(key)), "granted \(product)")
            case .contentKept(let key, let observer):
                return (.observer(device: key.transaction.device, observer: Self.place(observer), subject: subject(key.transaction)), "kept download \(key.index)")
            case .restoreShownDone(let device, let restore, let observer):
                return (.observer(device: device, observer: Self.place(observer), subject: "restore \(restore)"), "showed the restore done")
            case .failureShown(let key, let observer):
                return (.observer(device: key.device, observer: Self.place(observer), subject: subject(key)), "showed the failure")
            case .transactionReported(let key, let observer, let report):
                return (.observer(device: key.device, observer: Self.place(observer), subject: subject(key)), "reported: \(report)")
            }
        case .commandRejected(let body, let rejection):
            let said = "\(body.name) refused: \(rejection.code)"
            switch body {
            case .decidePurchase(let key, _), .finishTransaction(let key): return (transaction(key), said)
            case .reportDownloadProgress(let key, _, _), .completeDownload(let key, _), .failDownload(let key, _): return (download(key), said)
            case .startDownloads(let keys), .pauseDownloads(let keys), .resumeDownloads(let keys), .cancelDownloads(let keys):
                return (keys.first.map(download) ?? .device(body.device), said)
            case .completeRestore(let device, let restore, _, _, _), .failRestore(let device, let restore, _):
                return (.restore(device: device, restore: restore), said)
            case .deliverReceipt(let device, let request, _, _, _):
                return (.receipt(device: device, request: request), said)
            case .recordAppAction(let action):
                return (.observer(device: action.device, observer: Self.place(action.observer), subject: "refused actions"), said)
            default:
                return (.device(body.device), said)
            }
        }
    }
}
