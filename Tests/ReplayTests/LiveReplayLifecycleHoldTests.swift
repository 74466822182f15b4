import Testing
import StoreKitModel
import StoreKitRoles
import StoreKitRuntime
@testable import StoreKitReplay

/// A live replay sends a store or content-server reply only once the live run has logged as many
/// launches and quits of its device as the recording had before it, so that the app hears it while
/// running, or not, as the recorded app did (a restore that ended while the recorded app was quit
/// was shown done live when the live quit came a few milliseconds late). Time is injected.
@Suite struct LiveReplayLifecycleHoldTests {
    let device = "device-0001"
    let token = TimerToken.replayAccountActions(device: "device-0001")

    func chains(needing lifecycles: Int, heard: Int) -> (ReplyChains, [Effect]) {
        var chains = ReplyChains(speed: 1)
        for _ in 0..<heard { _ = chains.noteLifecycle(of: device, now: nil) }
        let reply = PlannedReply(delayNanoseconds: 10, body: .clearTransactions(device: device), lifecyclesBefore: lifecycles)
        let effects = chains.begin(token, now: 0, replies: [reply], key: nil)
        return (chains, effects)
    }

    func sent(_ effects: [Effect]) -> Int {
        effects.filter { if case .send = $0 { true } else { false } }.count
    }

    @Test("A reply recorded after the device's quit waits for the live quit, then goes out at once")
    func waitsForTheQuit() {
        var (chains, started) = chains(needing: 2, heard: 1)
        #expect(sent(started) == 0)
        let due = chains.fire(token, now: 10)
        #expect(sent(due) == 0, "held: the live run has logged one launch, the recording two lifecycle events")
        #expect(due.contains { if case .timer(let after, _) = $0 { after > 0 && after <= RecordedOrderHold.maximumNanoseconds } else { false } })
        #expect(sent(chains.noteLifecycle(of: "device-0002", now: 20)) == 0, "another device's quit changes nothing")
        #expect(sent(chains.noteLifecycle(of: device, now: 30)) == 1)
        #expect(sent(chains.fire(token, now: 40)) == 0, "sent once")
    }

    @Test("A reply whose launches and quits are already logged goes out when due")
    func noWaitWhenCaughtUp() {
        var (chains, _) = chains(needing: 2, heard: 2)
        #expect(sent(chains.fire(token, now: 10)) == 1)
    }

    @Test("A quit that does not come holds a reply at most maximumHoldNanoseconds")
    func boundedHold() {
        var (chains, _) = chains(needing: 3, heard: 0)
        #expect(sent(chains.fire(token, now: 10)) == 0)
        #expect(sent(chains.fire(token, now: 10 + RecordedOrderHold.maximumNanoseconds - 1)) == 0)
        #expect(sent(chains.fire(token, now: 10 + RecordedOrderHold.maximumNanoseconds)) == 1)
    }

    @Test("The plan counts each reply's device's recorded launches, first observer attachments and quits before it")
    func planCountsLifecycles() throws {
        let recording = try recordInMemory(seed: 5, devices: 2, purchases: 8) { $0.apps.relaunchProbability = 0.4 }
        let plan = try LiveReplayPlan(recording: recording)
        var counted = LifecycleTally()
        var expected: [CommandBody: [Int]] = [:]
        for recorded in try recordedEvents(recording) {
            counted.add(recorded.event)
            if case .transactionPurchased(let key, _, _, _) = recorded.event, recorded.commandID?.origin.hasPrefix("store") == true {
                expected[.decidePurchase(key, .purchased(charged: true)), default: []].append(counted[key.device])
            }
        }
        let replies = plan.purchaseDecisions.values.flatMap { $0 }.filter { if case .decidePurchase(_, .purchased(charged: true)) = $0.body { true } else { false } }
        #expect(!replies.isEmpty)
        #expect(replies.contains { $0.lifecyclesBefore > 2 }, "the recording relaunches apps before some decisions")
        for reply in replies {
            #expect(expected[reply.body]?.contains(reply.lifecyclesBefore) == true, "\(reply.body): \(reply.lifecyclesBefore)")
        }
    }
}

