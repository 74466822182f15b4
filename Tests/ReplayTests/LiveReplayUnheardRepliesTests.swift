import Testing
import StoreKitModel
import StoreKitRoles
import StoreKitRuntime
@testable import StoreKitReplay

/// Two more places where the live queue logs a reply of the recorded world among an app's own
/// commands, each seen to make a live replay of an unchanged recording diverge (an `extra` or
/// `missing` restoreShownDone, 3 of 40 live replays with the machine loaded). Time is injected.
@Suite struct LiveReplayUnheardRepliesTests {
    let device = "device-0001"

    /// `recorded` with the units at `moving` taken out and put, in order, just before the unit at
    /// `before` (with its timestamp): as the live queue logged them between the app's commands.
    static func moved(_ units: [RecordedUnit], _ moving: [Int], before: Int) throws -> (Recording, LiveReplayPlan) {
        var rest = units
        let taken = moving.map { units[$0] }
        for index in moving.sorted(by: >) { rest.remove(at: index) }
        let target = rest.firstIndex { $0.timestamp == units[before].timestamp && $0.body == units[before].body }!
        rest.insert(contentsOf: taken.map { var unit = $0; unit.timestamp = units[before].timestamp; return unit }, at: target)
        let storage = MemoryLogStorage()
        for unit in rest { _ = try storage.appendUnit(unit.payloads, timestamp: unit.timestamp) }
        let recording = try Recording.storage(storage)
        return (recording, try LiveReplayPlan(recording: recording))
    }

    static func units(seed: UInt64) throws -> [RecordedUnit] {
        let recorded = try recordInMemory(seed: seed, devices: 1, purchases: 30) { $0.apps.relaunchProbability = 0.5 }
        var units: [RecordedUnit] = []
        try recorded.forEachUnit { units.append($0) }
        return units
    }

    func sent(_ effects: [Effect]) -> [CommandBody] { effects.compactMap { if case .send(let body) = $0 { body } else { nil } } }

    /// Plays `recording` to `role` in log order, each step timer fired at each event's moment;
    /// returns the effects of hearing the first event of the unit at `index` (nil if never reached).
    func play(_ recording: Recording, to role: ReplayAppsRole, untilUnit index: Int) throws -> [Effect]? {
        var position = 0
        var started = false
        var found: [Effect]?
        try recording.forEachUnit { unit in
            defer { position += 1 }
            guard found == nil, unit.body != nil else { return }
            if !started, unit.source == .user {
                started = true
                _ = role.resume(now: unit.timestamp)
            }
            for recorded in unit.events {
                _ = role.timerFired(.deviceStep(device: device), now: recorded.timestamp)
                let effects = role.receive(recorded, now: recorded.timestamp)
                if position == index, recorded == unit.events.first { found = effects }
            }
        }
        return found
    }

