import StoreKitModel

/// Keeps each sender's commands in its order at a live queue, with bounded patience.
///
/// After a queue restart, a sender retries the commands lost with the old process while it
/// sends new ones; a new one that arrives first would be applied before an earlier one (a
/// payment before its device's launch), so a command more than one number ahead of its
/// sender's highest applied is answered "retry later". But a command that changed nothing
/// (finishing a finished transaction) leaves nothing in the log, so a restarted queue never
/// learns its number and would hold that sender's next command for ever. Hence the patience:
/// once a sender's gap has lasted longer than a sender needs to retry (its retries come at
/// most every 2 s), the gap is taken as commands that left no trace and the command is applied.
public struct SenderOrderGate: Sendable {
    /// Longer than `CommandSenderConfiguration.maximumRetryInterval` (2 s).
    public static let defaultPatienceNanoseconds: Int64 = 3_000_000_000
    /// Senders with a gap remembered at once; beyond it a gap is not waited for (bounded memory
    /// against clients that invent origins).
    public static let maximumWaitingSenders = 50_000

    public let patienceNanoseconds: Int64
    private var waiting: [String: (expected: UInt64, since: Int64)] = [:]

    public init(patienceNanoseconds: Int64 = Self.defaultPatienceNanoseconds) {
        self.patienceNanoseconds = patienceNanoseconds
    }

    /// Whether `id` must be answered "retry later" now, judged against the commands `window` holds
    /// as applied (`CommandWindow.skipsAhead`: even a sender's first command must be number 1).
    /// The origin's highest number and the clock are looked up only for a command that skips
    /// ahead, which is rare.
    public mutating func mustWait(_ id: CommandID, window: CommandWindow, now: @autoclosure () -> Int64) -> Bool {
        guard window.skipsAhead(id) else { return mustWait(id, highest: 0, skipsAhead: false, now: 0) }
        return mustWait(id, highest: window.highest(of: id.origin), skipsAhead: true, now: now())
    }

    /// Whether `id` must be answered "retry later" now. `highest` is the highest number applied
    /// for its origin; `skipsAhead` whether `id` is more than one above it.
    public mutating func mustWait(_ id: CommandID, highest: UInt64, skipsAhead: Bool, now: Int64) -> Bool {
        guard skipsAhead else {
            // Almost always empty: the common case hashes nothing.
            if !waiting.isEmpty { waiting[id.origin] = nil }
            return false
        }
        let expected = highest &+ 1
        if let gap = waiting[id.origin], gap.expected == expected {
            if now - gap.since < patienceNanoseconds { return true }
            waiting[id.origin] = nil
            return false
        }
        guard waiting.count < Self.maximumWaitingSenders || waiting[id.origin] != nil else { return false }
        waiting[id.origin] = (expected, now)
        return true
    }

    /// Senders whose gap is being waited for.
    public var waitingSenders: Int { waiting.count }
}
