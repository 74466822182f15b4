import Bus
import Foundation
import Logging
import StoreKitLive
import StoreKitModel
import StoreKitRoles
import StoreKitRuntime
import ZeroMQ

/// `sksim driver`: a process that plays many devices against the queue, as the coordinator's
/// plan says, and times every lifecycle stage from the lifecycle's intended start. Every
/// interval it sends its stage histograms and counters to the coordinator and starts new ones.
///
/// One thread, one poll loop: libzmq sockets belong to one thread, and one loop that starts,
/// receives and reports keeps the timing honest (nothing waits on a lock).
public final class LoadDriver {
    public struct Configuration: Sendable {
        public var name: String
        public var coordinatorEndpoint: String
        /// Every queue partition, in routing order; each device's commands go to its account's.
        public var partitions: [PartitionEndpoints]
        public var curve: CurveClientKeys?
        public var heartbeatMilliseconds = 250
        /// How long to wait for the coordinator's plan and start before giving up.
        public var coordinatorTimeoutSeconds = 60.0
        /// The user's own app, run on every device in place of the driver's observer (`DriverApps`).
        public var app: DriverApp?

        public init(name: String, coordinatorEndpoint: String, partitions: [PartitionEndpoints]) {
            precondition(!partitions.isEmpty, "a load needs at least one queue partition")
            self.name = name
            self.coordinatorEndpoint = coordinatorEndpoint
            self.partitions = partitions
        }
    }

    /// The products a driver buys: a plain consumable, or (for `downloadFraction`) a
    /// non-consumable with hosted content, from the built-in sample catalog.
    public static let plainProduct = "com.example.sksim.coins.small"
    public static let contentProduct = "com.example.sksim.levelpack.forest"

    public let configuration: Configuration
    private let logger: Logger

    public init(configuration: Configuration, logger: Logger) {
        self.configuration = configuration
        self.logger = logger
    }

    public func run() throws {
        let context = try ZeroMQContext()
        defer { context.terminate() }
        let coordinator = try context.socket(.dealer)
        coordinator.receiveLimits = LoadWire.limits
        try coordinator.set(.sendHighWaterMark, 10_000)
        // A secured topology secures the coordinator's endpoint too (`DriverEndpointSecurity`).
        try configuration.curve?.apply(to: coordinator)
        try coordinator.connect(configuration.coordinatorEndpoint)
        defer { coordinator.close() }

        let hello = DriverHello(name: configuration.name, host: ProcessInfo.processInfo.hostName, pid: getpid())
        _ = try coordinator.send(LoadWire.frames(.hello, hello), mode: .blocking)
        let plan = try awaitMessage(.plan, LoadPlan.self, from: coordinator)
        logger.info("plan received", metadata: ["index": "\(plan.driverIndex)", "drivers": "\(plan.driverCount)", "model": "\(plan.model.rawValue)"])

        let partitions = configuration.partitions
        let routes = DeviceRoutes(partitionCount: partitions.count)
        var subscriberConfiguration = EventSubscriberConfiguration(eventsEndpoint: partitions[0].eventsEndpoint,
                                                                   requestsEndpoint: partitions[0].requestsEndpoint)
        subscriberConfiguration.silenceTimeout = .milliseconds(configuration.heartbeatMilliseconds * 8)
        subscriberConfiguration.curve = configuration.curve
        let subscriber = try PartitionedSubscriber(context: context, partitions: partitions, configuration: subscriberConfiguration, routes: routes)
        // A new process gets a new origin, so its command ids never collide with an earlier one's.
        var senderConfiguration = CommandSenderConfiguration(origin: "\(configuration.name).\(getpid())", requestsEndpoint: partitions[0].requestsEndpoint)
        senderConfiguration.curve = configuration.curve
        senderConfiguration.window = 16_384
        let sender = try PartitionedSender(context: context, partitions: partitions, configuration: senderConfiguration, routes: routes)
        defer {
            subscriber.close()
            sender.close()
        }
        var engine = DriverEngine(name: configuration.name, plan: plan, origins: sender.origins)
        engine.apps = configuration.app.map { DriverApps(app: $0, devices: engine.devices, choices: SeededChoices(seed: plan.seed, stream: "\(configuration.name) apps")) }
        try engine.setUp(sender: sender, subscriber: subscriber)
        _ = try coordinator.send(LoadWire.frames(.ready, DriverReady(name: configuration.name, devices: plan.devicesPerDriver)), mode: .blocking)
        let start = try awaitMessage(.start, LoadStart.self, from: coordinator)
        let startMonotonic = LiveClock.monotonicNanoseconds() + (start.startAtUnixNanoseconds - LiveClock.wallNanoseconds())
        try engine.drive(startMonotonic: startMonotonic, sender: sender, subscriber: subscriber, coordinator: coordinator)
        logger.info("done", metadata: ["started": "\(engine.total.started)", "completed": "\(engine.total.completed)",
                                       "missedStarts": "\(engine.total.missedStarts)", "incomplete": "\(engine.total.incomplete)"])
    }

