// Test-only: the bus tests append raw events without the queue engine (Sources never do).
import Bus
import EventLog
import StoreKitModel

/// Appends encoded events to the queue's partition and returns them as `BusRecord`s, ready to
/// hand to `QueueEndpoint` in a `CommandOutcome`. Encoding once here means the bytes that are
/// logged are exactly the bytes that are published.
struct EventLogAppender: Sendable {
    let writer: PartitionWriter

    init(writer: PartitionWriter) {
        self.writer = writer
    }

    /// Encodes `event` with EventCodec and appends it; durable later (see the writer's policy).
    func append(_ event: Event, commandID: CommandID?, timestamp: Int64) throws(LogError) -> BusRecord {
        let payload = EventCodec.encode(event, commandID: commandID)
        let sequence = try writer.append(payload: payload, timestampNanoseconds: timestamp)
        return BusRecord(sequence: sequence, timestamp: timestamp, payload: payload, device: event.device)
    }
}
