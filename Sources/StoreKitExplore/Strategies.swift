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
    /// Every schedule of the scenario over the decision kinds, timing held at its simplest, with
    /// states hashed so a state seen before is not branched from again.
    case exhaustive

    public var description: String {
        switch self {
        case .random: "random"
        case .pct(let depth): "pct (depth \(depth))"
        case .exhaustive: "exhaustive"
        }
    }
}

/// Records every value another source gave, so a schedule's choices can be written down and shrunk.
final class RecordingChoices: ChoiceSource {
    let inner: ChoiceSource
    private(set) var values: [UInt64] = []

    init(_ inner: ChoiceSource) {
        self.inner = inner
        values.reserveCapacity(256)
    }

    func choose(_ kind: ChoiceKind, below bound: UInt64) -> UInt64 {
        let value = inner.choose(kind, below: bound)
        values.append(value)
        return value
    }
}

/// PCT over choices: zero everywhere except at `depth` positions below `length`.
final class PCTChoices: ChoiceSource {
    private var random: SeededRandom
    private let changePoints: Set<Int>
    private var position = 0

    init(seed: UInt64, depth: Int, length: Int) {
        random = SeededRandom(seed: seed, stream: "pct")
        var points: Set<Int> = []
        let span = max(1, length)
        for _ in 0..<max(0, depth) { points.insert(Int(random.next() % UInt64(span))) }
        changePoints = points
    }

    func choose(_ kind: ChoiceKind, below bound: UInt64) -> UInt64 {
        defer { position += 1 }
        guard bound > 1, changePoints.contains(position) else { return 0 }
        return random.next().multipliedFullWidth(by: bound).high
    }
}

/// One schedule of the exhaustive search: follows `prefix`, then takes 0; notes at each draw
/// how many alternatives it has and the state it was drawn in.
final class ExhaustiveChoices: ChoiceSource {
    struct Draw {
        var options: UInt64
        var bound: UInt64
        var state: UInt64
    }

    /// Choices about time only: held at their simplest, so the search is over decisions.
    static let timingKinds: Set<ChoiceKind> = [.latency, .networkDelay, .durabilityDelay, .transferRate]
    /// Values tried for a draw with a large bound (a unit draw, a probability): four evenly
    /// spaced representatives, enough to land in each outcome band of the exploration scenarios.
    static let representatives: UInt64 = 4

    let prefix: [UInt64]
    private(set) var draws: [Draw] = []
    private let state: () -> UInt64

    init(prefix: [UInt64], state: @escaping () -> UInt64) {
        self.prefix = prefix
        self.state = state
    }

    static func options(_ kind: ChoiceKind, _ bound: UInt64) -> UInt64 {
        timingKinds.contains(kind) ? 1 : min(bound, representatives)
    }

    /// The value of alternative `index` of a draw.
    static func value(_ index: UInt64, options: UInt64, bound: UInt64) -> UInt64 {
        options == bound ? index : bound / options * index
    }

    private var lastLog: UInt64 = 0
    private var drawsSinceAppend: UInt64 = 0

    /// The state a draw is made in: the log so far (the queue's whole state), how many draws were
    /// made since it last grew (where the other roles are in reacting to it), and the kind.
    private func fingerprint(_ kind: ChoiceKind) -> UInt64 {
        let log = state()
        if log == lastLog { drawsSinceAppend += 1 } else { lastLog = log; drawsSinceAppend = 0 }
        var hash = log
        for part in [drawsSinceAppend, UInt64(kind.stableNumber)] { hash = (hash ^ part) &* 0x0000_0100_0000_01B3 }
        return hash
    }

    func choose(_ kind: ChoiceKind, below bound: UInt64) -> UInt64 {
        let position = draws.count
        let options = Self.options(kind, bound)
        draws.append(Draw(options: options, bound: bound, state: fingerprint(kind)))
        if position < prefix.count, prefix[position] < bound { return prefix[position] }
        return 0
    }
}

extension ChoiceKind {
    /// A small number per kind, the same in every process (Swift's hashValue is not).
    var stableNumber: Int { ChoiceKind.allCases.firstIndex(of: self) ?? 0 }
}
