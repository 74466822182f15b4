import StoreKitModel

/// The queue role's logic: validate a command against the projection and say which
/// events to append. The runtime appends them to the log (the queue is the single
/// writer of its partition), then calls `apply` and publishes them.
public final class QueueRole {
    public let catalog: Catalog
    public private(set) var projection: QueueProjection
    public private(set) var duplicates = 0

    public init(catalog: Catalog, projection: QueueProjection = QueueProjection()) {
        self.catalog = catalog
        self.projection = projection
    }

    /// The events a command causes: what it changes, or its logged rejection. Empty for
    /// a duplicate id (applied once already) and for harmless no-ops (finishing twice).
    public func handle(_ command: Command) -> (events: [Event], rejection: Rejection?) {
        switch projection.decide(command, catalog: catalog) {
        case .accept(let events):
            return (events, nil)
        case .reject(let rejection):
            return ([QueueProjection.rejectionEvent(command, rejection)], rejection)
        case .duplicate:
            duplicates += 1
            return ([], nil)
        }
    }

    /// Folds an appended event into the projection. Sequence numbers must follow on:
    /// anything else means the runtime lost or reordered its own log.
    public func apply(_ recorded: RecordedEvent) {
        precondition(recorded.sequence == projection.lastSequence + 1,
                     "queue applied sequence \(recorded.sequence) after \(projection.lastSequence)")
        projection.apply(recorded)
    }
}
