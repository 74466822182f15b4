import Foundation
import StoreKitModel
import StoreKitRoles
import StoreKitRuntime
import StoreKitSimulation

/// Runs `scenario` in the deterministic runtime with an in-memory log: its report, and every event
/// of the log decoded, as a test reads a whole run.
func runInMemory(_ scenario: Scenario) throws -> (RunReport, [RecordedEvent]) {
    let environment = DeterministicEnvironment.inMemory(seed: scenario.seed)
    let report = try DeterministicRuntime(scenario: scenario, environment: environment).run()
    var events: [RecordedEvent] = []
    try environment.storage.forEachRecord(from: 1) { sequence, timestamp, payload in
        let decoded = try EventCodec.decodeEvent(payload)
        events.append(RecordedEvent(sequence: sequence, timestamp: timestamp, commandID: decoded.commandID, event: decoded.event))
    }
    return (report, events)
}

/// A scratch directory removed when the test ends.
final class TemporaryDirectory {
    let url: URL
    init() {
        url = FileManager.default.temporaryDirectory.appendingPathComponent("sksim-test-\(UUID().uuidString)", isDirectory: true)
        try? FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }
    deinit { try? FileManager.default.removeItem(at: url) }
    func path(_ name: String) -> URL { url.appendingPathComponent(name, isDirectory: true) }
}
