import Foundation
import StoreKitModel
import StoreKitRoles
import StoreKitRuntime

/// The deterministic environment: where the log and the content go, and the one choice
/// source every random decision of the run comes from.
public struct DeterministicEnvironment {
    public var storage: LogStorage
    public var content: ContentStorage
    public var choices: ChoiceSource
    /// Shown in reports as where the log is ("memory" for an in-memory log).
    public var logDescription: String

    public init(storage: LogStorage, content: ContentStorage, choices: ChoiceSource, logDescription: String) {
        self.storage = storage
        self.content = content
        self.choices = choices
        self.logDescription = logDescription
    }

    /// In memory: a log in memory, virtual content, choices from the seed.
    public static func inMemory(seed: UInt64, recordingChoices: Bool = false) -> DeterministicEnvironment {
        DeterministicEnvironment(storage: MemoryLogStorage(), content: VirtualContentStorage(),
                                 choices: SeededChoices(seed: seed, recording: recordingChoices), logDescription: "memory")
    }
}

/// What the network model did, for reports and tests.
public struct NetworkCounters: Sendable, Hashable {
    public var duplicatesDelivered = 0
    public var eventsLost = 0
    public var crashes = 0
    public var commandsHeldWhileQueueDown = 0
}

/// Every role in one process on a virtual clock, through the one queue engine. The
/// network model delays each message per link (links keep their order), publishes
/// events only once the log has made them durable, and can duplicate, lose (followed by
/// catch-up) and crash any role, each a recorded choice. Same choices, same log, byte for
/// byte, wherever it is written.
public final class DeterministicRuntime {
    public let scenario: Scenario
    public let environment: DeterministicEnvironment
    @exclusivity(unchecked) public private(set) var engine: QueueEngine
    @exclusivity(unchecked) public private(set) var counters = NetworkCounters()
    /// The run's first record when already known (exploration runs one scenario thousands of
    /// times, and encoding the scenario and catalog to JSON would cost more than the run).
    public var header: RunHeader?
    /// Called with every event as it is appended, in log order: a checker of the whole log
    /// (exploration's invariants) reads the events as they are made instead of decoding the log again.
    public var eventAppended: ((RecordedEvent) -> Void)?
    /// The run stops once its log holds more events than this (exploration bounds each schedule:
    /// an observer that adds a payment from every callback never lets a run settle).
    public var eventLimit: UInt64 = .max
    /// True when the run stopped at `eventLimit`.
    public private(set) var stoppedAtEventLimit = false

    private struct Slot {
        var kind: RoleFactory.Kind
        var role: Role
        var incarnation = 0
        /// The origin of this incarnation's commands (role name and incarnation), made once
        /// rather than formatted for every command.
        var origin: String
        var isDown = false
        /// Last sequence this role has heard: later copies are duplicates.
        var delivered: UInt64 = 0
        var commandNumber: UInt64 = 0
        var lastCommandArrival: Int64 = 0
        var lastEventArrival: Int64 = 0
    }

    /// What the scheduler holds: small and trivially copied (no reference counting as it moves
    /// through the scheduler); a command and a timer's token wait in slabs of their own.
    private enum Action {
        /// The command in `commandsInFlight` at this slot.
        case command(Int)
        case publish(first: UInt64, last: UInt64)
        /// The event is held in `held` (see there), not copied into every delivery.
        case deliver(sequence: UInt64, slot: Int)
        /// The token in `timerTokens` at this slot, for the role at `slot`.
        case timer(Int, slot: Int, incarnation: Int)
        case restart(slot: Int)
        case restartQueue

        /// True when carrying this out runs code of the role at `slot`.
        func concerns(slot index: Int) -> Bool {
            switch self {
            case .deliver(_, let slot), .timer(_, let slot, _), .restart(let slot): slot == index
            case .command, .publish, .restartQueue: false
            }
        }
    }