    /// Waits (bounded) for one message from the coordinator.
    private func awaitMessage<Body: Decodable>(_ verb: LoadWire.Verb, _ type: Body.Type, from socket: Socket) throws -> Body {
        let deadline = LiveClock.monotonicNanoseconds() + Int64(configuration.coordinatorTimeoutSeconds * 1e9)
        while LiveClock.monotonicNanoseconds() < deadline {
            if Shutdown.isRequested { throw LoadProtocolError("stopped by a signal while waiting for the coordinator") }
            guard let frames = try socket.receive(timeout: .milliseconds(50)) else { continue }
            guard frames.count == 2, let received = LoadWire.verb(frames[0]) else {
                throw LoadProtocolError("the coordinator at \(configuration.coordinatorEndpoint) sent a message this driver cannot read; are both the same sksim version?")
            }
            if received == .stop { throw LoadProtocolError("the coordinator stopped the run before it started") }
            guard received == verb else { continue }
            return try LoadWire.decode(type, frames[1])
        }
        throw LoadProtocolError("no \(verb.rawValue) from the coordinator at \(configuration.coordinatorEndpoint) within \(Int(configuration.coordinatorTimeoutSeconds)) s; start `sksim load` first, or check the endpoint"
            + (configuration.curve == nil ? "" : " and that this host's client key is among the topology's allowedClientKeys"))
    }
}

/// The driver's state and decisions, apart from its sockets' set-up: which lifecycles are in
/// flight, which stage each reached, and the interval's histograms.
struct DriverEngine {
    let name: String
    let plan: LoadPlan
    /// This driver's command origins, one per partition.
    let origins: Set<String>
    let devices: [String]
    let choices: SeededChoices

    enum Kind { case purchase, restore }

    struct Lifecycle {
        var kind: Kind
        var intended: Int64
        var device: Int
        /// A restore: transactions restored and not yet removed, and whether restoreFinished came.
        var openTransactions = 0
        var delivered = false
    }

    struct Transaction {
        var lifecycle: Int
        var downloadsRemaining: Int
        var isRestored: Bool
    }

    var lifecycles: [Int: Lifecycle] = [:]
    var nextLifecycle = 0
    /// addPayment / restore command number → lifecycle.
    var pendingStarts: [CommandID: Int] = [:]
    /// finishTransaction command number → its lifecycle and that lifecycle's intended start (the
    /// acknowledgement may come after transactionFinished was heard and the lifecycle ended).
    var pendingFinishes: [CommandID: (lifecycle: Int, intended: Int64, isRestored: Bool)] = [:]
    var transactions: [TransactionKey: Transaction] = [:]
    /// (device, restore number) → lifecycle.
    var restores: [String: Int] = [:]
    /// Commands waiting for room in the sender's window (bounded by the in-flight bound).
    var waiting: [CommandBody] = []
    var waitingHead = 0

    /// The user's own app on every device, deciding what the driver's observer decides otherwise.
    var apps: DriverApps?

    var histograms = StageHistograms()
    var interval = LoadCounters()
    var total = LoadCounters()
    var nextDevice = 0
    var nextArrival: Int
    /// Closed model: when each device is next meant to start.
    var closedStarts = Scheduler<Int>()

