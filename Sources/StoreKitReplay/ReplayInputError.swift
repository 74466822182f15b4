/// Input a replay cannot use, with what to do about it; one line, naming the file.
public struct ReplayInputError: Error, Sendable, CustomStringConvertible {
    /// What kind of problem, for code (and tests) that tell problems apart; the description is for people.
    public enum Code: String, Sendable, Hashable, CaseIterable {
        /// The recording is missing, not a log, of another format, damaged, or too large to replay this way.
        case unusableRecording
        /// A replay option out of range, or options that do not go together.
        case invalidOption
        /// The recording ran an app this executable does not register.
        case appNotRegistered
        /// The replay's output log already holds records.
        case outputNotEmpty
    }

    public var code: Code
    public var description: String

    public init(_ description: String, code: Code = .unusableRecording) {
        self.description = description
        self.code = code
    }
}