    private let factory: RoleFactory
    // `@exclusivity(unchecked)`: the run loop is the only code touching this state, one access at a
    // time (roles return effects, they never call back), so the dynamic checks only cost time.
    @exclusivity(unchecked) private var slots: [Slot] = []
    @exclusivity(unchecked) private var scheduler = Scheduler<Action>()
    @exclusivity(unchecked) private var commandsInFlight = Slab<CommandInFlight>()
    @exclusivity(unchecked) private var timerTokens = Slab<TimerToken>()
    @exclusivity(unchecked) private var now: Int64 = 0
    @exclusivity(unchecked) private var lastDurable: Int64 = 0
    @exclusivity(unchecked) private var published: UInt64 = 0
    /// Appended events until every role has heard them: a delivery names its sequence, so an
    /// event is stored once rather than copied (with its strings and arrays retained) into each
    /// role's delivery.
    @exclusivity(unchecked) private var held = HeldEvents()
    /// See `takeReactionBuffer`.
    @exclusivity(unchecked) private var reaction: [Effect] = []
    private var queueIsDown = false
    /// Duplicates answered by engines that crashed since (a restarted engine counts from 0).
    private var earlierDuplicates = 0
    private var heldCommands: [CommandInFlight] = []

    /// A command on its way to the queue, with the last sequence its sender had heard when it sent it
    /// (recorded with it in the log's input record).
    private struct CommandInFlight {
        var command: Command
        var heard: UInt64
    }
    /// Read once: through `environment` and `scenario` every use copied (and retained) them.
    private let choices: ChoiceSource
    private let network: NetworkBehavior
    /// The app-side removal delay (probability, nanoseconds), nil when exploration did not turn it on.
    private let removalDelay: (probability: Double, nanoseconds: Int64)?

    public init(scenario: Scenario, environment: DeterministicEnvironment) throws {
        try scenario.validate()
        self.scenario = scenario
        self.environment = environment
        choices = environment.choices.stream(ChoiceStream.network)
        network = scenario.network
        if let points = scenario.apps.choicePoints, points.removalDelayProbability > 0 {
            removalDelay = (points.removalDelayProbability, Int64(points.removalDelayMilliseconds * 1e6))
        } else {
            removalDelay = nil
        }
        engine = try QueueEngine(catalog: scenario.catalog, storage: environment.storage)
        engine.keepsPayloads = false
        factory = RoleFactory(scenario: scenario, choices: environment.choices, content: environment.content)
        downloader = RoleFactory.Kind.allCases.firstIndex(of: .downloader)  // Slots are made in this order.
        for kind in RoleFactory.Kind.allCases {
            let role = factory.make(kind, name: kind.rawValue)
            slots.append(Slot(kind: kind, role: role, origin: "\(role.name).0"))
        }
    }

    /// Runs until nothing is left to do (or the simulated-time bound), closes the log and reports.
    public func run() throws -> RunReport {
        guard environment.storage.lastSequence == 0 else {
            throw ConfigurationError("the log already holds a run; a deterministic run starts from an empty log", code: .logNotEmpty)
        }
        let header = self.header ?? scenario.header(runtime: "deterministic", startedAtUnixNanoseconds: 0)
        let started = try engine.start(header)
        let first = held.count
        for record in started { held.append(record.recorded) }
        appended(from: first)
        for index in slots.indices {
            var resumed = slots[index].role.resume(now: 0)
            perform(&resumed, slot: index)
        }
        let limit = Int64(scenario.maximumSimulatedSeconds * 1e9)
        var stoppedAtLimit = false
        while let (time, action) = scheduler.next() {
            if stoppedAtEventLimit { break }
            if time > limit {
                stoppedAtLimit = true
                break
            }
            now = time
            try carryOut(action)
            // Content files that cannot be written (`--write-content` on a full disk) stop the run:
            // they are the simulator's own files, not a simulated download failure. Only the
            // downloader's own steps can set it, so only they are followed by the (dynamic) read.
            if let downloader, action.concerns(slot: downloader), let failure = slots[downloader].role.environmentFailure { throw failure }
            if network.crashProbability > 0, choices.chance(.crash, network.crashProbability) { crashOne() }
        }
        try environment.storage.close()
        return RunReport(seed: scenario.seed, totals: engine.projection.totals, pending: engine.projection.pendingCount,
                         violations: engine.checker.violations, violationCount: engine.checker.violationCount,
                         logDirectory: environment.logDescription, simulatedNanoseconds: now,
                         duplicateCommands: earlierDuplicates + engine.duplicates, stoppedAtTimeLimit: stoppedAtLimit)
    }

