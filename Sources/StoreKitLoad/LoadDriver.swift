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
        /// The signed transaction and app receipt sent to `--backend` (the App Store server's signer goes here).
        public var evidence: PurchaseEvidence.Producer = PurchaseEvidence.unsigned
        /// The user's own app, run on every device in place of the driver's observer (`DriverApps`).
        public var app: DriverApp?
        /// A team's users as code (`StoreKitLoadKit`): what each user does, think times, HTTP calls, counters, checks.
        public var behavior: (any LoadUserBehavior)?

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
        // Only this driver's devices' events (`DriverEngine.devices`), so a driver's work per lifecycle does
        // not grow with the number of drivers (docs/load-testing.md, "Drivers that scale").
        subscriberConfiguration.topicGroup = DriverEngine.devicePrefix(of: configuration.name)
        let subscriber = try PartitionedSubscriber(context: context, partitions: partitions, configuration: subscriberConfiguration, routes: routes)
        // A new process gets a new origin, so its command ids never collide with an earlier one's.
        var senderConfiguration = CommandSenderConfiguration(origin: "\(configuration.name).\(getpid())", requestsEndpoint: partitions[0].requestsEndpoint)
        senderConfiguration.curve = configuration.curve
        senderConfiguration.window = 16_384
        let sender = try PartitionedSender(context: context, partitions: partitions, configuration: senderConfiguration, routes: routes)
        // Each command carries what this process had heard, recorded with it in the log.
        sender.hears(subscriber)
        defer {
            subscriber.close()
            sender.close()
        }
        var engine = DriverEngine(name: configuration.name, plan: plan, origins: sender.origins)
        let backend = plan.backendURL.map { BackendPoster(url: $0, timeoutNanoseconds: plan.backendTimeoutNanoseconds) }
        defer { backend?.shutdown() }
        engine.backend = backend
        engine.evidence = configuration.evidence
        engine.behavior = configuration.behavior
        let http = configuration.behavior.map { _ in LoadHTTPCaller() }
        defer { http?.shutdown() }
        engine.http = http
        engine.apps = configuration.app.map { DriverApps(app: $0, devices: engine.devices, choices: SeededChoices(seed: plan.seed, stream: "\(configuration.name) apps")) }
        try engine.setUp(sender: sender, subscriber: subscriber)
        _ = try coordinator.send(LoadWire.frames(.ready, DriverReady(name: configuration.name, devices: plan.devicesPerDriver)), mode: .blocking)
        let start = try awaitMessage(.start, LoadStart.self, from: coordinator)
        let startMonotonic = LiveClock.monotonicNanoseconds() + (start.startAtUnixNanoseconds - LiveClock.wallNanoseconds())
        let loop = DriverLoop(engine: engine, sender: sender)
        try loop.drive(startMonotonic: startMonotonic, subscriber: subscriber, coordinator: coordinator)
        engine = loop.engine
        if let failure = engine.firstBackendFailure {
            logger.warning("backend errors", metadata: ["count": "\(engine.total.backendErrors)", "first": "\(failure)"])
        }
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

    struct Lifecycle {
        var kind: LifecycleKind
        var intended: Int64
        var device: Int
        /// A purchase: what its account holds from its start (`LoadProduct.ownershipKey`).
        var ownershipKey: String? = nil
        /// A purchase: its product, and the log's identifier of its transaction once purchased (for a behaviour).
        var product: String? = nil
        var transactionIdentifier: String? = nil
        /// A restore: transactions restored and not yet removed, and whether restoreFinished came.
        var openTransactions = 0
        var delivered = false
    }

    struct Transaction {
        var lifecycle: Int
        var downloadsRemaining: Int
        var isRestored: Bool
        /// What the account holds while this purchase is open or once it is bought (`LoadProduct.ownershipKey`).
        var ownershipKey: String? = nil
        var payment: Payment? = nil
    }

    /// Per account (device index / 2): the non-consumables and subscription groups it bought or is
    /// buying, so it never buys one of them again.
    var owned: [Int: Set<String>] = [:]
    /// Per device: its latest purchases that a refund request may name (at most `refundableKept`).
    var refundable: [Int: [OriginalTransaction]] = [:]
    static let refundableKept = 8
    /// (device, receipt refresh number) → lifecycle.
    var receiptRequests: [String: Int] = [:]
    /// When starts stop being offered: a lifecycle ending before it counts in `completedDuringLoad`.
    var loadEnd = Int64.max
    /// `--backend`: the poster, how evidence is made, and the transactions whose POST is unanswered
    /// (by token), each with the instant it arrived at the app.
    var backend: BackendPoster?
    var evidence: PurchaseEvidence.Producer = PurchaseEvidence.unsigned
    var awaitingBackend: [Int: (key: TransactionKey, arrival: Int64, downloads: Int)] = [:]
    /// With the user's app and `--backend`: transactions whose POST is unanswered, the app's finishes held
    /// until their 2xx, and transactions the backend refused whose finish the app has yet to ask for
    /// (dropped when it does; bounded, as a refused transaction's finish comes soon after if at all).
    var backendPending: Set<TransactionKey> = []
    var heldFinishes: Set<TransactionKey> = []
    var backendRefused: Set<TransactionKey> = []
    static let refusedKept = 100_000
    var nextBackendToken = 0
    /// Why the first refused or failed POST failed (its evidence could not be made, an HTTP status, a
    /// timeout), for the driver's log.
    var firstBackendFailure: String?

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
    /// Commands made outside the role host's hands (starts, finishes, what the apps made), handed to it
    /// at once (`DriverLoop`); the host sends them in that order, or keeps them while its window is full.
    var outbox: [CommandBody] = []
    /// What each command handed to the host is, in the order handed, until the transport reports the id
    /// it was sent under (`noteSent`): a start's lifecycle, a finish's transaction.
    enum SentCommand {
        case start(lifecycle: Int)
        case finish(TransactionKey)
        case other
    }
    var handedOver: [SentCommand] = []
    var handedOverHead = 0

    /// The user's own app on every device, deciding what the driver's observer decides otherwise.
    var apps: DriverApps?
    /// A team's users as code, the HTTP calls it makes (by token: stage, when sent, the answer's hook),
    /// and the interval's custom stages, counters and checks.
    var behavior: (any LoadUserBehavior)?
    var http: LoadHTTPCaller?
    var awaitingHTTP: [Int: (stage: String, sent: Int64, request: LoadHTTPRequest)] = [:]
    var nextHTTPToken = 0
    var custom = CustomFigures()
    /// Per device: lifecycles started, and products purchased (the latest `purchasesKept`), for a behaviour's `LoadUser`.
    var lifecyclesStarted: [Int: Int] = [:]
    var purchasedProducts: [Int: [String]] = [:]
    static let purchasesKept = 16

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
        devices = (0..<max(1, plan.devicesPerDriver)).map { "\(Self.devicePrefix(of: name))\($0)" }
        choices = SeededChoices(seed: plan.seed, stream: name)
        nextArrival = plan.driverIndex
    }

    var inFlight: Int { lifecycles.count }

    /// What every device name of the driver `name` starts with, and its subscription's topic group.
    static func devicePrefix(of name: String) -> String { Topology.loadDriverDevicePrefix(name) }

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
                    throw LoadProtocolError("the queue refused setting up \(name)'s devices (\(acknowledgement.message)); "
                        + "if it names a key or role, bind this host's key to `drivers: [\(name)]` in the topology's allowedClientKeys "
                        + "(docs/reliability.md, \"Roles\"), else use a new run directory for each load")
                default: break
                }
            }
            // Keep the subscription drained meanwhile, so its buffers stay small; an app hears its devices' events.
            let records = try subscriber.receiveRecords(timeout: .zero)
            if let apps {
                for record in records {
                    guard let recorded = try? record.decoded(), recorded.event.device?.hasPrefix(Self.devicePrefix(of: name)) == true else { continue }
                    apps.deliver(recorded, now: LiveClock.monotonicNanoseconds())
                }
            }
        }
    }

    /// Where a run of the loop stands: the load's end, the drain's end, the next report.
    struct LoopState {
        var drainEnd: Int64
        var nextReport: Int64
        var reportIndex = 0
        var stopped = false
        /// When the coordinator's socket was last read: a stop can wait a little (`coordinatorReadNanoseconds`).
        var coordinatorReadAt: Int64 = 0
    }

    /// A wake-up's work reads everything that arrived, makes every start that is due and sends what it
    /// made as one batch; between wake-ups the driver sleeps until its next start. What arrives meanwhile
    /// waits for that start when it is at most `readDelayBoundNanoseconds` away, so a driver wakes about
    /// once per start of its own, not once per message the queue sends it, and its CPU per lifecycle does
    /// not grow with the number of drivers (docs/load-testing.md, "Drivers that scale"). A later start
    /// is waited for on the sockets, so a slow load still times every stage as its event arrives.
    static let readDelayBoundNanoseconds: Int64 = 2_000_000
    /// The shortest sleep: at higher rates one wake-up makes every start due within it (each still timed
    /// from its intended instant).
    static let shortestSleepNanoseconds: Int64 = 500_000
    /// The longest wait on the sockets with nothing due (25 ms: a message ends it, and the bus's own
    /// timers, retries and FETCHes, are 100 ms and longer; each idle wake-up costs a driver tens of
    /// microseconds of polling, for every driver of the load), or with HTTP answers awaited (1 ms: they
    /// come from another thread, with no socket to wait on).
    static let longestWaitNanoseconds: Int64 = 25_000_000
    static let longestWaitForHTTPNanoseconds: Int64 = 1_000_000
    /// How often the coordinator's socket is read for a stop.
    static let coordinatorReadNanoseconds: Int64 = 10_000_000

    mutating func takeAnswers(_ completions: [CommandCompletion]) throws {
        let now = LiveClock.monotonicNanoseconds()
        for completion in completions {
            // Another client used this driver's command ids: the log holds commands it never sent.
            if case .failed(_, let error) = completion, case .duplicateOfUnsentCommand = error { throw error }
            handle(completion, now: now)
        }
    }

    /// Reads a stop from the coordinator, and sends the interval's report when it is due or the load is
    /// over; true once the final report went.
    mutating func report(_ progress: inout LoopState, startMonotonic: Int64, coordinator: Socket) throws -> Bool {
        var now = LiveClock.monotonicNanoseconds()
        if now - progress.coordinatorReadAt >= Self.coordinatorReadNanoseconds || now >= progress.nextReport {
            progress.coordinatorReadAt = now
            if let frames = try coordinator.receive(timeout: .zero), LoadWire.verb(frames[0]) == .stop, !progress.stopped {
                progress.stopped = true
                progress.drainEnd = min(progress.drainEnd, now + 2_000_000_000)
            }
            now = LiveClock.monotonicNanoseconds()
        }
        // Done once nothing is in flight and every finish was acknowledged (its `finished` stage
        // is measured from the acknowledgement), or when the drain time is up.
        let loadOver = progress.stopped || now >= progress.drainEnd
            || (now >= loadEnd && !(nextDue(startMonotonic: startMonotonic).map { $0 < loadEnd } ?? false))
        let finished = loadOver && ((inFlight == 0 && pendingFinishes.isEmpty && awaitingHTTP.isEmpty) || now >= progress.drainEnd)
        guard now >= progress.nextReport || finished else { return false }
        if finished {
            interval.incomplete = inFlight
            interval.missedStarts += unmadeStarts(startMonotonic: startMonotonic, end: progress.stopped ? min(now, loadEnd) : loadEnd)
        }
        let report = DriverReport(driver: name, interval: progress.reportIndex, isFinal: finished, counters: interval, inFlight: inFlight,
                                  cpuNanoseconds: processCPUNanoseconds(), peakMemoryBytes: peakResidentBytes(),
                                  histograms: histograms.encoded(), custom: custom.wire)
        _ = try coordinator.send(LoadWire.frames(.report, report), mode: .blocking)
        total = total + interval
        interval = LoadCounters()
        histograms.reset()
        custom.reset()
        progress.reportIndex += 1
        progress.nextReport += plan.intervalNanoseconds
        return finished
    }

    /// Waits for the next wake-up: asleep until the next start, report or piece of app work when it is
    /// due within `readDelayBoundNanoseconds` (what arrives meanwhile waits for it), otherwise on the
    /// sockets, so that the first message ends the wait.
    mutating func wait(starting: Bool, startMonotonic: Int64, progress: LoopState, commandsWaiting: Bool, poller: Poller, lastWake: inout Int64) throws {
        var wake = min(progress.nextReport, progress.drainEnd)
        if starting, let due = nextDue(startMonotonic: startMonotonic) { wake = min(wake, due) }
        if let due = apps?.nextWorkDue { wake = min(wake, due) }
        let awaitsHTTP = !awaitingBackend.isEmpty || !awaitingHTTP.isEmpty
        wake = min(wake, LiveClock.monotonicNanoseconds() + (awaitsHTTP ? Self.longestWaitForHTTPNanoseconds : Self.longestWaitNanoseconds))
        // At most one wake-up per shortest sleep; the starts due within it are made together.
        wake = max(wake, lastWake + Self.shortestSleepNanoseconds)
        let now = LiveClock.monotonicNanoseconds()
        if commandsWaiting {
            // The window is full: the queue's answers make room.
            try poller.poll(timeout: .nanoseconds(max(0, wake - now)))
        } else if wake - now > Self.readDelayBoundNanoseconds {
            try poller.poll(timeout: .nanoseconds(wake - now - Self.readDelayBoundNanoseconds))
        } else if wake > now {
            LiveClock.sleep(untilMonotonic: wake)
        }
        lastWake = LiveClock.monotonicNanoseconds()
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
    mutating func startDue(now: Int64, startMonotonic: Int64, loadEnd: Int64, host: RoleHost, transport: inout DriverTransport) throws {
        var budget = 4_096  // Starts per round, so events and reports are heard between bursts.
        while budget > 0, let due = nextDue(startMonotonic: startMonotonic), due <= now, due < loadEnd {
            guard transport.hasCapacity, host.waitingCount == 0 else { return }
            budget -= 1
            let device: Int
            switch plan.model {
            case .open:
                nextArrival += plan.driverCount
                // A start the loop reaches more than the bound behind its schedule is not made (a stalled
                // driver or a full window); made, it would hide the stall among on-time starts.
                if inFlight >= plan.maximumInFlight || now - due > plan.lateStartBoundNanoseconds {
                    interval.missedStarts += 1
                    continue
                }
                device = nextDevice
                nextDevice = (nextDevice + 1) % devices.count
            case .closed:
                device = closedStarts.next()!.action
            }
            start(device: device, intended: due)
            try handOver(to: host, over: &transport)
        }
    }

    mutating func start(device: Int, intended: Int64) {
        var kind: LifecycleKind
        var purchase: (product: String, ownershipKey: String?)?
        // A team's behaviour decides first; `.planned` leaves it to --mix and --products.
        let action = behavior?.nextAction(for: user(device), random: LoadRandom(choices)) ?? .planned
        switch action {
        case .planned:
            if let mix = plan.mix {
                kind = mix.draw(choices)
            } else {
                kind = choices.chance(.userRestore, plan.restoreFraction) ? .restore : .purchase
            }
        case .purchase(let product):
            kind = .purchase
            purchase = (product, plan.products?.first { $0.identifier == product }?.ownershipKey)
        case .askToBuy(let product):
            kind = .askToBuy
            purchase = (product, plan.products?.first { $0.identifier == product }?.ownershipKey)
        case .restore: kind = .restore
        case .refreshReceipt: kind = .receiptRefresh
        case .requestRefund: kind = .refundRequest
        }
        lifecyclesStarted[device, default: 0] += 1
        let account = device / 2
        // A refund needs an earlier purchase of this device; with none, the user buys instead.
        if kind == .refundRequest && refundable[device, default: []].isEmpty { kind = .purchase }
        if (kind == .purchase || kind == .askToBuy) && purchase == nil {
            if let products = plan.products {
                // Only what the account may still buy; an account that owns every product restores instead.
                let owns = owned[account, default: []]
                if let product = products.draw(choices, allowed: { $0.ownershipKey.map { !owns.contains($0) } ?? true }) {
                    purchase = (product.identifier, product.ownershipKey)
                } else {
                    kind = .restore
                }
            } else {
                purchase = (choices.chance(.product, plan.downloadFraction) ? LoadDriver.contentProduct : LoadDriver.plainProduct, nil)
            }
        }
        let body: CommandBody
        switch kind {
        case .restore:
            body = .restoreCompletedTransactions(device: devices[device], applicationUsername: nil)
        case .receiptRefresh:
            body = .refreshReceipt(device: devices[device])
        case .refundRequest:
            let original = refundable[device]!.removeLast()
            body = .refundPurchase(device: devices[device], original: original)
        case .purchase, .askToBuy:
            // Ask to Buy: the payment asks for a parent's approval, as `SKMutablePayment.simulatesAskToBuyInSandbox` does.
            var payment = Payment(productIdentifier: purchase!.product)
            payment.simulatesAskToBuyInSandbox = kind == .askToBuy
            body = .addPayment(device: devices[device], payment: payment)
            if let key = purchase!.ownershipKey { owned[account, default: []].insert(key) }
        }
        let lifecycle = nextLifecycle
        nextLifecycle += 1
        lifecycles[lifecycle] = Lifecycle(kind: kind, intended: intended, device: device, ownershipKey: purchase?.ownershipKey, product: purchase?.product)
        enqueue(body, startOf: lifecycle)
        interval.started += 1
    }

    /// A purchase that did not happen frees what its account was buying.
    mutating func release(_ transaction: Transaction) { release(lifecycle: transaction.lifecycle) }

    mutating func release(lifecycle: Int) {
        guard let started = lifecycles[lifecycle], let key = started.ownershipKey else { return }
        owned[started.device / 2]?.remove(key)
    }

    /// Hands the outbox to the host, which sends each command now or once its window has room.
    mutating func handOver(to host: RoleHost, over transport: inout DriverTransport) throws {
        guard !outbox.isEmpty else { return }
        for body in outbox { try host.send(body, over: &transport) }
        outbox.removeAll(keepingCapacity: true)
        noteSent(&transport)
    }

    /// Matches the ids the transport sent commands under with what was handed over, in order: a start's
    /// acknowledgement or event then finds its lifecycle, a finish's acknowledgement its stage.
    mutating func noteSent(_ transport: inout DriverTransport) {
        transport.takeSentCommandIDs { id in
            let sent = handedOver[handedOverHead]
            handedOverHead += 1
            switch sent {
            case .start(let lifecycle):
                pendingStarts[id] = lifecycle
            case .finish(let key):
                if let transaction = transactions[key], let lifecycle = lifecycles[transaction.lifecycle] {
                    pendingFinishes[id] = (transaction.lifecycle, lifecycle.intended, transaction.isRestored)
                }
            case .other:
                break
            }
        }
        if handedOverHead == handedOver.count {
            handedOver.removeAll(keepingCapacity: true)
            handedOverHead = 0
        }
    }

    mutating func end(_ lifecycle: Int, now: Int64, stage: LifecycleStage?, error: Bool = false) {
        guard let ended = lifecycles.removeValue(forKey: lifecycle) else { return }
        if let stage { histograms.record(stage, nanoseconds: now - ended.intended) }
        if error {
            interval.errors += 1
        } else {
            interval.completed += 1
            if now < loadEnd { interval.completedDuringLoad += 1 }
        }
        if let behavior {
            let outcome = LoadOutcome(kind: ended.kind, productIdentifier: ended.product, transactionIdentifier: ended.transactionIdentifier,
                                      succeeded: !error, latencyNanoseconds: now - ended.intended)
            let context = LoadContext()
            behavior.lifecycleEnded(outcome, user: user(ended.device), context: context)
            carryOut(context, now: now)
        }
        if plan.model == .closed {
            let think = behavior?.thinkTimeNanoseconds(for: user(ended.device), random: LoadRandom(choices)).map { max(0, $0) }
            closedStarts.schedule(at: now + (think ?? plan.thinkTime.sampleNanoseconds(choices)), ended.device)
        }
    }

    /// What a behaviour's hook asked for: its counts and checks now, its HTTP calls sent (each timed
    /// as its stage from now). A stage name that cannot be reported fails the call's check unsent.
    mutating func carryOut(_ context: LoadContext, now: Int64) {
        for (name, amount) in context.counts where CustomFigureName.refusal(name) == nil { custom.count(name, by: amount) }
        for (name, passed) in context.checks where CustomFigureName.refusal(name, isCheck: true) == nil { custom.check(name, passed: passed) }
        for (stage, request) in context.calls {
            guard CustomFigureName.refusal(stage, isStage: true) == nil, let http else { continue }
            let token = nextHTTPToken
            nextHTTPToken += 1
            guard http.call(token: token, request) else {
                custom.check("\(stage) answered", passed: false)
                continue
            }
            awaitingHTTP[token] = (stage, now, request)
        }
    }

    /// An HTTP call's answer: within its expected statuses, timed as its stage and passed to its hook.
    mutating func handle(_ answer: LoadHTTPCaller.Answer) {
        guard let call = awaitingHTTP.removeValue(forKey: answer.token) else { return }
        let answered = answer.status.map { call.request.expectedStatus.contains($0) } ?? false
        custom.check("\(call.stage) answered", passed: answered)
        guard answered, let status = answer.status else { return }
        custom.record(stage: call.stage, nanoseconds: answer.monotonicNanoseconds - call.sent)
        if let onAnswer = call.request.onAnswer {
            let context = LoadContext()
            onAnswer(status, answer.body, context)
            carryOut(context, now: answer.monotonicNanoseconds)
        }
    }

    /// Device `index` as a behaviour sees it.
    func user(_ index: Int) -> LoadUser {
        LoadUser(device: devices[index], account: "\(name)-account-\(index / 2)", index: index,
                 lifecyclesStarted: lifecyclesStarted[index] ?? 0, purchasedProducts: purchasedProducts[index] ?? [])
    }

    mutating func handle(_ completion: CommandCompletion, now: Int64) {
        switch completion {
        case .failed(let id, _):
            // A lifecycle's command counts once, as that lifecycle's error; any other (a renewal's finish) on its own.
            let errorsBefore = interval.errors
            if let lifecycle = pendingStarts.removeValue(forKey: id) {
                release(lifecycle: lifecycle)
                end(lifecycle, now: now, stage: nil, error: true)
            }
            if let finish = pendingFinishes.removeValue(forKey: id) { end(finish.lifecycle, now: now, stage: nil, error: true) }
            if interval.errors == errorsBefore { interval.errors += 1 }
        case .acknowledged(let acknowledgement):
            guard let id = acknowledgement.commandID else { return }
            if acknowledgement.status == .rejected || acknowledgement.status == .malformed {
                interval.rejections += 1
                if let lifecycle = pendingStarts.removeValue(forKey: id) {
                    release(lifecycle: lifecycle)
                    end(lifecycle, now: now, stage: nil, error: true)
                }
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
            let product = plan.products?.first { $0.identifier == payment.productIdentifier }
            transactions[key] = Transaction(lifecycle: lifecycle, downloadsRemaining: -1, isRestored: false,
                                            ownershipKey: product?.ownershipKey, payment: payment)
        case .transactionDeferred(let key):
            guard let transaction = transactions[key], let lifecycle = lifecycles[transaction.lifecycle] else { return }
            histograms.record(.deferred, nanoseconds: now - lifecycle.intended)
        case .transactionPurchased(let key, let identifier, let downloads, _):
            purchased(key, identifier: identifier, downloads: downloads.count, timestamp: recorded.timestamp, now: now)
        case .transactionFailed(let key, _):
            guard let transaction = transactions[key], let lifecycle = lifecycles[transaction.lifecycle] else { return }
            histograms.record(.failed, nanoseconds: now - lifecycle.intended)
            release(transaction)
            queueCommand(.finishTransaction(key))
        case .askToBuyDeclined(let key):
            // Declined stays deferred for good (F-A1): the lifecycle is complete; an Ask to Buy times it as `declined`.
            guard let transaction = transactions.removeValue(forKey: key) else { return }
            release(transaction)
            end(transaction.lifecycle, now: now, stage: lifecycles[transaction.lifecycle]?.kind == .askToBuy ? .declined : nil)
        case .restoreStarted(let device, let restore, _):
            guard ours, let id = recorded.commandID, let lifecycle = pendingStarts.removeValue(forKey: id) else { return }
            restores["\(device)#\(restore)"] = lifecycle
        case .transactionRestored(let key, let restore, let identifier, let original, let downloads):
            guard let lifecycle = restores["\(key.device)#\(restore)"], let started = lifecycles[lifecycle] else { return }
            lifecycles[lifecycle]?.openTransactions += 1
            transactions[key] = Transaction(lifecycle: lifecycle, downloadsRemaining: downloads.count, isRestored: true)
            deliver(key, identifier: identifier, original: original.transactionIdentifier, product: original.payment.productIdentifier,
                    device: started.device, downloads: downloads.count, isRestored: true, timestamp: recorded.timestamp, now: now)
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
        case .receiptRefreshStarted(let device, let request):
            guard ours, let id = recorded.commandID, let lifecycle = pendingStarts.removeValue(forKey: id) else { return }
            receiptRequests["\(device)#\(request)"] = lifecycle
        case .receiptDelivered(let device, let request, _, _, let isLast):
            guard isLast, let lifecycle = receiptRequests.removeValue(forKey: "\(device)#\(request)") else { return }
            end(lifecycle, now: now, stage: .receiptRefreshed)
        case .entitlementsRevoked(_, let original):
            guard ours, let id = recorded.commandID, let lifecycle = pendingStarts.removeValue(forKey: id),
                  let started = lifecycles[lifecycle] else { return }
            // A refunded non-consumable may be bought again; a subscription's group stays held (its store
            // may still be ending it).
            if let product = plan.products?.first(where: { $0.identifier == original.payment.productIdentifier }), product.kind == .nonConsumable {
                owned[started.device / 2]?.remove(product.identifier)
            }
            end(lifecycle, now: now, stage: .refunded)
        case .subscriptionRenewed(let key, _, _, _):
            // A renewal is a new transaction the app must finish, outside any lifecycle.
            guard key.device.utf8.starts(with: Array(Self.devicePrefix(of: name).utf8)) else { return }
            queueCommand(.finishTransaction(key))
        case .commandRejected:
            // Counted from the acknowledgement, which also ends the lifecycle it started.
            break
        default:
            break
        }
    }

    /// The store charged a transaction of ours (or approved an Ask to Buy): timed, remembered for a
    /// later refund request or a repeat buy, then delivered to the app.
    mutating func purchased(_ key: TransactionKey, identifier: String, downloads: Int, timestamp: Int64, now: Int64) {
        guard var transaction = transactions[key], let lifecycle = lifecycles[transaction.lifecycle] else { return }
        histograms.record(lifecycle.kind == .askToBuy ? .approved : .purchased, nanoseconds: now - lifecycle.intended)
        transaction.downloadsRemaining = downloads
        transactions[key] = transaction
        lifecycles[transaction.lifecycle]?.transactionIdentifier = identifier
        if behavior != nil, let product = transaction.payment?.productIdentifier {
            var bought = purchasedProducts[lifecycle.device, default: []]
            if bought.count >= Self.purchasesKept { bought.removeFirst() }
            bought.append(product)
            purchasedProducts[lifecycle.device] = bought
        }
        if let payment = transaction.payment {
            // Exactly the store's record of it (StoreProjection), so a refund request can name it.
            let original = OriginalTransaction(transactionIdentifier: identifier, payment: payment.withoutDiscount,
                                               transactionDate: timestamp)
            var kept = refundable[lifecycle.device, default: []]
            if kept.count >= Self.refundableKept { kept.removeFirst() }
            kept.append(original)
            refundable[lifecycle.device] = kept
        }
        deliver(key, identifier: identifier, original: identifier, product: transaction.payment?.productIdentifier ?? "",
                device: lifecycle.device, downloads: downloads, isRestored: false, timestamp: timestamp, now: now)
    }

    /// A purchased or restored transaction arrived at the app: with `--backend`, POST it first and
    /// settle it on the 2xx (`handle(_ answer:)`); without, settle it now.
    mutating func deliver(_ key: TransactionKey, identifier: String, original: String, product: String, device: Int, downloads: Int,
                          isRestored: Bool, timestamp: Int64, now: Int64) {
        guard let backend else { return settle(key, downloads: downloads) }
        let account = "\(name)-account-\(device / 2)"
        let request = PurchaseEvidenceRequest(logIdentifier: identifier, originalLogIdentifier: original, productId: product,
                                              device: devices[device], account: account, transactionDateNanoseconds: timestamp, isRestored: isRestored)
        let token = nextBackendToken
        nextBackendToken += 1
        awaitingBackend[token] = (key, now, downloads)
        if apps != nil { backendPending.insert(key) }
        backend.post(token: token, request: request, evidence: evidence)
    }

    /// The backend's answer: a 2xx settles the transaction (timed as stage `backend` from its arrival);
    /// anything else leaves it unfinished, as an app does (StoreKit delivers it again at the next
    /// launch), and its lifecycle ends in an error.
    mutating func handle(_ answer: BackendPoster.Answer) {
        guard let waiting = awaitingBackend.removeValue(forKey: answer.token) else { return }
        if apps != nil {
            backendPending.remove(waiting.key)
            let held = heldFinishes.remove(waiting.key) != nil
            if answer.isSuccess, held { enqueue(.finishTransaction(waiting.key)) }
            if !answer.isSuccess, !held {
                if backendRefused.count >= Self.refusedKept { backendRefused.removeAll() }
                backendRefused.insert(waiting.key)
            }
        }
        if answer.isSuccess {
            histograms.record(.backend, nanoseconds: answer.monotonicNanoseconds - waiting.arrival)
            settle(waiting.key, downloads: waiting.downloads)
            return
        }
        interval.backendErrors += 1
        if firstBackendFailure == nil { firstBackendFailure = answer.failure ?? "HTTP \(answer.status ?? 0)" }
        guard let transaction = transactions.removeValue(forKey: waiting.key) else { return }
        end(transaction.lifecycle, now: answer.monotonicNanoseconds, stage: nil, error: true)
    }

    /// A purchased or restored transaction: download its content first, if any, then finish it.
    mutating func settle(_ key: TransactionKey, downloads: Int) {
        if downloads > 0 {
            queueCommand(.startDownloads((0..<downloads).map { DownloadKey(transaction: key, index: $0) }))
        } else {
            queueCommand(.finishTransaction(key))
        }
    }

    /// The driver's own finishes and downloads (an app decides its own).
    mutating func queueCommand(_ body: CommandBody) {
        guard apps == nil else { return }
        enqueue(body)
    }

    /// A command for the outbox, remembered as what it is until its id is known.
    mutating func enqueue(_ body: CommandBody, startOf lifecycle: Int? = nil) {
        if let lifecycle {
            handedOver.append(.start(lifecycle: lifecycle))
        } else if case .finishTransaction(let key) = body {
            handedOver.append(.finish(key))
        } else {
            handedOver.append(.other)
        }
        outbox.append(body)
    }
}
