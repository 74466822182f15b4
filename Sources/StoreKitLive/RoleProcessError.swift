/// Why a role process stopped; the message says what to do.
public struct RoleProcessError: Error, CustomStringConvertible {
    /// What kind of failure, for code (and tests) that tell failures apart; the description is for people.
    public enum Code: String, Sendable, Hashable, CaseIterable {
        /// The queue did not answer, or was never reached, within the silence limit.
        case queueUnreachable
        /// A command could not be handed to the bus.
        case commandNotSent
        /// The queue or the bus failed a command this process sent.
        case commandFailed
        /// The log holds another run, or commands nobody in this run sent: a restart cannot help.
        case untrustedLog
        /// The machine refused what the role needs (a content write, a full disk).
        case environment
        /// A process of a benchmark did not start, answer or stop in time.
        case benchmark
        /// Any other reason the process stopped.
        case stopped
    }

    public var code: Code
    public var description: String
    /// A restart cannot help (the log holds commands nobody in the run sent): the run fails.
    public var failsTheRun: Bool

    public init(_ description: String, code: Code = .stopped, failsTheRun: Bool = false) {
        self.description = description
        self.code = code
        self.failsTheRun = failsTheRun
    }
}