    /// The downloader's slot: the one role whose environment can fail (its content files).
    private let downloader: Int?

    /// The role hosting the apps (devices), for tests and reports.
    public var apps: AppRole? { slots.first { $0.kind == .apps }?.role as? AppRole }

    private func carryOut(_ action: Action) throws {
        switch action {
        case .command(let commandSlot):
            let inFlight = commandsInFlight.remove(commandSlot)
            guard !queueIsDown else {
                heldCommands.append(inFlight)
                counters.commandsHeldWhileQueueDown += 1
                return
            }
            let first = held.count
            _ = try engine.handle(inFlight.command, timestamp: now, heard: HeardSequences([inFlight.heard])) { held.append($0) }
            appended(from: first)
        case .publish(let first, let last):
            releaseHeard()
            for sequence in first...last {
                published = sequence
                let isFinish = held.isTransactionFinished(sequence)
                for index in slots.indices { send(sequence, isFinish: isFinish, to: index) }
            }
        case .deliver(let sequence, let index):
            guard !slots[index].isDown else { return }
            guard sequence > slots[index].delivered else {
                counters.duplicatesDelivered += 1
                return
            }
            precondition(sequence == slots[index].delivered + 1,
                         "\(slots[index].kind) heard \(sequence) after \(slots[index].delivered): a link lost its order")
            slots[index].delivered = sequence
            let role = slots[index].role
            var effects = takeReactionBuffer()
            // The role reacts to the held event, lent to it without a copy (roles return effects and
            // never call back, so nothing else reads the event meanwhile).
            held.lend(sequence) { role.receive($0, now: now, into: &effects) }
            perform(&effects, slot: index)
            reaction = effects
        case .timer(let tokenSlot, let index, let incarnation):
            let token = timerTokens.remove(tokenSlot)
            guard slots[index].incarnation == incarnation, !slots[index].isDown else { return }
            var effects = takeReactionBuffer()
            slots[index].role.timerFired(token, now: now, into: &effects)
            perform(&effects, slot: index)
            reaction = effects
        case .restart(let index):
            try restart(index)
        case .restartQueue:
            earlierDuplicates += engine.duplicates
            engine = try QueueEngine(catalog: scenario.catalog, storage: environment.storage)
            engine.keepsPayloads = false
            queueIsDown = false
            // Retried in the order they were sent: a sender's link keeps its order.
            var arrival = now
            for inFlight in heldCommands {
                arrival = max(arrival, now + network.deliveryLatency.sampleNanoseconds(choices, .networkDelay))
                scheduleCommand(inFlight.command, heard: inFlight.heard, arrival: arrival)
            }
            heldCommands.removeAll()
        }
    }

    /// The reused buffer a role's reaction is written into, emptied (its capacity kept): a
    /// reaction costs no array of its own. Given back (`reaction = effects`) once carried out.
    @inline(__always)
    private func takeReactionBuffer() -> [Effect] {
        var effects: [Effect] = []
        swap(&effects, &reaction)
        // Most reactions are empty: emptying an empty array still goes through `replaceSubrange`.
        if !effects.isEmpty { effects.removeAll(keepingCapacity: true) }
        return effects
    }

    /// The events the engine added to `held` from position `start` on become durable after the
    /// log's latency (in append order), then are published.
    private func appended(from start: Int) {
        guard start < held.count else { return }
        let first = held.firstSequence + UInt64(start)
        let last = held.firstSequence + UInt64(held.count - 1)
        if let eventAppended {
            for sequence in first...last { held.lend(sequence, eventAppended) }
        }
        if last > eventLimit { stoppedAtEventLimit = true }
        let durable = max(lastDurable, now + network.durabilityLatency.sampleNanoseconds(choices, .durabilityDelay))
        lastDurable = durable
        scheduler.schedule(at: durable, .publish(first: first, last: last))
    }

    /// Forgets the events every role has heard (a role that is down holds them until it is back).
    private func releaseHeard() {
        var heardByAll = UInt64.max
        for index in slots.indices { heardByAll = min(heardByAll, slots[index].delivered) }
        held.release(through: heardByAll)
    }

