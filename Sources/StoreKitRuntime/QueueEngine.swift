import StoreKitModel

/// An appended event with the bytes that were logged (and are published unchanged).
public struct EngineRecord: Sendable, Hashable {
    public var recorded: RecordedEvent
    public var payload: [UInt8]

    public init(recorded: RecordedEvent, payload: [UInt8]) {
        self.recorded = recorded
        self.payload = payload
    }
}

/// What the engine did with one command.
public struct EngineOutcome: Sendable, Hashable {
    public enum Decision: Sendable, Hashable {
        case accepted
        /// Refused; the refusal (with the whole command) is the one appended event.
        case rejected(Rejection)
        /// Applied before; nothing appended.
        case duplicate
    }

    public var decision: Decision
    /// The command's events, ascending; empty for a duplicate or a harmless no-op.
    public var records: [EngineRecord]
    /// The last sequence the command produced (a duplicate: what the original produced, or the log's last for an id too old to be remembered; a no-op: the log's last).
    public var lastSequence: UInt64
}

/// The one queue engine: decides each command against the projection, appends all of its
/// events as one atomic unit, applies them and checks the invariants on every event.
/// Every runtime (the live queue process, the deterministic runtime, replay, exploration)
/// and every test of the queue's rules goes through it; nothing else writes the log.
public final class QueueEngine {
    public let catalog: Catalog
    public let storage: LogStorage
    // `@exclusivity(unchecked)`: only the engine's own methods change these, never re-entered, so
    // the dynamic exclusivity checks (a few per event) only cost time.
    @exclusivity(unchecked) public private(set) var projection: QueueProjection
    @exclusivity(unchecked) public private(set) var checker = InvariantChecker()
    @exclusivity(unchecked) public private(set) var duplicates = 0
    /// Whether each `EngineRecord` carries its payload bytes: the live queue publishes them and
    /// replay compares them; the deterministic runtime needs neither and saves a copy per event.
    public var keepsPayloads = true
    /// Whether each command's unit begins with its input record: the command as accepted and what its
    /// sender had heard (docs/log-format.md, "Input records"). Every log a run keeps has them; the
    /// benches that time the engine alone may leave them out.
    public var recordsInputs = true
    /// Whether the `InvariantChecker` runs on every event. The live queue turns it off: nothing reads
    /// its checker (`sksim run` reports the violations it folds from the log), and it cost about a tenth
    /// of the queue's CPU per lifecycle (docs/performance.md). The state machine check always runs.
    public let checksInvariants: Bool
    @exclusivity(unchecked) private var lastTimestamp: Int64 = 0
    /// A command's events are encoded one after another into this reused buffer.
    @exclusivity(unchecked) private var encoder = BinaryWriter(capacity: 1_024)
    @exclusivity(unchecked) private var ends: [Int] = []
    /// A command's input record is encoded into this reused buffer.
    @exclusivity(unchecked) private var inputEncoder = BinaryWriter(capacity: 256)
    /// A command's recorded events between encoding and folding (see `append(_:commandID:timestamp:handing:)`).
    @exclusivity(unchecked) private var unit: [RecordedEvent] = []

    /// Rebuilds the projection and the invariant check from what `storage` holds.
    public init(catalog: Catalog, storage: LogStorage, checksInvariants: Bool = true) throws {
        self.catalog = catalog
        self.storage = storage
        self.checksInvariants = checksInvariants
        var projection = QueueProjection()
        var checker = InvariantChecker()
        var lastTimestamp: Int64 = 0
        try storage.forEachRecordIncludingInputs { record in
            if record.isInput {
                // A command that changed nothing left its input alone: the rebuilt queue knows its number
                // too, so the sender's next command does not look as if it skipped ahead.
                if record.endsUnit {
                    switch try RecordedInput.decode(record.payload).handled {
                    case .command(let command): projection.noteNoOperation(command.id)
                    case .refused(let id): projection.noteNoOperation(id)
                    case .duplicate: break
                    }
                }
                lastTimestamp = max(lastTimestamp, record.timestamp)
                return
            }
            let recorded = try LogProjection.decode(sequence: record.sequence, timestamp: record.timestamp, payload: record.payload)
            projection.apply(recorded)
            if checksInvariants { checker.check(recorded) }
            lastTimestamp = record.timestamp
        }
        self.projection = projection
        self.checker = checker
        self.lastTimestamp = lastTimestamp
    }

    /// The run's header, once the first record is written.
    public var header: RunHeader? { projection.header }

    /// Writes the run's first record when the log is empty; returns it (nothing when the log
    /// already holds a run).
    public func start(_ header: RunHeader) throws -> [EngineRecord] {
        guard storage.lastSequence == 0 else { return [] }
        inputEncoder.removeAll()  // The header answers no command.
        return try append([.runStarted(header)], commandID: nil, timestamp: 0)
    }

