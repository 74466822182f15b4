/// What a random choice decides, so a recorded choice sequence can be read, edited and
/// shrunk by a person or a tool. The raw values are part of the choice file format.
public enum ChoiceKind: String, Sendable, Hashable, Codable, CaseIterable {
    /// The store's outcome for one purchase (a unit draw against the behaviour's probabilities).
    case storeOutcome
    /// Whether a parent approves a deferred purchase.
    case approval
    /// Whether a restore fails.
    case restoreOutcome
    /// A latency: store, approval, restore, think time.
    case latency
    /// A download's transfer rate.
    case transferRate
    /// Whether one download tick fails.
    case downloadFailure
    /// Which product a user buys, and how many.
    case product
    case quantity
    /// Whether a user restores, or quits and relaunches the app, at one step.
    case userRestore
    case userRelaunch
    /// The order in which a device's observers hear one update (R-Q5).
    case observerOrder
    /// Network: delivery delay of one message, duplicate, loss.
    case networkDelay
    case networkDuplicate
    case networkLoss
    /// How long the log takes to make an append durable.
    case durabilityDelay
    /// Crash of a role at one step.
    case crash
    /// Whether the queue tells the observers about one update twice, as StoreKit may.
    case duplicateDelivery
    /// Whether, and between which two of its commands, an app is killed after handling an update.
    case appKill
    /// The order in which an app attaches its observers at launch, and how late a late one attaches.
    case observerAttach
    /// Whether the app hears `removedTransactions` late after a finish.
    case removalDelay
    /// Whether a device's user may not authorise payments (R-Q1).
    case restrictedDevice
    /// Whether the user cancelled an auto-renewable subscription before its period ends (F-U2).
    case cancellationAtRenewal
    /// Whether a purchase is interrupted, and whether its user fixes the account and buys after all (F-I1).
    case interruptedPurchase
    case interruptionResolved
    /// Whether a subscription's renewal cannot be billed, and whether a billing retry succeeds (F-B1).
    case billingIssue
    case billingRecovery
    /// Whether the app refreshes its receipt at one step (SKReceiptRefreshRequest, R-R2).
    case receiptRefresh
    /// Whether a user buys a subscription at a promotional offer, and which of its offers (F-O5).
    case promotionalOffer
    /// When a piece of the app's own asynchronous work completes (a server reply, a timer), and
    /// whether it fails (StoreKitSim's `SimulatedWork`).
    case appWorkDelay
    case appWorkFailure
    /// Where in its range a sender's retry interval falls (the bus's jitter, `CommandRetries`).
    case retryJitter
    /// Whether, at one step, one process (a role or the queue) stalls, which one, and for how long.
    case stall
    /// Whether, at one step, one process's links to the queue are cut, which one, and for how long.
    case partition
}

/// One numbered, recorded choice: a value in `0..<bound`. Zero is always the simplest
/// choice (no failure, the shortest delay, the first option), so a choice sequence cut
/// short or zeroed still drives a valid run: what exploration shrinks towards.
public struct Choice: Sendable, Hashable, Codable {
    public var kind: ChoiceKind
    public var bound: UInt64
    public var value: UInt64

    public init(kind: ChoiceKind, bound: UInt64, value: UInt64) {
        self.kind = kind
        self.bound = bound
        self.value = value
    }
}

/// The one source of every random choice of a run. Roles, the network model and the log
/// model draw from it in execution order; it records each draw, so the seed reproduces a
/// run and so does the recorded sequence (`ReplayedChoices`).
///
/// Each source of choices (a user, the store, the downloader, the network, a device's observers)
/// draws from a stream of its own (`stream(_:)`): what one source draws does not move what
/// another draws, so a run with other observers has the same users. The streams of one run share
/// one numbering and one record, in execution order, so a recorded sequence replays whichever
/// stream each draw came from.
///
/// A reference type: every part of one runtime shares the same numbering.
public protocol ChoiceSource: AnyObject {
    /// A value in `0..<bound` (`bound` ≥ 1).
    func choose(_ kind: ChoiceKind, below bound: UInt64) -> UInt64
    /// The stream of one named source (`ChoiceStream`), the same object every time it is asked for,
    /// so a restarted role goes on where its stream was. Sources that are one sequence (a recorded
    /// sequence, an exploration strategy) return themselves.
    func stream(_ name: String) -> ChoiceSource
}

/// The names of the sources of a run's choices: each draws from a stream of its own.
public enum ChoiceStream {
    public static let store = "store"
    public static let downloader = "downloader"
    public static let network = "network"
    /// The user of one device: products, quantities, restores, relaunches, think times.
    public static func user(_ device: String) -> String { "user " + device }
    /// The observers of one device and their app: the order they hear an update in, when they
    /// attach, duplicate deliveries, kills.
    public static func observers(_ device: String) -> String { "observers " + device }
    /// The bus subscriber of one role in the deterministic runtime: its heartbeats' and FETCHes' delays and losses.
    public static func subscriber(_ role: String) -> String { "subscriber " + role }
}

