import StoreKitModel
import StoreKitRoles

/// How the explorer picks the next schedule (the next choice sequence).
public enum ExplorationStrategy: Sendable, Hashable, CustomStringConvertible {
    /// Every choice drawn from the schedule's seed, with the scenario's probabilities.
    case random
    /// Probabilistic concurrency testing, over recorded choices: every choice takes its simplest
    /// value (0) except at `depth` positions drawn uniformly over the schedule's length, where it
    /// is drawn at random. Bugs that need only a few unusual choices are found with a probability
    /// that depends on the depth and the length, not on how rare each choice is.
    case pct(depth: Int)
    /// Every schedule of the scenario with at most `depth` unusual choices, one value per class
    /// of outcomes (`ExhaustiveSpace`), with states hashed so a state seen before is not
    /// branched from again; it says when the space is exhausted.
    case exhaustive(depth: Int)

    /// `exhaustive` with its default bound: two unusual choices per schedule.
    public static let exhaustive = ExplorationStrategy.exhaustive(depth: 2)

    public var description: String {
        switch self {
        case .random: "random"
        case .pct(let depth): "pct (depth \(depth))"
        case .exhaustive(let depth): "exhaustive (depth \(depth))"
        }
    }
}

/// Records every value another source gave, so a schedule's choices can be written down and shrunk.
/// Generic over the source it wraps: the runtime's draw reaches it through one dynamic call
/// (`ChoiceSource`), and it calls the wrapped source directly, not through a second one.
final class RecordingChoices<Inner: ChoiceSource>: ChoiceSource {
    let inner: Inner
    // Unchecked exclusivity: `choose` is the only writer, never re-entered (several draws per event).
    @exclusivity(unchecked) private(set) var values: [UInt64] = []
    /// Where each value came from (its source and kind), when `recordsKeys`: what shrinking
    /// addresses choices by. Off in the search, whose schedules need only the values.
    let recordsKeys: Bool
    @exclusivity(unchecked) private(set) var keys: [ChoiceKey] = []

    init(_ inner: Inner, recordsKeys: Bool = false) {
        self.inner = inner
        self.recordsKeys = recordsKeys
        values.reserveCapacity(256)
    }

    func choose(_ kind: ChoiceKind, below bound: UInt64) -> UInt64 {
        let value = inner.choose(kind, below: bound)
        values.append(value)
        if recordsKeys { keys.append(ChoiceKey(stream: "", kind: kind)) }
        return value
    }

    /// The wrapped source's stream, recorded here too: one sequence in execution order. Recording
    /// keys, each stream is named even when the wrapped source is one sequence (a replay).
    func stream(_ name: String) -> ChoiceSource {
        let innerStream = inner.stream(name)
        if innerStream === inner && !recordsKeys { return self }
        if let existing = streams[name] { return existing }
        let made = RecordedStream(innerStream, name: name, into: self)
        streams[name] = made
        return made
    }

    private var streams: [String: RecordedStream] = [:]

    fileprivate func note(_ value: UInt64, _ kind: ChoiceKind, stream: String) {
        values.append(value)
        if recordsKeys { keys.append(ChoiceKey(stream: stream, kind: kind)) }
    }

    /// One stream of the wrapped source, recorded in the sequence of the source that made it.
    private final class RecordedStream: ChoiceSource {
        let inner: ChoiceSource
        let name: String
        unowned let recorder: RecordingChoices

        init(_ inner: ChoiceSource, name: String, into recorder: RecordingChoices) {
            self.inner = inner
            self.name = name
            self.recorder = recorder
        }

        func choose(_ kind: ChoiceKind, below bound: UInt64) -> UInt64 {
            let value = inner.choose(kind, below: bound)
            recorder.note(value, kind, stream: name)
            return value
        }

        func stream(_ name: String) -> ChoiceSource { recorder.stream(name) }
    }
}

/// Where a choice comes from: the source that drew it (its stream's name, "" for draws not made
/// through a stream) and what it decides. Shrinking addresses choices by it, not by position.
struct ChoiceKey: Sendable, Hashable {
    var stream: String
    var kind: ChoiceKind
}

/// One choice of a schedule being shrunk: the index of its `ChoiceKey` in the shrink's table, and its value.
struct ChoiceEntry: Sendable, Hashable {
    var key: Int
    var value: UInt64
}

/// Choices addressed by where they come from: each source and kind (`ChoiceKey`) reads its own
/// list, in order, so removing one choice moves only the later choices of the same source and
/// kind (the third purchase's product becomes the second's; no restore, kill or delay moves).
/// Past a list's end, or where a value does not fit the bound asked for now, the simplest
/// choice (0) is taken, as with `ReplayedChoices`.
final class KeyedChoices: ChoiceSource {
    private var lists: [ChoiceKey: [UInt64]] = [:]
    private var positions: [ChoiceKey: Int] = [:]
    private var streams: [String: KeyedStream] = [:]

