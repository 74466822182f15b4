import Foundation
import Testing
import StoreKitModel
import StoreKitRoles

/// A live run's apps date their transactions from the run's wall-clock start, which its header (the
/// log's first event) records, as the App Store server does; a deterministic run (start 0) keeps the
/// scenario's `startDate`.
@Suite struct RunStartDateTests {
    static func role() -> (AppRole, DeviceApp) {
        let app = DeviceApp(device: "d1", account: "a1", isAdditionalDevice: false, behavior: AppBehavior(),
                            catalog: .sample, choices: SeededChoices(seed: 3), storage: nil)
        return (AppRole(devices: [app]), app)
    }

    static func header(startedAt nanoseconds: Int64, runtime: String) -> RecordedEvent {
        RecordedEvent(sequence: 1, timestamp: 0, commandID: nil, event: .runStarted(RunHeader(
            seed: 1, sksimVersion: "test", runtime: runtime, startedAtUnixNanoseconds: nanoseconds, scenario: "{}",
            catalogSource: "", catalogDigest: "", catalog: "")))
    }

    @Test("a live header sets the apps' start to the run's wall-clock start, in whole milliseconds as the server counts")
    func liveStart() {
        let startedAt: Int64 = 1_790_000_000_123_456_789
        let (received, receivedApp) = Self.role()
        _ = received.receive(Self.header(startedAt: startedAt, runtime: "live"), now: 0)
        #expect(Scenario.dateMilliseconds(logTime: 5_000_000, start: receivedApp.queue.startDate) == startedAt / 1_000_000 + 5)
        let (caughtUp, caughtUpApp) = Self.role()
        caughtUp.catchUp(Self.header(startedAt: startedAt, runtime: "live"))
        #expect(caughtUpApp.queue.startDate == receivedApp.queue.startDate)
    }

    @Test("a deterministic header (start 0) leaves the scenario's startDate")
    func deterministicStart() {
        let (role, app) = Self.role()
        _ = role.receive(Self.header(startedAt: 0, runtime: "deterministic"), now: 0)
        #expect(app.queue.startDate == Scenario.defaultStartDate)
    }
}
