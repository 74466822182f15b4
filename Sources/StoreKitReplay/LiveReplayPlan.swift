import StoreKitModel
import StoreKitRoles

/// A transaction named by what the users and the store did, not by the number the queue gave
/// it. In a live run a restore's transactions and a user's payment may reach the queue in
/// another order than recorded, and take each other's numbers; the n-th payment a device
/// added, or the n-th transaction of its k-th restore, is the same transaction in both runs.
public enum TransactionIdentity: Hashable, Sendable, CustomStringConvertible {
    /// The device's `ordinal`-th added payment (1-based).
    case added(device: String, ordinal: Int)
    /// The `ordinal`-th transaction (1-based) restored by the device's restore `restore`.
    case restored(device: String, restore: UInt64, ordinal: Int)
    /// The `ordinal`-th renewal (1-based) of the subscription `original` started, on `device`.
    indirect case renewed(device: String, original: TransactionIdentity, ordinal: Int)
    /// The purchase the store added when the user fixed what interrupted `interrupted` (F-I1).
    /// Not a payment the user added: the device's later payments keep their ordinals whenever
    /// the store's resumption lands among them.
    indirect case resumed(device: String, interrupted: TransactionIdentity)

    public var device: String {
        switch self {
        case .added(let device, _), .restored(let device, _, _), .renewed(let device, _, _), .resumed(let device, _): device
        }
    }

    public var description: String {
        switch self {
        case .added(let device, let ordinal): "\(device) payment \(ordinal)"
        case .restored(let device, let restore, let ordinal): "\(device) restore \(restore) transaction \(ordinal)"
        case .renewed(_, let original, let ordinal): "renewal \(ordinal) of \(original)"
        case .resumed(_, let interrupted): "resumption of \(interrupted)"
        }
    }
}

/// Learns which key the queue gave each transaction identity, from the events of one log.
struct TransactionIdentities {
    private struct RestoreName: Hashable {
        var device: String
        var restore: UInt64
    }

    private var addedCount: [String: Int] = [:]
    private var restoredCount: [RestoreName: Int] = [:]
    /// Renewals so far per purchase and device: each renewal also reaches the account's other devices (F-U4).
    private var renewedCount: [RenewalCount: Int] = [:]
    private struct RenewalCount: Hashable {
        var device: String
        var original: TransactionIdentity
    }
    private var identities: [TransactionKey: TransactionIdentity] = [:]
    /// Purchases (and renewals: charges a receipt lists) by the transaction identifier the store
    /// gave them (what renewals, expiries and refunds name as their `original`), and back.
    private var purchases: [String: TransactionIdentity] = [:]
    private var identifiers: [TransactionIdentity: String] = [:]

    /// Notes a transaction's first event; returns its identity then (nil for every other event).
    mutating func learn(_ event: Event) -> TransactionIdentity? {
        let identity: TransactionIdentity
        let key: TransactionKey
        switch event {
        case .transactionPurchased(let purchased, let identifier, _, _):
            if let known = identities[purchased] {
                purchases[identifier] = known
                identifiers[known] = identifier
            }
            return nil
        case .subscriptionRenewed(let renewed, let identifier, let original, _):
            guard let started = purchases[original.transactionIdentifier] else { return nil }
            key = renewed
            let count = RenewalCount(device: renewed.device, original: started)
            renewedCount[count, default: 0] += 1
            identity = .renewed(device: renewed.device, original: started, ordinal: renewedCount[count]!)
            purchases[identifier] = identity
            identifiers[identity] = identifier
        case .interruptedPurchaseResumed(let resumed, let interrupted):
            if let original = identities[interrupted] { identities[resumed] = .resumed(device: resumed.device, interrupted: original) }
            return nil
        case .transactionAdded(let added, _) where identities[added].map({ if case .resumed = $0 { true } else { false } }) == true:
            return identities[added]
        case .transactionAdded(let added, _):
            key = added
            addedCount[added.device, default: 0] += 1
            identity = .added(device: added.device, ordinal: addedCount[added.device]!)
        case .transactionRestored(let restored, let restore, _, _, _):
            key = restored
            let name = RestoreName(device: restored.device, restore: restore)
            restoredCount[name, default: 0] += 1
            identity = .restored(device: restored.device, restore: restore, ordinal: restoredCount[name]!)
        default:
            return nil
        }
        identities[key] = identity
        return identity
    }

