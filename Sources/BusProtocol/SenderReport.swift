import StoreKitModel

/// What a sender reports with a command (wire version 2's optional CMDS report frame,
/// docs/wire-format.md "Sender reports"): what it had heard when it sent it, recorded with the
/// command in the log's input record, and its lowest unanswered number, which lets the queue's
/// order gate (`SenderOrderGate`) apply a command without waiting for numbers that will never come.
public struct SenderReport: Sendable, Hashable {
    /// Per partition, the last sequence the sender's subscriber had delivered; empty when unknown.
    public var heard: HeardSequences
    /// Every number of the command's origin below this one was answered or given up by its sender;
    /// nil when the sender did not say (a version-1 or hand-written client).
    public var lowestUnanswered: UInt64?

    public init(heard: HeardSequences = .unknown, lowestUnanswered: UInt64? = nil) {
        self.heard = heard
        self.lowestUnanswered = lowestUnanswered
    }

    /// A command sent without a report.
    public static let unknown = SenderReport()
}