    /// Notes a command refused before it was decided (a live queue's bounds, its sender's roles) as
    /// handled, so its sender's next command does not look as if it skipped ahead of it, and leaves
    /// its mark (its id alone, log format 3) so that a restarted queue knows the number too.
    public func noteRefused(_ id: CommandID, heard: HeardSequences = .unknown, timestamp: Int64) throws {
        projection.noteNoOperation(id)
        try appendInputAlone(.refused(id), heard: heard, timestamp: timestamp)
    }

    /// Decides, appends and applies one command. `timestamp` is the runtime's time since the
    /// run started; the log's timestamps never go backwards even if that clock does. `heard` is
    /// what the command's sender had heard when it sent it (the endpoint or runtime passes it on);
    /// it is recorded with the command in its unit's input record.
    public func handle(_ command: Command, timestamp: Int64, heard: HeardSequences = .unknown) throws -> EngineOutcome {
        switch Self.decide(command, catalog: catalog, against: &projection) {
        case .duplicate:
            duplicates += 1
            try appendInputAlone(.duplicate(command.id), heard: heard, timestamp: timestamp)
            // What the original produced (wire-format.md); an id older than the window was published long ago.
            return EngineOutcome(decision: .duplicate, records: [],
                                 lastSequence: projection.recentCommands.lastSequence(of: command.id) ?? projection.lastSequence)
        case .accept(let events):
            if events.isEmpty {
                projection.noteNoOperation(command.id)
                try appendInputAlone(.command(command), heard: heard, timestamp: timestamp)
                return EngineOutcome(decision: .accepted, records: [], lastSequence: projection.lastSequence)
            }
            encodeInput(.command(command), heard: heard)
            let records = try append(events, commandID: command.id, timestamp: timestamp)
            return EngineOutcome(decision: .accepted, records: records, lastSequence: projection.lastSequence)
        case .reject(let rejection):
            encodeInput(.command(command), heard: heard)
            let records = try append([QueueProjection.rejectionEvent(command, rejection)], commandID: command.id, timestamp: timestamp)
            return EngineOutcome(decision: .rejected(rejection), records: records, lastSequence: projection.lastSequence)
        }
    }

    /// Decides, appends and applies one command as `handle(_:timestamp:)` does, handing each of its
    /// events to `take` (in order, once folded and checked) rather than returning records: the
    /// deterministic runtime keeps every event once, so a command costs no array of its own and
    /// each event is copied once (out of the decision) and then moved.
    public func handle(_ command: Command, timestamp: Int64, heard: HeardSequences = .unknown,
                       handing take: (consuming RecordedEvent) -> Void) throws -> EngineOutcome.Decision {
        switch Self.decide(command, catalog: catalog, against: &projection) {
        case .duplicate:
            duplicates += 1
            try appendInputAlone(.duplicate(command.id), heard: heard, timestamp: timestamp)
            return .duplicate
        case .accept(let accepted):
            if accepted.isEmpty {
                projection.noteNoOperation(command.id)
                try appendInputAlone(.command(command), heard: heard, timestamp: timestamp)
                return .accepted
            }
            encodeInput(.command(command), heard: heard)
            try append(accepted, commandID: command.id, timestamp: timestamp, handing: take)
            return .accepted
        case .reject(let rejection):
            encodeInput(.command(command), heard: heard)
            try append([QueueProjection.rejectionEvent(command, rejection)], commandID: command.id, timestamp: timestamp, handing: take)
            return .rejected(rejection)
        }
    }

    /// Encodes the next unit's input record into `inputEncoder` (emptied when inputs are not recorded).
    private func encodeInput(_ handled: RecordedInput.Handled, heard: HeardSequences) {
        inputEncoder.removeAll()
        if recordsInputs { RecordedInput.encode(handled, heard: heard, into: &inputEncoder) }
    }

    /// A command that changed nothing (a duplicate, a no-op) leaves its input alone in a unit of its
    /// own: the log holds every command the queue handled, in the order it handled them.
    private func appendInputAlone(_ handled: RecordedInput.Handled, heard: HeardSequences, timestamp: Int64) throws {
        guard recordsInputs else { return }
        encodeInput(handled, heard: heard)
        let time = max(timestamp, lastTimestamp)
        _ = try inputEncoder.bytes.withUnsafeBytes { input in
            try storage.appendUnit(input: input, bytes: UnsafeRawBufferPointer(start: nil, count: 0), ends: [], timestamp: time)
        }
        lastTimestamp = time
    }

    /// The last unit's events as encoded (event k ends at `ends[k]`), valid until the next command that
    /// appends: a replay compares them with its recording's where they are.
    public func withLastUnitBytes<Result>(_ body: (_ bytes: UnsafeRawBufferPointer, _ ends: [Int]) throws -> Result) rethrows -> Result {
        try encoder.bytes.withUnsafeBytes { bytes in try body(bytes, ends) }
    }

    /// Hands `body` the projection without copying it. Passed out of the class as an argument
    /// (`engine.projection`), it is copied with every field retained: once per command where the
    /// queue's admission reads it.
    public func withProjection<Result>(_ body: (borrowing QueueProjection) throws -> Result) rethrows -> Result {
        try Self.lend(&projection, to: body)
    }

