import StoreKitModel

/// The outcome of a run, shared by `simulate`, `run` and `replay`.
public struct RunReport: Sendable {
    public var seed: UInt64
    public var totals: EventTotals
    public var pending: Int
    public var violations: [Violation]
    public var violationCount: Int
    public var logDirectory: String
    public var simulatedNanoseconds: Int64
    public var duplicateCommands: Int
    public var stoppedAtTimeLimit: Bool

    /// Transactions still waiting for something: `pending` less the declined Ask to Buy requests,
    /// which stay deferred for ever (F-A1) and are an end state, not work left.
    public var awaiting: Int { pending - totals.declined }

    public init(seed: UInt64, totals: EventTotals, pending: Int, violations: [Violation], violationCount: Int,
                logDirectory: String, simulatedNanoseconds: Int64, duplicateCommands: Int, stoppedAtTimeLimit: Bool) {
        self.seed = seed
        self.totals = totals
        self.pending = pending
        self.violations = violations
        self.violationCount = violationCount
        self.logDirectory = logDirectory
        self.simulatedNanoseconds = simulatedNanoseconds
        self.duplicateCommands = duplicateCommands
        self.stoppedAtTimeLimit = stoppedAtTimeLimit
    }
}