    func identity(of key: TransactionKey) -> TransactionIdentity? { identities[key] }

    /// The purchase the store named `identifier` (a renewal's, expiry's or refund's `original`).
    func purchase(named identifier: String) -> TransactionIdentity? { purchases[identifier] }

    /// The transaction identifier the store gave a purchase or renewal of this identity.
    func identifier(of identity: TransactionIdentity) -> String? { identifiers[identity] }
}

/// A recorded command to send again, `delayNanoseconds` of recorded time after what it answers.
public struct PlannedReply: Sendable, Hashable {
    public var delayNanoseconds: Int64
    public var body: CommandBody
    /// The launches and quits of the reply's device logged before it in the recording, and the
    /// first observer attachment after each launch (`AppLifecycleCounter`): a live replay holds the
    /// reply until its own log has as many, so that the app's observers hear it, or not, as the
    /// recorded ones did (a restore that ended while the recorded app was quit).
    public var lifecyclesBefore = 0

    public init(delayNanoseconds: Int64, body: CommandBody, lifecyclesBefore: Int = 0) {
        self.delayNanoseconds = delayNanoseconds
        self.body = body
        self.lifecyclesBefore = lifecyclesBefore
    }
}

/// One step of a device's app: a user's action, or a late observer attaching (its time is the
/// app's own choice, known only from the recording), or the observers of a launch attaching.
public enum PlannedAppStep: Sendable, Hashable {
    case user(CommandBody)
    case attachLate(observer: String)
    /// The observers a launch attaches at once (not the late ones), at the recorded moment of the
    /// launch's first attachment: the live queue may log a reply of the recorded world between a
    /// launch and its attachments, and observers attached only after it never hear it (a restore's
    /// end, then never shown done), so the attachments wait for the replies the recording logged
    /// before them, as every step does.
    case attachAtLaunch
}

/// The moments of a device's app that the recorded world's replies are ordered against: each
/// launch and quit, and the first observer attached after a launch (from then on the app's
/// observers hear the replies). The plan counts them in the recording, a live replay in its own log.
struct AppLifecycleCounter {
    private var launchedWithoutObservers: Set<String> = []

    /// The device whose count `event` advances, if it does.
    mutating func device(countedBy event: Event) -> String? {
        switch event {
        case .appLaunched(let device):
            launchedWithoutObservers.insert(device)
            return device
        case .appTerminated(let device):
            launchedWithoutObservers.remove(device)
            return device
        case .observerAttached(let device, _):
            return launchedWithoutObservers.remove(device)
        default:
            return nil
        }
    }
}

/// What a live replay takes from a recording, for the processes that play the recorded inputs:
/// each device's users (at their recorded offsets from the first user action), the store's
/// decisions (after the recorded delay from the payment or restore they answer) and the
/// content servers' reports (after the recorded delay from the download's start). Keyed by
/// transaction identity, so they still apply where live timing numbered transactions otherwise.
public struct LiveReplayPlan: Sendable {
    public struct RestoreName: Hashable, Sendable {
        public var device: String
        public var restore: UInt64
    }

    public struct ReceiptName: Hashable, Sendable {
        public var device: String
        public var request: UInt64
    }

    public struct DownloadName: Hashable, Sendable {
        public var transaction: TransactionIdentity
        public var index: Int
    }

