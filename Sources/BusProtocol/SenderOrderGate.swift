import StoreKitModel

/// Keeps each sender's commands in its order at a live queue, with no timer and no memory of its own.
///
/// After a queue restart, a sender retries the commands lost with the old process while it sends new
/// ones; a new one that arrives first would be applied before an earlier one (a payment before its
/// device's launch), so a command more than one number ahead of its sender's highest handled is
/// answered "retry later". Every number the queue handled leaves a trace in the log that a restarted
/// queue reads back (log format 3): a command's unit, a no-op's or duplicate's input alone, and the
/// mark of a command refused before its decision (`RecordedInput.Handled.refused`). So the only
/// numbers a gap can stand for are commands still on their way, which their sender retries, and
/// commands the sender gave up: for those the sender reports its lowest unanswered number
/// (`SenderReport`), and a command at or below it waits for nothing.
public struct SenderOrderGate: Sendable {
    public init() {}

    /// Whether `id` must be answered "retry later" now, judged against the commands `window` holds as
    /// handled (`CommandWindow.skipsAhead`: even a sender's first command must be number 1) and the
    /// sender's lowest unanswered number, when it reported one.
    public func mustWait(_ id: CommandID, lowestUnanswered: UInt64?, window: CommandWindow) -> Bool {
        mustWait(id, lowestUnanswered: lowestUnanswered, skipsAhead: window.skipsAhead(id))
    }

    /// Whether `id` must be answered "retry later": it skips ahead of its sender's highest handled
    /// number, and its sender did not report that nothing below it is still coming.
    public func mustWait(_ id: CommandID, lowestUnanswered: UInt64?, skipsAhead: Bool) -> Bool {
        guard skipsAhead else { return false }
        if let lowestUnanswered, lowestUnanswered >= id.number { return false }
        return true
    }
}
