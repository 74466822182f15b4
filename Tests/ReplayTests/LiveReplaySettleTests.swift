import Testing
import StoreKitModel
import StoreKitRoles
@testable import StoreKitReplay

/// When a live replay's apps stop waiting. A loaded machine can delay the recorded store's
/// decision by seconds (CI: a replay ended 18 tracks short, a payment still purchasing); that
/// is not an observer that never finishes, so the apps wait for it. Time is injected.
@Suite struct LiveReplaySettleTests {
    static let second: Int64 = 1_000_000_000

    /// An apps role of device-0001 after every recorded user action, having heard the recorded
    /// events up to the first point where the device's state matches `stop`; its deadline timer
    /// and the time its last user action was sent (the grace counts from there).
    func apps(heardUntil stop: (DeviceState) -> Bool) throws -> (ReplayAppsRole, TimerToken, Int64) {
        let recording = try recordInMemory(seed: 7, devices: 1, purchases: 3)
        let plan = try LiveReplayPlan(recording: recording)
        let role = ReplayAppsRole(name: "observer-1", plan: plan, speed: 1, deviceIndices: [0], choices: SeededChoices(seed: 7, stream: "observer-1"))
        let effects = role.resume(now: 0)
        guard case .timer(_, let deadline) = try #require(effects.first) else { throw CancellationError() }
        let afterRecording = plan.lengthNanoseconds + 1
        _ = role.timerFired(.deviceStep(device: "device-0001"), now: afterRecording)
        var projection = QueueProjection()
        for recorded in try recordedEvents(recording) where recorded.event.device == "device-0001" {
            _ = role.receive(recorded, now: 0)
            projection.apply(recorded)
            if let state = projection.device("device-0001"), stop(state) { return (role, deadline, afterRecording) }
        }
        Issue.record("the recording never reached the state asked for")
        return (role, deadline, afterRecording)
    }

    /// A payment purchasing (its recorded decision not heard yet), and nothing else.
    static func waitsForTheStoreOnly(_ state: DeviceState) -> Bool {
        state.restoresInProgress.isEmpty && state.pending.count == 1 && state.pending.values.allSatisfy { $0.transactionState == .purchasing }
    }

    /// Transactions pending, none purchasing, no restore or download in progress: the observers' turn.
    static func waitsForItsObserversOnly(_ state: DeviceState) -> Bool {
        state.restoresInProgress.isEmpty && !state.pending.isEmpty && state.pending.values.allSatisfy { transaction in
            transaction.transactionState != .purchasing && !transaction.downloads.contains { $0.downloadState == .active }
        }
    }

    @Test("A payment still waiting for its recorded store decision keeps the apps waiting past the grace, up to the stall limit")
    func waitsForTheStore() throws {
        let (role, deadline, end) = try apps(heardUntil: Self.waitsForTheStoreOnly)
        _ = role.timerFired(deadline, now: end + ReplayAppsRole.settleGraceNanoseconds + Self.second)
        #expect(!role.isSettled)
        _ = role.timerFired(deadline, now: end + ReplayAppsRole.worldStallNanoseconds)
        #expect(role.isSettled)
    }

    @Test("A purchased transaction its observers never finish is given up on after the grace")
    func givesUpOnObservers() throws {
        let (role, deadline, end) = try apps(heardUntil: Self.waitsForItsObserversOnly)
        #expect(!role.isSettled)
        _ = role.timerFired(deadline, now: end + ReplayAppsRole.settleGraceNanoseconds + Self.second)
        #expect(role.isSettled)
    }

    @Test("The grace counts from the last event heard, not from the start")
    func graceFromLastEvent() throws {
        let (role, deadline, end) = try apps(heardUntil: Self.waitsForItsObserversOnly)
        let late = end + 10 * Self.second
        // Anything heard late (here: the device's app-side event again) restarts the grace.
        _ = role.receive(RecordedEvent(sequence: 999, timestamp: 0, commandID: nil, event: .paymentsAllowedChanged(device: "device-0001", allowed: true)), now: late)
        _ = role.timerFired(deadline, now: late + Self.second)
        #expect(!role.isSettled)
        _ = role.timerFired(deadline, now: late + ReplayAppsRole.settleGraceNanoseconds)
        #expect(role.isSettled)
    }
}
