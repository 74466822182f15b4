/// How the queue answered a command (byte 0 of the ACK status frame).
public enum AcknowledgementStatus: UInt8, Sendable, Hashable, CaseIterable, CustomStringConvertible {
    /// Applied; its events are durable and published.
    case accepted = 0
    /// Refused by the domain; the rejection event is durable and published.
    case rejected = 1
    /// This id was applied before; the earlier outcome stands.
    case duplicate = 2
    /// The request could not be decoded; nothing was appended.
    case malformed = 3
    /// The queue could not take the command now (overloaded or its log failed); retry later.
    case unavailable = 4

    public var description: String {
        switch self {
        case .accepted: "accepted"
        case .rejected: "rejected"
        case .duplicate: "duplicate"
        case .malformed: "malformed"
        case .unavailable: "unavailable"
        }
    }
}