    init(name: String, plan: LoadPlan, origins: Set<String>) {
        self.name = name
        self.plan = plan
        self.origins = origins
        devices = (0..<max(1, plan.devicesPerDriver)).map { "\(name)-\($0)" }
        choices = SeededChoices(seed: plan.seed, stream: name)
        nextArrival = plan.driverIndex
    }

    var inFlight: Int { lifecycles.count }

    /// Registers, launches and attaches an observer to every device, and waits (bounded) until
    /// the queue acknowledged all of it.
    mutating func setUp(sender: PartitionedSender, subscriber: PartitionedSubscriber) throws {
        var commands: [CommandBody] = []
        for (index, device) in devices.enumerated() {
            commands.append(.registerDevice(device: device, account: "\(name)-account-\(index / 2)"))
            if let apps {
                // The app's launch attaches its own observers.
                apps.launch(device, now: LiveClock.monotonicNanoseconds())
                commands.append(contentsOf: apps.takeCommands())
                continue
            }
            commands.append(.launchApp(device: device))
            commands.append(.attachObserver(device: device, observer: "load"))
        }
        var next = 0
        let deadline = LiveClock.monotonicNanoseconds() + 60_000_000_000
        while next < commands.count || sender.outstandingCount > 0 {
            guard LiveClock.monotonicNanoseconds() < deadline else {
                throw LoadProtocolError("\(name) could not register its \(devices.count) devices with the queue at \(sender.requestsEndpoints) within 60 s; is the queue running?")
            }
            while next < commands.count && sender.hasCapacity {
                try sender.submit(commands[next])
                next += 1
            }
            for completion in try sender.poll(timeout: .milliseconds(5)) {
                switch completion {
                case .failed(_, let error): throw error
                case .acknowledged(let acknowledgement) where acknowledgement.status == .rejected || acknowledgement.status == .malformed:
                    throw LoadProtocolError("the queue refused setting up \(name)'s devices (\(acknowledgement.message)); use a new run directory for each load")
                default: break
                }
            }
            // Keep the subscription drained meanwhile, so its buffers stay small; an app hears its devices' events.
            let records = try subscriber.receiveRecords(timeout: .zero)
            if let apps {
                for record in records {
                    guard let recorded = try? record.decoded(), recorded.event.device?.hasPrefix("\(name)-") == true else { continue }
                    apps.deliver(recorded, now: LiveClock.monotonicNanoseconds())
                }
            }
        }
    }

