/// A load specification someone wrote that cannot be used; the message says what to write.
public struct LoadSpecificationError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What kind of problem, for code (and tests) that tell problems apart; the description is for people.
    public enum Code: String, Sendable, Hashable, CaseIterable {
        /// A `--stages` list that is not DURATION:RATE stages.
        case malformedStages
        /// A rate that is not starts per second within the allowed range.
        case malformedRate
        /// A threshold expression that does not parse or names nothing known.
        case malformedThreshold
        /// Any other option or setting: out of range, unknown, in conflict with another, or a file that cannot be read.
        case invalidSetting
    }

    public var code: Code
    public var description: String

    public init(_ description: String, code: Code = .invalidSetting) {
        self.description = description
        self.code = code
    }
}

/// A message between a driver and the coordinator that breaks the protocol, or a load the
/// drivers and the coordinator could not run together.
public struct LoadProtocolError: Error, Sendable, CustomStringConvertible {
    /// What kind of problem, for code (and tests) that tell problems apart; the description is for people.
    public enum Code: String, Sendable, Hashable, CaseIterable {
        /// A driver's report that does not decode, or names what its format does not allow.
        case malformedReport
        /// A report whose counts or sizes exceed what any driver reports (clamped values, buckets, custom figures).
        case limitExceeded
        /// A well-formed report this load's plan cannot produce (an interval or count out of range).
        case impossibleReport
        /// A protocol message that cannot be read.
        case unreadableMessage
        /// The drivers and the coordinator could not run the load together: not ready in time, a
        /// driver failed, a name twice, a signal.
        case coordination
    }

    public var code: Code
    public var description: String

    public init(_ description: String, code: Code = .coordination) {
        self.description = description
        self.code = code
    }
}