    init(_ entries: [ChoiceEntry], keys: [ChoiceKey]) {
        for entry in entries { lists[keys[entry.key], default: []].append(entry.value) }
    }

    func choose(_ kind: ChoiceKind, below bound: UInt64) -> UInt64 {
        take(ChoiceKey(stream: "", kind: kind), below: bound)
    }

    fileprivate func take(_ key: ChoiceKey, below bound: UInt64) -> UInt64 {
        precondition(bound >= 1, "a choice needs at least one option")
        guard let list = lists[key] else { return 0 }
        let position = positions[key, default: 0]
        positions[key] = position + 1
        guard position < list.count, list[position] < bound else { return 0 }
        return list[position]
    }

    func stream(_ name: String) -> ChoiceSource {
        if let existing = streams[name] { return existing }
        let made = KeyedStream(name: name, root: self)
        streams[name] = made
        return made
    }

    private final class KeyedStream: ChoiceSource {
        let name: String
        unowned let root: KeyedChoices

        init(name: String, root: KeyedChoices) {
            self.name = name
            self.root = root
        }

        func choose(_ kind: ChoiceKind, below bound: UInt64) -> UInt64 { root.take(ChoiceKey(stream: name, kind: kind), below: bound) }
        func stream(_ name: String) -> ChoiceSource { root.stream(name) }
    }
}

/// PCT over choices: zero everywhere except at `depth` positions below `length`.
final class PCTChoices: ChoiceSource {
    @exclusivity(unchecked) private var random: SeededRandom
    /// The change points, ascending and distinct (drawn as a set, then sorted): draws come in
    /// position order, so each draw compares its position with the next point only, instead
    /// of hashing it into a set.
    private let changePoints: [Int]
    @exclusivity(unchecked) private var nextPoint = 0
    @exclusivity(unchecked) private var position = 0

    init(seed: UInt64, depth: Int, length: Int) {
        random = SeededRandom(seed: seed, stream: "pct")
        var points: Set<Int> = []
        let span = max(1, length)
        for _ in 0..<max(0, depth) { points.insert(Int(random.next() % UInt64(span))) }
        changePoints = points.sorted()
    }

    func choose(_ kind: ChoiceKind, below bound: UInt64) -> UInt64 {
        let current = position
        position += 1
        guard nextPoint < changePoints.count, changePoints[nextPoint] == current else { return 0 }
        nextPoint += 1
        guard bound > 1 else { return 0 }
        return random.next().multipliedFullWidth(by: bound).high
    }
}

/// What the exhaustive search branches over, and its bound.
///
/// Values of one draw that drive the run the same way form one class, and one value per class
/// is tried: a unit draw against probabilities takes one value per outcome band of the
/// scenario (purchased, deferred, cancelled, failed; a kill or not), a product one per
/// (kind, number of hosted contents), small index draws (observer orders, attach orders,
/// where an app is killed among its commands) every value. Timing and quantities are held at
/// their simplest. A schedule makes at most `depth` unusual (non-zero) choices: the space is
/// every schedule of the scenario with at most `depth` things out of the ordinary, as `pct`
/// samples it.
public struct ExhaustiveSpace: Sendable, Hashable {
    /// Most unusual (non-zero) choices in one schedule.
    public var depth: Int
    /// Per kind of unit draw, the first value of each outcome band (0 first).
    var unitValues: [ChoiceKind: [UInt64]]
    /// One product index per (kind, number of hosted contents), in catalog order.
    var productValues: [UInt64]
    var productCount: UInt64

    /// Choices about time and amounts only: held at their simplest, so the search is over decisions.
    static let heldKinds: Set<ChoiceKind> = [.latency, .networkDelay, .durabilityDelay, .transferRate, .quantity, .appWorkDelay, .retryJitter]
    /// Most values tried for a small index draw (all of them below this bound).
    static let maximumIndexValues: UInt64 = 8