    mutating func drive(startMonotonic: Int64, sender: PartitionedSender, subscriber: PartitionedSubscriber, coordinator: Socket) throws {
        let loadEnd = startMonotonic + plan.loadNanoseconds
        var drainEnd = loadEnd + plan.drainNanoseconds
        var nextReport = startMonotonic + plan.intervalNanoseconds
        var reportIndex = 0
        var stopped = false
        if plan.model == .closed {
            // Each device's first start is spread over the first think time, so they do not all start at once.
            for device in devices.indices {
                closedStarts.schedule(at: startMonotonic + plan.thinkTime.sampleNanoseconds(choices), device)
            }
        }
        let prefix = Array("\(name)-".utf8)
        while true {
            var now = LiveClock.monotonicNanoseconds()
            if Shutdown.isRequested && !stopped {
                stopped = true
                drainEnd = min(drainEnd, now + 2_000_000_000)
            }
            // Starts intended before the end are made even when the loop reaches them late (timed from
            // their intended start), so a busy machine shows as latency, not as fewer lifecycles.
            let startsLeft = nextDue(startMonotonic: startMonotonic).map { $0 < loadEnd } ?? false
            let starting = !stopped && (now < loadEnd || startsLeft)
            if starting { try startDue(now: now, startMonotonic: startMonotonic, loadEnd: loadEnd, sender: sender) }
            try flushWaiting(sender)
            for completion in try sender.poll(timeout: .zero) {
                // Another client used this driver's command ids: the log holds commands it never sent.
                if case .failed(_, let error) = completion, case .duplicateOfUnsentCommand = error { throw error }
                handle(completion, now: LiveClock.monotonicNanoseconds())
            }

            // Wait for events no longer than until the next start or report is due.
            now = LiveClock.monotonicNanoseconds()
            var wake = nextReport
            if starting, let due = nextDue(startMonotonic: startMonotonic) { wake = min(wake, due) }
            if let due = apps?.nextWorkDue { wake = min(wake, due) }
            let wait = waiting.count > waitingHead ? 0 : max(0, min(wake - now, 5_000_000))
            for record in try subscriber.receiveRecords(timeout: .nanoseconds(wait)) {
                // Every driver hears every partition whole; the topic's device says whose it is. A record
                // caught up by FETCH (after a queue restart, or a gap) has no topic: its event says. Those
                // were once skipped as device-less, so their lifecycles stalled until the drain ended.
                if let device = record.device, !device.utf8.starts(with: prefix) { continue }
                let recorded: RecordedEvent
                do {
                    recorded = try record.decoded()
                } catch {
                    interval.errors += 1
                    continue
                }
                if record.device == nil, !(recorded.event.device.map { $0.utf8.starts(with: prefix) } ?? false) { continue }
                handle(recorded, now: LiveClock.monotonicNanoseconds())
                apps?.deliver(recorded, now: LiveClock.monotonicNanoseconds())
            }
            if let apps {
                apps.completeDueWork(now: LiveClock.monotonicNanoseconds())
                waiting.append(contentsOf: apps.takeCommands())
            }

            if let frames = try coordinator.receive(timeout: .zero), LoadWire.verb(frames[0]) == .stop, !stopped {
                stopped = true
                drainEnd = min(drainEnd, LiveClock.monotonicNanoseconds() + 2_000_000_000)
            }
            now = LiveClock.monotonicNanoseconds()
            // Done once nothing is in flight and every finish was acknowledged (its `finished` stage
            // is measured from the acknowledgement), or when the drain time is up.
            let loadOver = stopped || now >= drainEnd || (now >= loadEnd && !(nextDue(startMonotonic: startMonotonic).map { $0 < loadEnd } ?? false))
            let finished = loadOver && ((inFlight == 0 && pendingFinishes.isEmpty) || now >= drainEnd)
            if now >= nextReport || finished {
                if finished {
                    interval.incomplete = inFlight
                    interval.missedStarts += unmadeStarts(startMonotonic: startMonotonic, end: stopped ? min(now, loadEnd) : loadEnd)
                }
                let report = DriverReport(driver: name, interval: reportIndex, isFinal: finished, counters: interval, inFlight: inFlight,
                                          cpuNanoseconds: processCPUNanoseconds(), peakMemoryBytes: peakResidentBytes(),
                                          histograms: histograms.encoded())
                _ = try coordinator.send(LoadWire.frames(.report, report), mode: .blocking)
                total = total + interval
                interval = LoadCounters()
                histograms.reset()
                reportIndex += 1
                nextReport += plan.intervalNanoseconds
                if finished { return }
            }
        }
    }

    /// The intended instant of the next start, if any.
    func nextDue(startMonotonic: Int64) -> Int64? {
        switch plan.model {
        case .open: plan.schedule.intendedStart(ofArrival: nextArrival).map { startMonotonic + $0 }
        case .closed: closedStarts.nextTime
        }
    }

    /// Counts as missed the open model's starts intended before `end` that were never made (the
    /// run was stopped, or the sender's window stayed full until the drain ended).
    mutating func unmadeStarts(startMonotonic: Int64, end: Int64) -> Int {
        guard plan.model == .open else { return 0 }
        var count = 0
        while let due = nextDue(startMonotonic: startMonotonic), due < end {
            nextArrival += plan.driverCount
            count += 1
        }
        return count
    }

    /// Starts every lifecycle whose intended start has come. A start past the in-flight bound
    /// is missed (counted); one that finds the sender's window full waits for the next round,
    /// and its latency still counts from its intended start.
    mutating func startDue(now: Int64, startMonotonic: Int64, loadEnd: Int64, sender: PartitionedSender) throws {
        var budget = 4_096  // Starts per round, so events and reports are heard between bursts.
        while budget > 0, let due = nextDue(startMonotonic: startMonotonic), due <= now, due < loadEnd {
            guard sender.hasCapacity else { return }
            budget -= 1
            let device: Int
            switch plan.model {
            case .open:
                nextArrival += plan.driverCount
                if inFlight >= plan.maximumInFlight {
                    interval.missedStarts += 1
                    continue
                }
                device = nextDevice
                nextDevice = (nextDevice + 1) % devices.count
            case .closed:
                device = closedStarts.next()!.action
            }
            try start(device: device, intended: due, sender: sender)
        }
    }