    private func send(_ sequence: UInt64, isFinish: Bool, to index: Int) {
        var arrival = max(now + network.deliveryLatency.sampleNanoseconds(choices, .networkDelay), slots[index].lastEventArrival)
        if network.lossProbability > 0, choices.chance(.networkLoss, network.lossProbability) {
            // The subscriber notices the gap at the next heartbeat and fetches it; what follows waits.
            counters.eventsLost += 1
            arrival += Int64(network.catchUpMilliseconds * 1e6)
        }
        if isFinish, slots[index].kind == .apps, let removalDelay, choices.chance(.removalDelay, removalDelay.probability) {
            // The app hears `removedTransactions` late (and, the link keeping its order, what follows too).
            arrival += removalDelay.nanoseconds
        }
        slots[index].lastEventArrival = arrival
        scheduler.schedule(at: arrival, .deliver(sequence: sequence, slot: index))
        if network.duplicateProbability > 0, choices.chance(.networkDuplicate, network.duplicateProbability) {
            let copy = arrival + network.deliveryLatency.sampleNanoseconds(choices, .networkDelay)
            slots[index].lastEventArrival = copy
            scheduler.schedule(at: copy, .deliver(sequence: sequence, slot: index))
        }
    }

    /// Carries out a reaction and empties `effects` (its capacity kept): each effect is moved out
    /// (reversed, then `popLast`, in order), so a command moves into the slab of commands in flight
    /// instead of being copied out of the array, every string of its body retained, and destroyed
    /// in it afterwards.
    private func perform(_ effects: inout [Effect], slot index: Int) {
        effects.reverseFew()
        while let effect = effects.popLast() {
            switch effect {
            case .send(let body):
                slots[index].commandNumber += 1
                let command = Command(id: CommandID(origin: slots[index].origin, number: slots[index].commandNumber), body: body)
                let arrival = max(now + network.deliveryLatency.sampleNanoseconds(choices, .networkDelay), slots[index].lastCommandArrival)
                slots[index].lastCommandArrival = arrival
                // Drawn before the original is scheduled (scheduling draws nothing, so the draws and
                // the scheduler's order are as before), so that only a duplicated command is copied.
                let heard = slots[index].delivered
                if network.duplicateProbability > 0, choices.chance(.networkDuplicate, network.duplicateProbability) {
                    scheduleCommand(command, heard: heard, arrival: arrival)
                    // A retry whose original did arrive: the engine must answer it "duplicate".
                    let copy = arrival + network.deliveryLatency.sampleNanoseconds(choices, .networkDelay)
                    slots[index].lastCommandArrival = copy
                    scheduleCommand(command, heard: heard, arrival: copy)
                } else {
                    scheduleCommand(command, heard: heard, arrival: arrival)
                }
            case .timer(let delay, let token):
                let tokenSlot = timerTokens.insert(token)
                scheduler.schedule(at: now + max(0, delay), .timer(tokenSlot, slot: index, incarnation: slots[index].incarnation))
            }
        }
    }

    private func scheduleCommand(_ command: consuming Command, heard: UInt64, arrival: Int64) {
        let commandSlot = commandsInFlight.insert(CommandInFlight(command: command, heard: heard))
        scheduler.schedule(at: arrival, .command(commandSlot))
    }

    /// One role (or the queue) goes down; it comes back after the restart latency.
    private func crashOne() {
        let target = choices.index(.crash, count: slots.count + 1)
        let back = now + max(1, network.restartLatency.sampleNanoseconds(choices))
        if target == slots.count {
            guard !queueIsDown else { return }
            queueIsDown = true
            counters.crashes += 1
            scheduler.schedule(at: back, .restartQueue)
            return
        }
        guard !slots[target].isDown else { return }
        slots[target].isDown = true
        slots[target].incarnation += 1
        slots[target].origin = "\(slots[target].role.name).\(slots[target].incarnation)"
        counters.crashes += 1
        scheduler.schedule(at: back, .restart(slot: target))
    }

