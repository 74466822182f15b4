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
    func apps(heardUntil stop: @escaping (DeviceState) -> Bool) throws -> (ReplayAppsRole, TimerToken, Int64) {
        let recording = try recordInMemory(seed: 7, devices: 1, purchases: 3)
        let plan = try LiveReplayPlan(recording: recording)
        let role = ReplayAppsRole(name: "observer-1", plan: plan, speed: 1, deviceIndices: [0], choices: SeededChoices(seed: 7, stream: "observer-1"))
        let effects = role.resume(now: 0)
        guard case .timer(_, let deadline) = try #require(effects.first) else { throw CancellationError() }
        var now = try play(recording, plan: plan, into: role, until: stop)
        // The user's remaining actions: each waits for the store's replies recorded before it, which
        // will not come, at most `maximumHoldNanoseconds`, then goes.
        now = max(now, plan.lengthNanoseconds + 1)
        for _ in 0...plan.steps(of: "device-0001").count {
            _ = role.timerFired(.deviceStep(device: "device-0001"), now: now)
            now += RecordedOrderHold.maximumNanoseconds
        }
        return (role, deadline, now)
    }

    /// Plays device-0001's recording into `role` as a live run would: every step timer at its time,
    /// every recorded event heard at its own offset from the first user action; up to the first event
    /// after which `stop` holds for the device's state (nil: all of it). Returns the time reached.
    @discardableResult
    func play(_ recording: Recording, plan: LiveReplayPlan, into role: ReplayAppsRole, until stop: ((DeviceState) -> Bool)?) throws -> Int64 {
        let events = try recordedEvents(recording).filter { $0.event.device == "device-0001" }
        let base = try #require(events.first { $0.commandID != nil }).timestamp
        var projection = QueueProjection()
        var now: Int64 = 0
        for recorded in events {
            now = max(now, recorded.timestamp - base)
            _ = role.timerFired(.deviceStep(device: "device-0001"), now: now)
            _ = role.receive(recorded, now: now)
            projection.apply(recorded)
            if let stop, let state = projection.device("device-0001"), stop(state) { return now }
        }
        if stop != nil { Issue.record("the recording never reached the state asked for") }
        return now
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

    @Test("Apps whose devices are done wait until the recording's end: the recorded store may still act on them (an expiry after the apps were done)")
    func waitsForTheRecordingsEnd() throws {
        let recording = try recordInMemory(seed: 3, devices: 1, purchases: 3) { $0.store.maximumRenewals = 0 }
        let plan = try LiveReplayPlan(recording: recording)
        let role = ReplayAppsRole(name: "observer-1", plan: plan, speed: 1, deviceIndices: [0], choices: SeededChoices(seed: 3, stream: "observer-1"))
        let timers = role.resume(now: 0).compactMap { effect -> (Int64, TimerToken)? in
            if case .timer(let after, let token) = effect { return (after, token) } else { return nil }
        }
        let recordingEnd = try #require(timers.first { $0.1 == .replayRecordingEnd })
        #expect(recordingEnd.0 == plan.lengthNanoseconds)
        // Every user action sent on time and every event heard: the device has nothing unfinished.
        try play(recording, plan: plan, into: role, until: nil)
        #expect(!role.isSettled, "settled before the recording's last event was due")
        _ = role.timerFired(recordingEnd.1, now: plan.lengthNanoseconds)
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

/// The recorded store of a live replay times each reply from the event it answers. Time is injected.
@Suite struct LiveReplayReplyTimingTests {
    @Test("Events heard together (a busy machine) are answered in their recorded order: delays count from each event's own moment")
    func repliesKeepTheirRecordedOrderWhenHeardLate() throws {
        let recording = try recordInMemory(seed: 7, devices: 2, purchases: 8)
        let plan = try LiveReplayPlan(recording: recording)
        let events = try recordedEvents(recording)
        let fromStore = { (recorded: RecordedEvent) in recorded.commandID?.origin.hasPrefix("store") == true }
        var recordedDecisions: [TransactionKey] = []
        for recorded in events where fromStore(recorded) {
            switch recorded.event {
            case .transactionPurchased(let key, _, _, _), .transactionFailed(let key, _), .transactionDeferred(let key), .askToBuyDeclined(let key):
                recordedDecisions.append(key)
            default: break
            }
        }
        let role = RecordedWorldRole(name: "store", kind: .store, plan: plan, speed: 1)
        var timers: [(due: Int64, token: TimerToken)] = []
        var decisions: [TransactionKey] = []
        func take(_ effects: [Effect], now: Int64) {
            for effect in effects {
                switch effect {
                case .timer(let after, let token): timers.append((now + after, token))
                case .send(.decidePurchase(let key, _)): decisions.append(key)
                default: break
                }
            }
        }
        take(role.resume(now: 0), now: 0)
        // The first event the apps caused is heard as it happens (this process's clock is the
        // run's); then the machine stalls, and every later one is heard at one moment, a second
        // after the last of them.
        let apps = events.filter { !fromStore($0) && $0.commandID != nil }
        let first = try #require(apps.first)
        take(role.receive(first, now: first.timestamp), now: first.timestamp)
        let heard = try #require(apps.last).timestamp + 1_000_000_000
        for recorded in apps.dropFirst() { take(role.receive(recorded, now: heard), now: heard) }
        while let next = timers.indices.min(by: { timers[$0].due < timers[$1].due }) {
            let (due, token) = timers.remove(at: next)
            take(role.timerFired(token, now: due), now: due)
        }
        #expect(recordedDecisions.count > 8)
        #expect(decisions == recordedDecisions)
    }
}