    /// Reads through an exclusive (inout) access, which borrows the stored property in place.
    private static func lend<Result>(_ projection: inout QueueProjection, to body: (borrowing QueueProjection) throws -> Result) rethrows -> Result {
        try body(projection)
    }

    /// Decides through an exclusive (inout) access: called on the stored property directly,
    /// the class would copy the whole projection (retaining every field) for the call.
    private static func decide(_ command: Command, catalog: Catalog, against projection: inout QueueProjection) -> Decision {
        projection.decide(command, catalog: catalog)
    }

    private func append(_ events: [Event], commandID: CommandID?, timestamp: Int64) throws -> [EngineRecord] {
        var records: [EngineRecord] = []
        records.reserveCapacity(events.count)
        try append(events, commandID: commandID, timestamp: timestamp) { recorded in
            // The unit's bytes are still in `encoder`: event k's end at `ends[k]`.
            let offset = records.count
            // Copied through a pointer: `[UInt8](encoder.bytes[range])` of a range that covers the whole
            // array (a command of one event, most of them) shares the encoder's buffer instead of copying
            // it, so every payload held the encoder's whole capacity (1 KiB or more) and the next
            // `removeAll(keepingCapacity:)` allocated the encoder a new one: a live queue grew by about
            // 14 MB/s under load (docs/performance.md, "The payload that kept the encoder's buffer").
            let payload = keepsPayloads
                ? encoder.bytes.withUnsafeBufferPointer { Array(UnsafeBufferPointer(rebasing: $0[(offset == 0 ? 0 : ends[offset - 1])..<ends[offset]])) }
                : []
            records.append(EngineRecord(recorded: recorded, payload: payload))
        }
        return records
    }

    /// Encodes `events` into one unit (after the input in `inputEncoder`, if any), appends it, then
    /// folds and checks each event and hands it to `take`. Each event is copied once, out of `events`, and encoded from that copy; the copies
    /// wait in `unit` (reused) and are moved out of it in order. Reading an element of an array, even through a buffer pointer,
    /// copies it (every string and array retained), so the events are never read back out of one.
    private func append(_ events: consuming [Event], commandID: CommandID?, timestamp: Int64,
                        handing take: (consuming RecordedEvent) -> Void) throws {
        guard !events.isEmpty else { return }
        let time = max(timestamp, lastTimestamp)
        let first = projection.lastSequence + 1
        encoder.removeAll()
        ends.removeAll(keepingCapacity: true)
        // The decision's events are moved out (reversed, then `popLast`), not copied: a copy retains
        // every string of an event, and the array's end released them all again.
        var pending = events
        pending.reverseFew()
        var sequence = first
        while let event = pending.popLast() {
            let recorded = RecordedEvent(sequence: sequence, timestamp: time, commandID: commandID, event: event)
            EventCodec.encode(recorded.event, commandID: commandID, into: &encoder)
            ends.append(encoder.bytes.count)
            unit.append(recorded)
            sequence += 1
        }
        let appended: UInt64
        do {
            if inputEncoder.bytes.isEmpty {
                appended = try encoder.bytes.withUnsafeBytes { bytes in try storage.appendUnit(bytes: bytes, ends: ends, timestamp: time) }
            } else {
                appended = try inputEncoder.bytes.withUnsafeBytes { input in
                    try encoder.bytes.withUnsafeBytes { bytes in
                        try storage.appendUnit(input: input, bytes: bytes, ends: ends, timestamp: time)
                    }
                }
                inputEncoder.removeAll()
            }
        } catch {
            unit.removeAll(keepingCapacity: true)
            throw error
        }
        precondition(appended == first, "the log gave sequence \(appended) after \(first - 1): something else wrote this partition")
        lastTimestamp = time
        // Reversed (swaps move, they do not copy), so that `popLast` moves them out in log order.
        unit.reverseFew()
        while let recorded = unit.popLast() {
            // The state machine (QueueTransitions.swift): `decide` made this event, so an event that
            // breaks it is a bug in the engine and stops it at once. Observers' mistakes are the
            // checker's to report.
            // Through `lend`: a method called on the class's stored projection copies it first.
            if let broken = Self.lend(&projection, to: { $0.brokenTransition(recorded.event) }) {
                preconditionFailure("event \(recorded.sequence) (\(recorded.event.name)) breaks the queue's state machine: \(broken)")
            }
            projection.apply(recorded)
            precondition(projection.lastSequence == recorded.sequence, "the projection did not advance to event \(recorded.sequence)")
            if checksInvariants { checker.check(recorded) }
            take(recorded)
        }
    }
}

extension Array {
    /// Reverses in place. Most of what the engine and the runtime reverse (a command's events, a
    /// reaction's effects) holds one element or two, which the generic `reverse` still costs a call for.
    @inlinable
    public mutating func reverseFew() {
        switch count {
        case 0, 1: break
        case 2: swapAt(0, 1)
        default: reverse()
        }
    }
}