    /// A new instance reads the published log silently, then takes up what it must.
    private func restart(_ index: Int) throws {
        let role = factory.make(slots[index].kind, name: slots[index].kind.rawValue)
        let through = published
        try environment.storage.forEachRecord(from: 1) { sequence, timestamp, payload in
            guard sequence <= through else { return }
            role.catchUp(try LogProjection.decode(sequence: sequence, timestamp: timestamp, payload: payload))
        }
        slots[index].role = role
        slots[index].origin = "\(role.name).\(slots[index].incarnation)"
        slots[index].isDown = false
        slots[index].delivered = through
        slots[index].commandNumber = 0
        var resumed = role.resume(now: now)
        perform(&resumed, slot: index)
    }
}

/// The appended events not yet heard by every role, in sequence order, in one ring of memory
/// that grows to the most held at once: no allocation per event. An event is passed to a role
/// by moving it out of its memory and back (`lend`: bits moved, nothing retained); read from
/// memory that someone could change meanwhile, it would be copied for the call, every string and
/// array in it retained and then released. The run loop is the only reader, and it reads nothing
/// else while a role reacts.
private struct HeldEvents: ~Copyable {
    private var events: UnsafeMutablePointer<RecordedEvent>
    /// Whether each is a `transactionFinished` (the removal delay applies), so that publishing
    /// does not copy the event to look at it.
    private var finishes: UnsafeMutablePointer<Bool>
    /// A power of two, so that a position in the ring is a mask, not a division.
    private var capacity: Int
    /// Where the first held event is in the ring.
    private var head = 0
    private(set) var count = 0
    /// The sequence of the first held event (the engine's sequences follow one another).
    private(set) var firstSequence: UInt64 = 1

    init() {
        capacity = 64
        events = .allocate(capacity: capacity)
        finishes = .allocate(capacity: capacity)
    }

    deinit {
        for offset in 0..<count { (events + (head + offset) & (capacity - 1)).deinitialize(count: 1) }
        events.deallocate()
        finishes.deallocate()
    }

    @inline(__always)
    private func position(_ sequence: UInt64) -> Int {
        precondition(sequence >= firstSequence && sequence - firstSequence < UInt64(count),
                     "event \(sequence) is not held (held: \(firstSequence) and \(count) after it)")
        return (head + Int(sequence - firstSequence)) & (capacity - 1)
    }

    mutating func append(_ recorded: consuming RecordedEvent) {
        precondition(recorded.sequence == firstSequence + UInt64(count),
                     "event \(recorded.sequence) appended after \(firstSequence + UInt64(count) - 1)")
        if count == capacity { grow() }
        let index = (head + count) & (capacity - 1)
        var isFinish = false
        if case .transactionFinished = recorded.event { isFinish = true }
        finishes[index] = isFinish
        (events + index).initialize(to: recorded)
        count += 1
    }

    func isTransactionFinished(_ sequence: UInt64) -> Bool { finishes[position(sequence)] }

    @inline(__always)
    func lend(_ sequence: UInt64, _ body: (RecordedEvent) -> Void) {
        let slot = events + position(sequence)
        let event = slot.move()
        body(event)
        slot.initialize(to: consume event)
    }

    /// Forgets the events through `sequence` (those before the first held are long gone).
    mutating func release(through sequence: UInt64) {
        guard sequence >= firstSequence else { return }
        let released = min(Int(sequence - firstSequence + 1), count)
        for _ in 0..<released {
            (events + head).deinitialize(count: 1)
            head = (head + 1) & (capacity - 1)
        }
        count -= released
        firstSequence += UInt64(released)
        if count == 0 { head = 0 }
    }

    /// Twice the room, the held events moved (not copied) to the front of the new ring.
    private mutating func grow() {
        let larger = capacity * 2
        let moved = UnsafeMutablePointer<RecordedEvent>.allocate(capacity: larger)
        let movedFinishes = UnsafeMutablePointer<Bool>.allocate(capacity: larger)
        for offset in 0..<count {
            let from = (head + offset) & (capacity - 1)
            (moved + offset).moveInitialize(from: events + from, count: 1)
            movedFinishes[offset] = finishes[from]
        }
        events.deallocate()
        finishes.deallocate()
        events = moved
        finishes = movedFinishes
        capacity = larger
        head = 0
    }
}