/// The other direction: a user's action the recording logged after a reply of the recorded world
/// (the store, the content servers) waits until the live run has logged as many of the device's
/// replies (a relaunch recorded after a restore's end is not made before the live restore ends).
@Suite struct LiveReplayStepHoldTests {
    @Test("A user's action recorded after store replies waits for the live replies, at most maximumHoldNanoseconds")
    func stepWaitsForTheReply() throws {
        let recording = try recordInMemory(seed: 7, devices: 1, purchases: 4)
        let plan = try LiveReplayPlan(recording: recording)
        let steps = plan.steps(of: "device-0001")
        let held = try #require(steps.firstIndex { $0.repliesBefore >= 1 }, "a step after a store reply")
        guard case .user(let body) = steps[held].step else { Issue.record("\(steps[held].step)"); return }
        // The recorded world's first replies about the device, one event of each command.
        var replies: [RecordedEvent] = []
        for recorded in try recordedEvents(recording) where recorded.event.device == "device-0001" {
            guard let command = recorded.commandID, command.origin.hasPrefix("store") || command.origin.hasPrefix("downloader"),
                  replies.last?.commandID != command else { continue }
            replies.append(recorded)
        }
        try #require(replies.count >= steps[held].repliesBefore)
        func sendsStep(_ effects: [Effect]) -> Bool { effects.contains { if case .send(let sent) = $0 { sent == body } else { false } } }
        let due = steps[held].offsetNanoseconds

        let role = ReplayAppsRole(name: "observer-1", plan: plan, speed: 1, deviceIndices: [0], choices: SeededChoices(seed: 7, stream: "observer-1"))
        _ = role.resume(now: 0)
        #expect(!sendsStep(role.timerFired(.deviceStep(device: "device-0001"), now: due)), "held: no reply logged yet")
        var released = false
        for (index, reply) in replies.prefix(steps[held].repliesBefore).enumerated() {
            #expect(!released, "released after \(index) of \(steps[held].repliesBefore) replies")
            released = sendsStep(role.receive(reply, now: due + 1 + Int64(index)))
        }
        #expect(released, "the last reply recorded before the step releases it")

        // Without the replies, the step goes after the bound.
        let other = ReplayAppsRole(name: "observer-1", plan: plan, speed: 1, deviceIndices: [0], choices: SeededChoices(seed: 7, stream: "observer-1"))
        _ = other.resume(now: 0)
        #expect(!sendsStep(other.timerFired(.deviceStep(device: "device-0001"), now: due)))
        #expect(!sendsStep(other.timerFired(.deviceStep(device: "device-0001"), now: due + RecordedOrderHold.maximumNanoseconds - 1)))
        #expect(sendsStep(other.timerFired(.deviceStep(device: "device-0001"), now: due + RecordedOrderHold.maximumNanoseconds)))
    }
}