    /// The recorded scenario (`--observers` applied by the caller).
    public var scenario: Scenario
    /// Per device, its app's steps, their offsets from the recording's first user action, and how
    /// many of the device's planned replies (below) the recording logged before each: a live replay
    /// holds a step until its own log has as many, as replies wait for launches and quits. And how
    /// many of those the recording logged before the last command of the app's observers before the
    /// step: the replies after it drew no reaction from the recorded app before the step, so the user
    /// may have acted before the app heard them (`repliesHeard`).
    public var appSteps: [String: [(offsetNanoseconds: Int64, step: PlannedAppStep, repliesBefore: Int, repliesHeard: Int)]] = [:]
    /// The store's decisions of each transaction, timed from the transaction's addition (an
    /// interrupted purchase's resumption, the user's fix told by the store, among them).
    public var purchaseDecisions: [TransactionIdentity: [PlannedReply]] = [:]
    /// The store's actions about a device's account (clearing its transactions), timed from the device's registration.
    public var accountActions: [String: [PlannedReply]] = [:]
    /// The store's answers to each restore, timed from the restore's start.
    public var restoreAnswers: [RestoreName: [PlannedReply]] = [:]
    /// The store's answers to each receipt refresh (its pieces, with their recorded `firstIndex`
    /// and `isLast`), timed from the refresh's start.
    public var receiptAnswers: [ReceiptName: [PlannedReply]] = [:]
    /// The purchases the recorded receipts list and the recorded restores restore, by the
    /// transaction identifier the recorded store gave them: a live replay names the live run's
    /// purchase of the same identity instead (its identifier and date are the live run's), as
    /// later decisions name it.
    public var namedPurchases: [String: TransactionIdentity] = [:]
    /// The content servers' reports of each download, one list per time it was started, each timed from that start.
    public var downloadReports: [DownloadName: [[PlannedReply]]] = [:]
    /// The store's later decisions about a purchase (renewals and expiry of the subscription it
    /// started, a refund), timed from the purchase; sent with the live run's `original`.
    public var laterDecisions: [TransactionIdentity: [PlannedReply]] = [:]
    /// Recorded time from the first user action to the last record.
    public var lengthNanoseconds: Int64 = 0
    /// Records read.
    public var records = 0

    /// Live replays hold the plan in memory: the recording's inputs, not its projection.
    public static let maximumRecords = 2_000_000

    /// Streams `recording` once and keeps its inputs.
    public init(recording: Recording) throws {
        try self.init(recordings: [recording])
    }

    /// Streams every partition of a recording of several queues once and keeps their inputs.
    /// Every account's devices are in one partition, so each device's steps and every answer
    /// are timed within its own partition's log (offsets from that partition's first user action).
    public init(recordings: [Recording]) throws {
        precondition(!recordings.isEmpty, "a recording has at least one partition")
        do {
            scenario = try Scenario(header: recordings[0].header)
        } catch {
            throw ReplayInputError("\(recordings[0].location): \(error)")
        }
        var count = 0
        var identities = TransactionIdentities()
        for recording in recordings {
            try add(recording, identities: &identities, count: &count)
        }
        records = count
    }