    mutating func start(device: Int, intended: Int64, sender: PartitionedSender) throws {
        let kind: Kind = choices.chance(.userRestore, plan.restoreFraction) ? .restore : .purchase
        let body: CommandBody
        switch kind {
        case .restore:
            body = .restoreCompletedTransactions(device: devices[device], applicationUsername: nil)
        case .purchase:
            let product = choices.chance(.product, plan.downloadFraction) ? LoadDriver.contentProduct : LoadDriver.plainProduct
            body = .addPayment(device: devices[device], payment: Payment(productIdentifier: product))
        }
        let id = try sender.submit(body)
        let lifecycle = nextLifecycle
        nextLifecycle += 1
        lifecycles[lifecycle] = Lifecycle(kind: kind, intended: intended, device: device)
        pendingStarts[id] = lifecycle
        interval.started += 1
    }

    mutating func flushWaiting(_ sender: PartitionedSender) throws {
        while waitingHead < waiting.count && sender.hasCapacity {
            let body = waiting[waitingHead]
            waitingHead += 1
            let id = try sender.submit(body)
            if case .finishTransaction(let key) = body, let transaction = transactions[key], let lifecycle = lifecycles[transaction.lifecycle] {
                pendingFinishes[id] = (transaction.lifecycle, lifecycle.intended, transaction.isRestored)
            }
        }
        if waitingHead == waiting.count {
            waiting.removeAll(keepingCapacity: true)
            waitingHead = 0
        }
    }

    mutating func end(_ lifecycle: Int, now: Int64, stage: LifecycleStage?, error: Bool = false) {
        guard let ended = lifecycles.removeValue(forKey: lifecycle) else { return }
        if let stage { histograms.record(stage, nanoseconds: now - ended.intended) }
        if error { interval.errors += 1 } else { interval.completed += 1 }
        if plan.model == .closed {
            closedStarts.schedule(at: now + plan.thinkTime.sampleNanoseconds(choices), ended.device)
        }
    }

    mutating func handle(_ completion: CommandCompletion, now: Int64) {
        switch completion {
        case .failed(let id, _):
            interval.errors += 1
            if let lifecycle = pendingStarts.removeValue(forKey: id) { end(lifecycle, now: now, stage: nil, error: true) }
            if let finish = pendingFinishes.removeValue(forKey: id) { end(finish.lifecycle, now: now, stage: nil, error: true) }
        case .acknowledged(let acknowledgement):
            guard let id = acknowledgement.commandID else { return }
            if acknowledgement.status == .rejected || acknowledgement.status == .malformed {
                interval.rejections += 1
                if let lifecycle = pendingStarts.removeValue(forKey: id) { end(lifecycle, now: now, stage: nil, error: true) }
                if let finish = pendingFinishes.removeValue(forKey: id) { end(finish.lifecycle, now: now, stage: nil, error: true) }
                return
            }
            if let finish = pendingFinishes.removeValue(forKey: id), !finish.isRestored {
                histograms.record(.finished, nanoseconds: now - finish.intended)
            }
        }
    }