    @Test("A quit after two replies the recorded app made no command about goes when the first arrives, before the app hears it")
    func burstBeforeTwoReplies() throws {
        let units = try Self.units(seed: 5)
        // A quit the user made right after another action, when the app had reacted to every reply
        // before (no reply since its observers' last command), and two store decisions after it of
        // payments added before it: the app reacts to each when it hears it.
        var addedBefore: Set<TransactionKey> = []
        var choice: (quit: Int, replies: [Int])?
        var lastReply = -1
        var lastObserverCommand = -1
        for index in units.indices where choice == nil {
            for recorded in units[index].events { if case .transactionAdded(let key, _) = recorded.event { addedBefore.insert(key) } }
            switch units[index].source {
            case .store, .downloader: lastReply = index
            case .observer: lastObserverCommand = index
            default: break
            }
            guard index + 1 < units.count, case .terminateApp? = units[index + 1].body, units[index].source == .user,
                  lastObserverCommand > lastReply else { continue }
            let decisions = units.indices.filter { later in
                if later > index + 1, case .decidePurchase(let key, _)? = units[later].body { addedBefore.contains(key) } else { false }
            }
            if decisions.count >= 2 { choice = (index + 1, Array(decisions.prefix(2))) }
        }
        let (quit, replies) = try #require(choice, "no quit with two later decisions of earlier payments; pick another seed")
        let (recording, plan) = try Self.moved(units, replies, before: quit)
        let steps = plan.steps(of: device)
        let quitStep = try #require(steps.firstIndex { step in
            if case .user(.terminateApp) = step.step { step.repliesBefore >= step.repliesHeard + 2 } else { false }
        })
        // In the moved recording the first moved reply is the unit `quit` now.
        let role = ReplayAppsRole(name: "apps", plan: plan, speed: 1, deviceIndices: [0], choices: SeededChoices(seed: 5, stream: "apps"))
        let effects = try #require(try play(recording, to: role, untilUnit: quit))
        let sends = sent(effects)
        #expect(sends.first == .terminateApp(device: device),
                "the quit (recorded after \(steps[quitStep].repliesBefore) replies, heard \(steps[quitStep].repliesHeard)) goes before the app hears the first: \(sends)")
    }

    @Test("A launch's observers attach only after a reply the recording logged between the launch and their attachment")
    func attachmentWaitsForTheReply() throws {
        let units = try Self.units(seed: 5)
        // A relaunch, its first attachment, and a later store decision of a payment added before it.
        var addedBefore: Set<TransactionKey> = []
        var launchesSeen = 0
        var choice: (launch: Int, reply: Int)?
        for index in units.indices where choice == nil {
            for recorded in units[index].events { if case .transactionAdded(let key, _) = recorded.event { addedBefore.insert(key) } }
            guard case .launchApp? = units[index].body else { continue }
            launchesSeen += 1
            guard launchesSeen > 1, units.indices.contains(index + 1), case .attachObserver? = units[index + 1].body else { continue }
            if let reply = units.indices.first(where: { later in
                if later > index + 1, case .decidePurchase(let key, _)? = units[later].body { addedBefore.contains(key) } else { false }
            }) { choice = (index, reply) }
        }
        let (launch, reply) = try #require(choice, "no relaunch followed by a decision of an earlier payment; pick another seed")
        let (recording, plan) = try Self.moved(units, [reply], before: launch + 1)
        let steps = plan.steps(of: device)
        let attach = try #require(steps.indices.first { index in
            index > 0 && steps[index].step == .attachAtLaunch && steps[index - 1].step == .user(.launchApp(device: device))
                && steps[index].repliesBefore == steps[index - 1].repliesBefore + 1
        }, "the plan has the launch's attachment as its own step, after the moved reply")

        // The launch goes when due; the attachment waits for the reply, which releases it.
        let launches = units[...launch].filter { if case .launchApp? = $0.body { true } else { false } }.count
        let role = ReplayAppsRole(name: "apps", plan: plan, speed: 1, deviceIndices: [0], choices: SeededChoices(seed: 5, stream: "apps"))
        var launchesSent = 0
        var attachedBeforeReply = false
        var released: [CommandBody] = []
        var position = 0
        var started = false
        func isAttachment(_ body: CommandBody) -> Bool { if case .attachObserver = body { true } else { false } }
        try recording.forEachUnit { unit in
            defer { position += 1 }
            guard unit.body != nil, position <= launch + 1 else { return }
            if !started, unit.source == .user {
                started = true
                _ = role.resume(now: unit.timestamp)
            }
            for recorded in unit.events {
                // A little late: every step due by then is taken, the holds' bound not yet passed.
                for body in sent(role.timerFired(.deviceStep(device: device), now: recorded.timestamp + 1_000)) {
                    if case .launchApp = body { launchesSent += 1 }
                    if isAttachment(body), launchesSent == launches { attachedBeforeReply = true }
                }
                let heard = sent(role.receive(recorded, now: recorded.timestamp + 2_000))
                if position == launch + 1, recorded == unit.events.first {
                    released = heard
                } else if heard.contains(where: isAttachment), launchesSent == launches, position <= launch {
                    attachedBeforeReply = true
                }
            }
        }
        #expect(launchesSent == launches, "the relaunch went when due (step \(attach - 1))")
        #expect(!attachedBeforeReply, "the relaunch's observers attached before the reply logged before their attachment")
        #expect(released.contains(where: isAttachment), "the reply released the attachments: \(released)")
    }

    @Test("A relaunch never goes before the replies the recording logged before it: the quit app did not hear them")
    func relaunchWaitsForItsReplies() throws {
        let units = try Self.units(seed: 5)
        let storage = MemoryLogStorage()
        for unit in units { _ = try storage.appendUnit(unit.payloads, timestamp: unit.timestamp) }
        let recording = try Recording.storage(storage)
        let plan = try LiveReplayPlan(recording: recording)
        let launchSteps = plan.steps(of: device).filter { $0.step == .user(.launchApp(device: device)) }
        try #require(launchSteps.count > 3, "the recording relaunches")
        // The recording's events heard in log order at their times, step timers fired at each: every
        // launch sent must come after as many replies as the recording logged before it.
        let role = ReplayAppsRole(name: "apps", plan: plan, speed: 1, deviceIndices: [0], choices: SeededChoices(seed: 5, stream: "apps"))
        var replies = 0
        var launches = 0
        var early: [String] = []
        var started = false
        func check(_ effects: [Effect]) {
            for case .send(.launchApp) in effects {
                if replies < launchSteps[launches].repliesBefore { early.append("launch \(launches + 1) after \(replies) of \(launchSteps[launches].repliesBefore) replies") }
                launches += 1
            }
        }
        try recording.forEachUnit { unit in
            guard unit.body != nil else { return }
            if !started, unit.source == .user {
                started = true
                check(role.resume(now: unit.timestamp))
            }
            for recorded in unit.events {
                check(role.timerFired(.deviceStep(device: device), now: recorded.timestamp))
                if unit.source == .store || unit.source == .downloader, recorded == unit.events.first { replies += 1 }
                check(role.receive(recorded, now: recorded.timestamp))
            }
        }
        #expect(launches == launchSteps.count)
        #expect(early.isEmpty, "\(early)")
    }

    @Test("Steps held for a restore's answer go after the app's reactions to its transactions, not on one of them")
    func stepsAfterTheRestoresBatch() throws {
        // Users who restore often, a store that answers within milliseconds.
        let recording = try recordInMemory(seed: 5, devices: 1, purchases: 30) {
            $0.apps.restoreProbability = 0.5
            $0.apps.thinkTime = .exponential(minimumMilliseconds: 20, meanMilliseconds: 150)
            $0.store.restoreLatency = .uniform(minimumMilliseconds: 1, maximumMilliseconds: 5)
            $0.store.purchaseLatency = .uniform(minimumMilliseconds: 1, maximumMilliseconds: 5)
        }
        let plan = try LiveReplayPlan(recording: recording)
        let userSteps = plan.steps(of: device).filter { if case .user = $0.step { true } else { false } }
        let role = ReplayAppsRole(name: "apps", plan: plan, speed: 1, deviceIndices: [0], choices: SeededChoices(seed: 5, stream: "apps"))
        // The world's replies heard 200 ms late (a loaded machine): the user's steps recorded after them
        // are due first, and held for them (less than the holds' bound).
        let lag: Int64 = 200_000_000
        var sentSteps = 0
        var releasedOnRestored: [String] = []
        var restored = 0
        var started = false
        func note(_ effects: [Effect], onRestored: Bool) {
            for case .send(let body) in effects where CommandSource.of(body) == .user {
                // A step the recorded app took after reacting to every reply before it.
                if onRestored, userSteps[sentSteps].repliesHeard >= userSteps[sentSteps].repliesBefore { releasedOnRestored.append("\(body)") }
                sentSteps += 1
            }
        }
        try recording.forEachUnit { unit in
            guard unit.body != nil else { return }
            if !started, unit.source == .user {
                started = true
                note(role.resume(now: unit.timestamp), onRestored: false)
            }
            let late = unit.source == .store || unit.source == .downloader ? lag : 0
            for recorded in unit.events {
                note(role.timerFired(.deviceStep(device: device), now: recorded.timestamp + late), onRestored: false)
                let isRestored = if case .transactionRestored = recorded.event { true } else { false }
                if isRestored { restored += 1 }
                note(role.receive(recorded, now: recorded.timestamp + late), onRestored: isRestored)
            }
        }
        try #require(restored > 0, "the recording restores; pick another seed")
        #expect(sentSteps == userSteps.count)
        #expect(releasedOnRestored.isEmpty, "\(releasedOnRestored)")
    }
}