    private mutating func add(_ recording: Recording, identities: inout TransactionIdentities, count: inout Int) throws {
        let lateNames = Set(scenario.apps.observers.enumerated().filter { $0.element.attachesLate }.map { "\($0.element.rawValue)-\($0.offset + 1)" })
        var moments = RequestMoments()
        var firstUserTimestamp: Int64?
        var lastTimestamp: Int64 = 0
        var lifecycles: [String: Int] = [:]
        var lifecycleCounter = AppLifecycleCounter()
        var replies: [String: Int] = [:]
        var repliesAtLastAppCommand: [String: Int] = [:]
        /// Devices launched whose first observer attachment is still to come.
        var launchedWithoutObservers: Set<String> = []
        try recording.forEachUnit { unit in
            count += unit.events.count
            guard count <= Self.maximumRecords else {
                throw ReplayInputError("\(recording.location) has more than \(Self.maximumRecords) records, more than a live replay holds; replay it deterministically (without --live), or a slice of it")
            }
            lastTimestamp = max(lastTimestamp, unit.events.last?.timestamp ?? unit.timestamp)
            for recorded in unit.events {
                if let identity = identities.learn(recorded.event), case .transactionAdded = recorded.event { moments.added[identity] = recorded.timestamp }
                if let device = lifecycleCounter.device(countedBy: recorded.event) { lifecycles[device, default: 0] += 1 }
                switch recorded.event {
                case .deviceRegistered(let device, _):
                    moments.registered[device] = recorded.timestamp
                case .restoreStarted(let device, let restore, _):
                    moments.restoreStarted[RestoreName(device: device, restore: restore)] = recorded.timestamp
                case .receiptRefreshStarted(let device, let request):
                    moments.receiptStarted[ReceiptName(device: device, request: request)] = recorded.timestamp
                case .transactionPurchased(let key, _, _, _):
                    if let identity = identities.identity(of: key) { moments.purchased[identity] = recorded.timestamp }
                case .downloadStarted(let key):
                    if let identity = identities.identity(of: key.transaction) {
                        let name = DownloadName(transaction: identity, index: key.index)
                        moments.downloadStarted[name] = recorded.timestamp
                        downloadReports[name, default: []].append([])
                    }
                default:
                    break
                }
            }
            guard let body = unit.body else { return }
            func reply(after moment: Int64) -> PlannedReply {
                replies[body.device, default: 0] += 1
                return PlannedReply(delayNanoseconds: unit.timestamp - moment, body: body, lifecyclesBefore: lifecycles[body.device] ?? 0)
            }
            switch unit.source {
            case .header:
                break
            case .user:
                let first = firstUserTimestamp ?? unit.timestamp
                firstUserTimestamp = first
                // A user's action says nothing of what the app had heard; only its observers' commands do.
                appSteps[unit.device, default: []].append((unit.timestamp - first, .user(body), replies[unit.device] ?? 0,
                                                           repliesAtLastAppCommand[unit.device] ?? 0))
                switch body {
                case .launchApp(let device): launchedWithoutObservers.insert(device)
                case .terminateApp(let device): launchedWithoutObservers.remove(device)
                default: break
                }
            case .observer:
                if case .attachObserver(let device, let observer) = body, let first = firstUserTimestamp {
                    let step: PlannedAppStep? = lateNames.contains(observer) ? .attachLate(observer: observer)
                        : launchedWithoutObservers.remove(device) != nil ? .attachAtLaunch : nil
                    if let step {
                        appSteps[device, default: []].append((unit.timestamp - first, step, replies[device] ?? 0, repliesAtLastAppCommand[device] ?? 0))
                    }
                }
                repliesAtLastAppCommand[body.device] = replies[body.device] ?? 0
            case .store:
                planStoreReply(body, moments: moments, identities: identities, reply: reply(after:))
            case .downloader:
                switch body {
                case .reportDownloadProgress(let key, _, _), .completeDownload(let key, _), .failDownload(let key, _):
                    if let identity = identities.identity(of: key.transaction) {
                        let name = DownloadName(transaction: identity, index: key.index)
                        if let started = moments.downloadStarted[name], !(downloadReports[name]?.isEmpty ?? true) {
                            downloadReports[name]![downloadReports[name]!.count - 1]
                                .append(reply(after: started))
                        }
                    }
                default:
                    break
                }
            }
        }
        lengthNanoseconds = max(lengthNanoseconds, lastTimestamp - (firstUserTimestamp ?? 0))
    }