/// A reply logged just before a quit that the recorded app made no command about may have been in
/// flight as the user quit (seen live: a restore's end logged 0.1 ms before the quit, never shown
/// done; live, the app heard it while running and showed it done, `extra`, in 8 of 8 replays). A
/// live replay quits first when nothing of the device comes between that reply and the quit.
@Suite struct LiveReplayQuitBeforeHearingTests {
    /// One device's recording in which the store's next decision after a quit is logged just before
    /// it instead, among the app's burst (a user's action and the quit, one step of the user): as
    /// the live queue logged a restore's end between the app's commands.
    static func recording() throws -> (Recording, LiveReplayPlan) {
        let recorded = try recordInMemory(seed: 6, devices: 1, purchases: 30) { $0.apps.relaunchProbability = 0.5 }
        var units: [RecordedUnit] = []
        try recorded.forEachUnit { units.append($0) }
        let quit = try #require(units.indices.first { index in
            if case .terminateApp? = units[index].body { units[index - 1].source == .user } else { false }
        })
        // The store's decision of a payment (added before the quit): the app reacts to it when it hears it.
        let reply = try #require(units.indices.first { index in
            if index > quit, case .decidePurchase? = units[index].body { true } else { false }
        })
        var moved = units.remove(at: reply)
        moved.timestamp = units[quit].timestamp
        units.insert(moved, at: quit)
        let storage = MemoryLogStorage()
        for unit in units { _ = try storage.appendUnit(unit.payloads, timestamp: unit.timestamp) }
        let recording = try Recording.storage(storage)
        return (recording, try LiveReplayPlan(recording: recording))
    }

    @Test("The plan notes the replies logged before the app's observers' last command before each step")
    func planNotesRepliesHeard() throws {
        let (recording, plan) = try Self.recording()
        var world = 0
        var atLastAppCommand = 0
        var expected: [Int] = []
        var launched = false
        try recording.forEachUnit { unit in
            guard let body = unit.body, body.device == "device-0001" else { return }
            switch unit.source {
            case .store, .downloader: world += 1
            case .user:
                // A user's action shows nothing of what the app had heard; its observers' commands do.
                expected.append(atLastAppCommand)
                if case .launchApp = body { launched = true }
                if case .terminateApp = body { launched = false }
            case .observer:
                // A launch's first attachment is a step of its own (`attachAtLaunch`).
                if case .attachObserver = body, launched {
                    expected.append(atLastAppCommand)
                    launched = false
                }
                atLastAppCommand = world
            case .header: break
            }
        }
        #expect(plan.steps(of: "device-0001").map(\.repliesHeard) == expected)
        #expect(plan.steps(of: "device-0001").contains { step in
            if case .user(.terminateApp) = step.step { step.repliesBefore > step.repliesHeard } else { false }
        }, "a quit after a reply the app made no command about")
    }

    @Test("Such a quit goes when its last reply arrives, before the app hears it")
    func quitsBeforeHearing() throws {
        let (recording, plan) = try Self.recording()
        let steps = plan.steps(of: "device-0001")
        let quit = try #require(steps.firstIndex { step in
            if case .user(.terminateApp) = step.step { step.repliesBefore > step.repliesHeard } else { false }
        })
        // The recording's events heard in log order at their times, the user's steps taken when due
        // (each held for the replies before it). The recorded app's commands are named as this
        // process's ("apps.0"), so only the store's and the downloader's count as replies.
        var replies = 0
        var quitFirst: [Effect]?
        let role = ReplayAppsRole(name: "apps", plan: plan, speed: 1, deviceIndices: [0], choices: SeededChoices(seed: 5, stream: "apps"))
        func quits(_ effects: [Effect]) -> Bool { effects.contains { if case .send(.terminateApp) = $0 { true } else { false } } }
        var started = false
        try recording.forEachUnit { unit in
            guard quitFirst == nil, unit.body != nil else { return }
            if !started, unit.source == .user {
                started = true
                _ = role.resume(now: unit.timestamp)
            }
            let isReply = unit.source == .store || unit.source == .downloader
            if isReply { replies += 1 }
            for recorded in unit.events {
                let taken = role.timerFired(.deviceStep(device: "device-0001"), now: recorded.timestamp)
                #expect(!quits(taken) || replies > steps[quit].repliesBefore, "the quit went before its last reply \(steps[quit].repliesBefore)")
                let effects = role.receive(recorded, now: recorded.timestamp)
                if isReply, replies == steps[quit].repliesBefore, recorded == unit.events.first { quitFirst = effects }
            }
        }
        let effects = try #require(quitFirst)
        let sent = effects.compactMap { if case .send(let body) = $0 { body } else { nil } }
        #expect(sent.first == .terminateApp(device: "device-0001"), "the quit goes first, before any reaction of the app: \(sent)")
    }
}