extension ChoiceSource {
    public func stream(_ name: String) -> ChoiceSource { self }
}

/// Resolution of unit draws: 2^53 steps, the precision of a Double in [0, 1).
public let unitChoiceBound: UInt64 = 1 << 53

// Inlinable: the runtime draws several times per event (delays, durability, removal) through these.
extension ChoiceSource {
    /// A uniform double in [0, 1); zero when the choice is shrunk away.
    @inlinable
    public func unit(_ kind: ChoiceKind) -> Double {
        Double(choose(kind, below: unitChoiceBound)) * 0x1.0p-53
    }

    /// True with `probability`; a zero draw is "true" only for probability 1, so the simplest
    /// run has no failures. Probabilities of 0 and 1 draw nothing: they are not choices.
    @inlinable
    public func chance(_ kind: ChoiceKind, _ probability: Double) -> Bool {
        if probability <= 0 { return false }
        if probability >= 1 { return true }
        return 1 - unit(kind) <= probability
    }

    /// A uniform index in `0..<count`.
    @inlinable
    public func index(_ kind: ChoiceKind, count: Int) -> Int {
        precondition(count > 0, "a choice needs at least one option")
        if count == 1 { return 0 }
        return Int(choose(kind, below: UInt64(count)))
    }

    /// A random order of `elements`, one recorded choice per position (Fisher–Yates, front to
    /// back, so the zero choices keep the original order).
    public func shuffled<Element>(_ elements: [Element], _ kind: ChoiceKind) -> [Element] {
        var result = elements
        guard result.count > 1 else { return result }
        for position in 0..<(result.count - 1) {
            let pick = position + index(kind, count: result.count - position)
            if pick != position { result.swapAt(position, pick) }
        }
        return result
    }
}

/// Choices drawn from a seed (xoshiro256**), each recorded when `isRecording`. Each named
/// stream (`stream(_:)`) has a generator of its own, derived from the seed and the stream's name;
/// every stream counts and records into the one it was made from, in execution order.
public final class SeededChoices: ChoiceSource {
    // Unchecked exclusivity: `choose` is the only writer and never re-entered (several draws per event).
    @exclusivity(unchecked) private var random: SeededRandom
    public let isRecording: Bool
    @exclusivity(unchecked) public private(set) var recorded: [Choice] = []
    @exclusivity(unchecked) public private(set) var count = 0
    private let seed: UInt64
    private let streamName: String
    /// The source this stream was made from (nil: this is the run's source), which counts and records.
    private let root: SeededChoices?
    /// The streams made so far, by name (on the run's source only).
    private var streams: [String: SeededChoices] = [:]

    public init(seed: UInt64, stream: String = "run", recording: Bool = false) {
        random = SeededRandom(seed: seed, stream: stream)
        isRecording = recording
        self.seed = seed
        streamName = stream
        root = nil
    }

    private init(root: SeededChoices, name: String) {
        let full = root.streamName + "/" + name
        random = SeededRandom(seed: root.seed, stream: full)
        isRecording = root.isRecording
        seed = root.seed
        streamName = full
        self.root = root
    }

    public func stream(_ name: String) -> ChoiceSource {
        if let root { return root.stream(name) }
        if let existing = streams[name] { return existing }
        let made = SeededChoices(root: self, name: name)
        streams[name] = made
        return made
    }

    public func choose(_ kind: ChoiceKind, below bound: UInt64) -> UInt64 {
        precondition(bound >= 1, "a choice needs at least one option")
        // Lemire's multiply-shift: unbiased enough for bounds far below 2^64 and branch-free.
        let value = bound == 1 ? 0 : random.next().multipliedFullWidth(by: bound).high
        let counter = root ?? self
        counter.count += 1
        if isRecording { counter.recorded.append(Choice(kind: kind, bound: bound, value: value)) }
        return value
    }
}

/// Choices taken from a recorded sequence, in order. Past its end, or where a recorded
/// value does not fit the bound asked for now (the run took another path), the simplest
/// choice (0) is taken: an edited or shortened sequence still drives a valid run.
public final class ReplayedChoices: ChoiceSource {
    public let values: [UInt64]
    public private(set) var position = 0
    /// Draws that did not come from the sequence (past its end or out of bound).
    public private(set) var substituted = 0
    /// Every draw, as made, so a shrinker can see what this run actually used.
    public private(set) var used: [Choice] = []

    public init(_ values: [UInt64]) {
        self.values = values
    }

    public convenience init(_ choices: [Choice]) {
        self.init(choices.map(\.value))
    }

    public func choose(_ kind: ChoiceKind, below bound: UInt64) -> UInt64 {
        precondition(bound >= 1, "a choice needs at least one option")
        var value: UInt64 = 0
        if position < values.count, values[position] < bound {
            value = values[position]
        } else {
            substituted += 1
        }
        position += 1
        used.append(Choice(kind: kind, bound: bound, value: value))
        return value
    }
}
