import StoreKitModel

/// The queue endpoint's rules as a state machine with no socket and no clock: which commands reach
/// the engine, and how the others are answered. The caller answers the sender: the live `QueueEndpoint` and `QueueProcess` over ZeroMQ, the deterministic
/// runtime over a simulated link. In order:
///
/// 1. `atEndpoint`: a command outside its sender's key's roles is refused (`rejected`, only its id
///    recorded); with too many records awaiting durability it is answered `unavailable`.
/// 2. `beforeEngine`: a command that skips ahead of its sender's order waits (`unavailable`,
///    `SenderOrderGate`); a payment beyond the bounds is refused (`rejected`, `PaymentAdmission`).
///
/// The live runtime runs the two halves in two places (the endpoint does not know the engine),
/// the deterministic one in one; both on one value of this type each half.
public struct QueueAdmission {
    /// Why a command did not reach the engine.
    public struct Refusal: Sendable, Hashable {
        public enum Reason: Sendable, Hashable {
            /// Outside its sender's roles or devices (`ClientPermissions`).
            case role
            /// Too many records await durability.
            case overloaded
            /// Ahead of an earlier command of its sender.
            case outOfOrder
            /// A payment beyond a bound.
            case paymentBound
        }

        public var reason: Reason
        public var status: AcknowledgementStatus
        /// The ACK's message.
        public var message: String
        /// For `role`: what the sender's key may not send (the ACK says "not allowed: " and this).
        public var detail: String
    }

    /// What each client key may send, by the key's text (Z85); empty checks nothing.
    public var permissions: [String: ClientPermissions]
    /// Above this many records awaiting durability, commands are answered `unavailable`.
    public var maximumUnpublishedRecords: Int
    public var order: SenderOrderGate
    public var payments: PaymentAdmission
    public private(set) var refusedForRole = 0
    public private(set) var refusedAsUnavailable = 0

    public init(permissions: [String: ClientPermissions] = [:], maximumUnpublishedRecords: Int = 200_000,
                order: SenderOrderGate = SenderOrderGate(), payments: PaymentAdmission = PaymentAdmission()) {
        self.permissions = permissions
        self.maximumUnpublishedRecords = maximumUnpublishedRecords
        self.order = order
        self.payments = payments
    }

    /// Whether a sender's key is looked up at all (a connection's key costs a lookup per command).
    public var checksSenders: Bool { !permissions.isEmpty }

    /// The endpoint's half: the sender's roles, then the queue's durability backlog.
    public mutating func atEndpoint(_ command: Command, sender: String?, unpublishedRecords: Int) -> Refusal? {
        if let sender, let allowed = permissions[sender], let refusal = allowed.refusal(of: command.body) {
            refusedForRole += 1
            return Refusal(reason: .role, status: .rejected, message: "not allowed: \(refusal)", detail: refusal)
        }
        if unpublishedRecords >= maximumUnpublishedRecords {
            refusedAsUnavailable += 1
            return Refusal(reason: .overloaded, status: .unavailable,
                           message: "the queue is busy: \(unpublishedRecords) records await durability; retry later", detail: "")
        }
        return nil
    }

    /// The engine's half, judged against its projection: the sender's order (with what the sender
    /// reported), then the payment bounds. A payment refused here changes nothing; the caller records
    /// it as handled (`QueueEngine.noteRefused`), so its sender's next command does not wait for it,
    /// even at a restarted queue.
    public mutating func beforeEngine(_ command: Command, report: SenderReport = .unknown, projection: QueueProjection) -> Refusal? {
        let window = projection.recentCommands
        if order.mustWait(command.id, lowestUnanswered: report.lowestUnanswered, window: window) {
            let highest = window.highest(of: command.id.origin)
            refusedAsUnavailable += 1
            return Refusal(reason: .outOfOrder, status: .unavailable,
                           message: "command \(command.id) arrived before \(command.id.origin):\(highest + 1); send it again after the earlier ones",
                           detail: "")
        }
        if let refusal = payments.refusal(of: command.body, in: projection) {
            return Refusal(reason: .paymentBound, status: .rejected, message: refusal, detail: "")
        }
        return nil
    }
}
