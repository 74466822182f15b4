import StoreKitModel
import StoreKitRoles

/// Where a replay first went its own way.
public struct Divergence: Sendable {
    public enum Kind: String, Sendable {
        /// The replay appended other events (or other bytes, or at another time) for a recorded command.
        case different
        /// The replayed observers did not send a command the recorded ones sent.
        case missing
        /// The replayed observers sent a command the recorded ones did not, and it changed the log.
        case extra
    }

    public var kind: Kind
    /// Sequence in the replayed log where it happened.
    public var sequence: UInt64
    /// The recorded event there (nil when the recording has nothing more).
    public var recorded: RecordedEvent?
    /// The replayed event there (nil when the replay has nothing there).
    public var replayed: RecordedEvent?
    public var device: String
    /// The device's events before this point and its state there (filled for the first divergence).
    public var context: DivergenceContext?
    /// Replayed commands handled before this point (where the context is taken).
    var handledBefore: Int
    /// Live replays: the track that differs (see `LiveComparison`).
    public var track: String? = nil
    /// Recordings of several partitions: the partition it is in (`sequence` counts in it).
    public var partition: String? = nil
}

/// The device's preceding events and its projection at the point of a divergence.
public struct DivergenceContext: Sendable {
    public var device: String
    /// Up to `ReplaySession.contextEvents` events of the device, oldest first.
    public var precedingEvents: [RecordedEvent]
    /// The device as the replayed queue held it just before (nil: not registered yet).
    public var state: DeviceState?
}

/// Lateness of a timed replay: how long after its scheduled time each command was handled.
public struct Lateness: Sendable {
    public var samples: Int
    public var p50Nanoseconds: Int64
    public var p99Nanoseconds: Int64
    public var maximumNanoseconds: Int64
    /// The same over the first and the last tenth of the replay (growth would show here).
    public var firstTenthP99Nanoseconds: Int64
    public var lastTenthP99Nanoseconds: Int64
    /// What the waits ran under (`SystemReplayClock.Scheduling`'s name), set by whoever made the clock.
    public var scheduling: String?

    init?(_ samples: [Int64]) {
        guard !samples.isEmpty else { return nil }
        func p99(_ slice: ArraySlice<Int64>) -> Int64 {
            let sorted = slice.sorted()
            return sorted.isEmpty ? 0 : sorted[min(sorted.count - 1, Int((Double(sorted.count) * 0.99).rounded(.up)) - 1)]
        }
        let sorted = samples.sorted()
        func percentile(_ fraction: Double) -> Int64 { sorted[max(0, min(sorted.count - 1, Int((Double(sorted.count) * fraction).rounded(.up)) - 1))] }
        self.samples = samples.count
        p50Nanoseconds = percentile(0.5)
        p99Nanoseconds = percentile(0.99)
        maximumNanoseconds = sorted.last!
        let tenth = max(1, samples.count / 10)
        firstTenthP99Nanoseconds = p99(samples.prefix(tenth))
        lastTenthP99Nanoseconds = p99(samples.suffix(tenth))
    }
}

/// What a replay did and how it compared with the recording.
public struct ReplayResult: Sendable {
    /// Events the replay appended (its whole log: header, rebuilt history and the compared part).
    public var events = 0
    /// Recorded events compared (the slice, times the copies).
    public var comparedEvents = 0
    /// Commands replayed: from the recording, and sent by the replayed observers.
    public var commands = 0
    /// The replayed log is byte for byte the recording (every record: sequence, time, payload).
    public var identical = false
    /// Recorded commands whose events the replay did not reproduce exactly, plus commands
    /// the replayed observers sent that the recorded ones did not and that changed the log.
    public var divergences: Int { different + missing + extra }
    public var different = 0
    public var missing = 0
    public var extra = 0
    public var firstDivergence: Divergence?
    /// Timed replays only.
    public var lateness: Lateness?
    public var seconds = 0.0
    public var eventsPerSecond: Double { seconds > 0 ? Double(events) / seconds : 0 }
    public var violations: [Violation] = []
    public var violationCount = 0
    /// The recording's header (as recorded).
    public var header: RunHeader?
    /// Something worth saying that did not stop the replay (a torn tail).
    public var warning: String?
    /// Observers the replay ran.
    public var observers: [ObserverBehavior] = []
    /// The user's own app replayed instead of built-in observers, by its registered name.
    public var app: String?
    /// A reaction stopped at `ReplayOptions.maximumReactionCommands` (a runaway observer).
    public var stoppedRunawayObserver = false
}
