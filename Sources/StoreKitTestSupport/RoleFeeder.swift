import StoreKitModel
import StoreKitRoles

/// Hands a role events as a log would: sequences 1, 2, 3, … with the sequence as timestamp, so a
/// test of one role's pure logic needs no runtime. Keeps what it fed, for a restarted role's catch-up.
public final class RoleFeeder {
    public let role: any Role
    public private(set) var fed: [RecordedEvent] = []

    public init(_ role: any Role) { self.role = role }

    /// Delivers `event` as the next record, heard at `time` (also its timestamp; without one the
    /// timestamp is the sequence and the role hears it at 0); returns the role's reaction.
    @discardableResult
    public func feed(_ event: Event, at time: Int64? = nil) -> [Effect] {
        let sequence = UInt64(fed.count + 1)
        let recorded = RecordedEvent(sequence: sequence, timestamp: time ?? Int64(sequence), commandID: nil, event: event)
        fed.append(recorded)
        return role.receive(recorded, now: time ?? 0)
    }
}