    public init(scenario: Scenario, depth: Int) {
        self.depth = max(0, depth)
        /// The smallest unit draw `u` (as `ChoiceSource.unit` makes it) for which `holds(u)`,
        /// found by bisection so that rounding cannot put it in the wrong band.
        func firstUnitValue(where holds: (Double) -> Bool) -> UInt64 {
            var low: UInt64 = 0
            var high = unitChoiceBound - 1
            while low < high {
                let middle = low + (high - low) / 2
                if holds(Double(middle) * 0x1.0p-53) { high = middle } else { low = middle + 1 }
            }
            return low
        }
        // `chance(p)` is true when `1 - u <= p` (Choices.swift).
        func chance(_ probability: Double) -> [UInt64] {
            probability > 0 && probability < 1 ? [0, firstUnitValue { 1 - $0 <= probability }] : [0]
        }
        let store = scenario.store
        let purchaseShare = 1 - store.failureProbability - store.cancellationProbability - store.deferralProbability
        var outcomes: [UInt64] = [0]
        for edge in [purchaseShare, purchaseShare + store.deferralProbability,
                     purchaseShare + store.deferralProbability + store.cancellationProbability] where edge > 0 && edge < 1 {
            let value = firstUnitValue { $0 >= edge }
            if value > outcomes.last! { outcomes.append(value) }
        }
        let points = scenario.apps.choicePoints ?? ChoicePoints()
        unitValues = [
            .storeOutcome: outcomes,
            .approval: chance(store.approvalProbability),
            .restoreOutcome: chance(store.restoreFailureProbability),
            .userRestore: chance(scenario.apps.restoreProbability),
            .userRelaunch: chance(scenario.apps.relaunchProbability),
            .appKill: chance(points.killProbability),
            .duplicateDelivery: chance(points.duplicateDeliveryProbability),
            .removalDelay: chance(points.removalDelayProbability),
            .appWorkFailure: chance(points.asynchronousWorkFailureProbability ?? 0),
            .downloadFailure: chance(scenario.downloader.failureProbabilityPerTick),
            .crash: chance(scenario.network.crashProbability),
            .networkLoss: chance(scenario.network.lossProbability),
            .networkDuplicate: chance(scenario.network.duplicateProbability),
            .stall: chance(scenario.network.stallProbability ?? 0),
            .partition: chance(scenario.network.partitionProbability ?? 0),
        ]
        struct Shape: Hashable { var kind: ProductKind; var contents: Int }
        var shapes: Set<Shape> = []
        productValues = scenario.catalog.products.enumerated().compactMap { index, product in
            shapes.insert(Shape(kind: product.kind, contents: product.hostedContent.count)).inserted ? UInt64(index) : nil
        }
        productCount = UInt64(scenario.catalog.products.count)
    }

    /// The values tried for one draw, simplest first.
    public func values(_ kind: ChoiceKind, bound: UInt64) -> [UInt64] {
        if bound <= 1 || Self.heldKinds.contains(kind) { return [0] }
        if kind == .product && bound == productCount { return productValues }
        if bound == unitChoiceBound { return unitValues[kind] ?? [0, bound / 4, bound / 2, bound / 4 * 3] }
        return Array(0..<min(bound, Self.maximumIndexValues))
    }
}

/// One schedule of the exhaustive search: follows `prefix`, then takes 0; notes at each draw
/// the values it could take and the state it was drawn in.
final class ExhaustiveChoices: ChoiceSource {
    struct Draw {
        var values: [UInt64]
        var state: UInt64
    }

    let prefix: [UInt64]
    let space: ExhaustiveSpace
    private(set) var draws: [Draw] = []
    private let storage: HashingLogStorage

    init(prefix: [UInt64], space: ExhaustiveSpace, storage: HashingLogStorage) {
        self.prefix = prefix
        self.space = space
        self.storage = storage
    }

    private var lastRecords: UInt64 = 0
    private var drawsSinceAppend: UInt64 = 0

    /// The state a draw is made in: the abstract log so far (`HashingLogStorage`), how many
    /// draws were made since the log last grew (where the other roles are in reacting to it),
    /// and the kind.
    private func fingerprint(_ kind: ChoiceKind) -> UInt64 {
        let records = storage.lastSequence
        if records == lastRecords { drawsSinceAppend += 1 } else { lastRecords = records; drawsSinceAppend = 0 }
        var hash = storage.hash
        for part in [drawsSinceAppend, UInt64(kind.stableNumber)] { hash = (hash ^ part) &* 0x0000_0100_0000_01B3 }
        return hash
    }

    func choose(_ kind: ChoiceKind, below bound: UInt64) -> UInt64 {
        let position = draws.count
        draws.append(Draw(values: space.values(kind, bound: bound), state: fingerprint(kind)))
        if position < prefix.count, prefix[position] < bound { return prefix[position] }
        return 0
    }
}

extension ChoiceKind {
    /// A small number per kind, the same in every process (Swift's hashValue is not).
    var stableNumber: Int { ChoiceKind.allCases.firstIndex(of: self) ?? 0 }
}