    mutating func handle(_ recorded: RecordedEvent, now: Int64) {
        let ours = recorded.commandID.map { origins.contains($0.origin) } ?? false
        switch recorded.event {
        case .transactionAdded(let key, let payment):
            guard ours, let id = recorded.commandID, let lifecycle = pendingStarts.removeValue(forKey: id),
                  let started = lifecycles[lifecycle] else { return }
            histograms.record(.added, nanoseconds: now - started.intended)
            let downloads = payment.productIdentifier == LoadDriver.contentProduct ? -1 : 0
            transactions[key] = Transaction(lifecycle: lifecycle, downloadsRemaining: downloads, isRestored: false)
        case .transactionDeferred(let key):
            guard let transaction = transactions[key], let lifecycle = lifecycles[transaction.lifecycle] else { return }
            histograms.record(.deferred, nanoseconds: now - lifecycle.intended)
        case .transactionPurchased(let key, _, let downloads, _):
            guard var transaction = transactions[key], let lifecycle = lifecycles[transaction.lifecycle] else { return }
            histograms.record(.purchased, nanoseconds: now - lifecycle.intended)
            transaction.downloadsRemaining = downloads.count
            transactions[key] = transaction
            settle(key, downloads: downloads.count)
        case .transactionFailed(let key, _):
            guard let transaction = transactions[key], let lifecycle = lifecycles[transaction.lifecycle] else { return }
            histograms.record(.failed, nanoseconds: now - lifecycle.intended)
            queueCommand(.finishTransaction(key))
        case .askToBuyDeclined(let key):
            // Declined stays deferred for good (F-A1): the lifecycle is complete, with no stage timed.
            guard let transaction = transactions.removeValue(forKey: key) else { return }
            end(transaction.lifecycle, now: now, stage: nil)
        case .restoreStarted(let device, let restore, _):
            guard ours, let id = recorded.commandID, let lifecycle = pendingStarts.removeValue(forKey: id) else { return }
            restores["\(device)#\(restore)"] = lifecycle
        case .transactionRestored(let key, let restore, _, _, let downloads):
            guard let lifecycle = restores["\(key.device)#\(restore)"] else { return }
            lifecycles[lifecycle]?.openTransactions += 1
            transactions[key] = Transaction(lifecycle: lifecycle, downloadsRemaining: downloads.count, isRestored: true)
            settle(key, downloads: downloads.count)
        case .restoreFinished(let device, let restore):
            guard let lifecycle = restores.removeValue(forKey: "\(device)#\(restore)"), let started = lifecycles[lifecycle] else { return }
            histograms.record(.restored, nanoseconds: now - started.intended)
            lifecycles[lifecycle]?.delivered = true
            if started.openTransactions == 0 { end(lifecycle, now: now, stage: .restoreFinished) }
        case .restoreFailed(let device, let restore, _):
            // The store's answer, like a failed purchase: the lifecycle is complete, with no stage timed.
            guard let lifecycle = restores.removeValue(forKey: "\(device)#\(restore)") else { return }
            end(lifecycle, now: now, stage: nil)
        case .downloadFinished(let download, _), .downloadFailed(let download, _), .downloadCancelled(let download):
            guard var transaction = transactions[download.transaction], transaction.downloadsRemaining > 0 else { return }
            transaction.downloadsRemaining -= 1
            transactions[download.transaction] = transaction
            if transaction.downloadsRemaining == 0 {
                if !transaction.isRestored, let lifecycle = lifecycles[transaction.lifecycle] {
                    histograms.record(.downloaded, nanoseconds: now - lifecycle.intended)
                }
                queueCommand(.finishTransaction(download.transaction))
            }
        case .transactionFinished(let key):
            guard let transaction = transactions.removeValue(forKey: key), let lifecycle = lifecycles[transaction.lifecycle] else { return }
            if transaction.isRestored {
                lifecycles[transaction.lifecycle]?.openTransactions -= 1
                if lifecycle.delivered && lifecycle.openTransactions == 1 { end(transaction.lifecycle, now: now, stage: .restoreFinished) }
            } else {
                end(transaction.lifecycle, now: now, stage: .removed)
            }
        case .commandRejected:
            // Counted from the acknowledgement, which also ends the lifecycle it started.
            break
        default:
            break
        }
    }

    /// A purchased or restored transaction: download its content first, if any, then finish it.
    mutating func settle(_ key: TransactionKey, downloads: Int) {
        if downloads > 0 {
            queueCommand(.startDownloads((0..<downloads).map { DownloadKey(transaction: key, index: $0) }))
        } else {
            queueCommand(.finishTransaction(key))
        }
    }

    /// Commands decided while handling events go out on the next round (the sender is not at hand here).
    mutating func queueCommand(_ body: CommandBody) {
        // An app decides its own finishes and downloads.
        guard apps == nil else { return }
        waiting.append(body)
    }
}
