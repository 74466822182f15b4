import Foundation
import StoreKitModel

/// The work that one event costs in every runtime of these roles, however the runtime schedules,
/// decides and delivers: the engine encodes the event, folds it into its projection and checks the
/// invariants on it, and the app of its device folds it into its own view of that device's queue (each
/// role keeps its own projection, as it must when it runs as a process of its own).
///
/// `bench simulate` and `bench replay` time it over the same events as their runtimes. Nothing else
/// (deciding commands, scheduling, the store, the downloader, the observers, choices) is in it,
/// so no runtime of this design can go faster than it: its rate is a ceiling, and its ratio to a
/// bench's baseline bounds the ratio that bench's runtime can reach (docs/performance.md,
/// "Ceilings").
public struct PerEventWork {
    private var engineProjection = QueueProjection()
    private var checker = InvariantChecker()
    /// Each device's app keeps its own view of its queue, found as `AppRole` finds its app (the
    /// last device first, then by name).
    private var appSlots: [String: Int] = [:]
    private var appProjections: [QueueProjection] = []
    private var lastDevice = ""
    private var lastSlot = -1
    private var writer = BinaryWriter(capacity: 1_024)
    /// Bytes encoded so far: read by the benches, so that no encoding can be left out as unused.
    public private(set) var encodedBytes = 0
    public private(set) var events = 0

    public init() {}

    public mutating func perform(_ recorded: RecordedEvent) {
        writer.removeAll()
        EventCodec.encode(recorded.event, commandID: recorded.commandID, into: &writer)
        encodedBytes &+= writer.bytes.count
        engineProjection.apply(recorded)
        checker.check(recorded)
        if let device = recorded.event.device {
            if lastSlot < 0 || device != lastDevice {
                if let slot = appSlots[device] {
                    lastSlot = slot
                } else {
                    lastSlot = appProjections.count
                    appSlots[device] = lastSlot
                    appProjections.append(QueueProjection(tracksCommands: false))
                }
                lastDevice = device
            }
            appProjections[lastSlot].apply(recorded)
        }
        events += 1
    }

    /// `perform`, then whether the event encoded to exactly `payload` (what replay compares).
    public mutating func perform(_ recorded: RecordedEvent, comparingWith payload: UnsafeRawBufferPointer) -> Bool {
        perform(recorded)
        return writer.bytes.withUnsafeBytes { bytes in
            bytes.count == payload.count && (bytes.isEmpty || memcmp(bytes.baseAddress!, payload.baseAddress!, bytes.count) == 0)
        }
    }

    /// The projection folded by the engine's part of the work (the benches check it against their runtime's).
    public var totals: EventTotals { engineProjection.totals }
}