    /// The store's recorded answer to a request, planned as a reply delayed as it was recorded after
    /// the request (`reply(after:)` counts it for the device).
    private mutating func planStoreReply(_ body: CommandBody, moments: RequestMoments, identities: TransactionIdentities,
                                         reply: (_ moment: Int64) -> PlannedReply) {
        switch body {
        case .decidePurchase(let key, _), .resumeInterruptedPurchase(_, let key, _, _):
            if let identity = identities.identity(of: key), let added = moments.added[identity] {
                purchaseDecisions[identity, default: []].append(reply(added))
            }
        case .clearTransactions(let device):
            if let registered = moments.registered[device] {
                accountActions[device, default: []].append(reply(registered))
            }
        case .renewSubscription(_, let original), .expireSubscription(_, let original), .refundPurchase(_, let original),
             .beginBillingRetry(_, let original, _):
            if let identity = identities.purchase(named: original.transactionIdentifier), let purchased = moments.purchased[identity] {
                laterDecisions[identity, default: []].append(reply(purchased))
            }
        case .completeRestore(let device, let restore, _, _, _), .failRestore(let device, let restore, _):
            let name = RestoreName(device: device, restore: restore)
            if let started = moments.restoreStarted[name] {
                restoreAnswers[name, default: []].append(reply(started))
                if case .completeRestore(_, _, _, let originals, _) = body { noteNamedPurchases(originals, identities) }
            }
        case .deliverReceipt(let device, let request, _, let entries, _):
            let name = ReceiptName(device: device, request: request)
            if let started = moments.receiptStarted[name] {
                receiptAnswers[name, default: []].append(reply(started))
                noteNamedPurchases(entries, identities)
            }
        default:
            break
        }
    }

    private mutating func noteNamedPurchases(_ purchases: [OriginalTransaction], _ identities: TransactionIdentities) {
        for purchase in purchases {
            if let identity = identities.purchase(named: purchase.transactionIdentifier) { namedPurchases[purchase.transactionIdentifier] = identity }
        }
    }

    /// The devices' steps sorted by offset (a late attachment recorded among user actions keeps its place).
    func steps(of device: String) -> [(offsetNanoseconds: Int64, step: PlannedAppStep, repliesBefore: Int, repliesHeard: Int)] { appSteps[device] ?? [] }
}

/// When each recorded request began, for the delay of the reply that answered it.
private struct RequestMoments {
    var added: [TransactionIdentity: Int64] = [:]
    var restoreStarted: [LiveReplayPlan.RestoreName: Int64] = [:]
    var receiptStarted: [LiveReplayPlan.ReceiptName: Int64] = [:]
    var downloadStarted: [LiveReplayPlan.DownloadName: Int64] = [:]
    var purchased: [TransactionIdentity: Int64] = [:]
    var registered: [String: Int64] = [:]
}

extension CommandBody {
    /// The same command for the transaction the live queue numbered `key` (store and downloader replies).
    func retargeted(to key: TransactionKey) -> CommandBody {
        switch self {
        case .decidePurchase(_, let decision): .decidePurchase(key, decision)
        case .resumeInterruptedPurchase(let device, _, let payment, let charged):
            .resumeInterruptedPurchase(device: device, interrupted: key, payment: payment, charged: charged)
        case .reportDownloadProgress(let download, let progress, let remaining):
            .reportDownloadProgress(DownloadKey(transaction: key, index: download.index), progress: progress, timeRemaining: remaining)
        case .completeDownload(let download, let url): .completeDownload(DownloadKey(transaction: key, index: download.index), contentURL: url)
        case .failDownload(let download, let error): .failDownload(DownloadKey(transaction: key, index: download.index), error: error)
        default: self
        }
    }

    /// The same store decision about the live run's purchase `original` (its identifier and date differ).
    func retargeted(to original: OriginalTransaction) -> CommandBody {
        switch self {
        case .renewSubscription(let device, _): .renewSubscription(device: device, original: original)
        case .expireSubscription(let device, _): .expireSubscription(device: device, original: original)
        case .refundPurchase(let device, _): .refundPurchase(device: device, original: original)
        case .beginBillingRetry(let device, _, let grace): .beginBillingRetry(device: device, original: original, gracePeriodNanoseconds: grace)
        default: self
        }
    }
}
