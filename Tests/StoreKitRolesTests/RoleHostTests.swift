import StoreKitModel
import StoreKitRoles
import StoreKitRuntime
import Testing

/// A transport with an injected clock and a window of a chosen size, keeping what it was asked to do.
private struct ScriptedTransport: RoleTransport {
    typealias Failure = Never
    var now: Int64 = 0
    var window: Int
    var answered = 0
    var sent: [CommandBody] = []
    var timers: [(at: Int64, token: TimerToken)] = []

    var hasCapacity: Bool { sent.count - answered < window }
    mutating func submit(_ body: CommandBody) {
        precondition(hasCapacity, "submitted past the window")
        sent.append(body)
    }
    mutating func setTimer(afterNanoseconds delay: Int64, _ token: TimerToken) { timers.append((now + delay, token)) }
}

/// A role that reacts to everything with the effects it is given, and notes when it heard what.
private final class ScriptedRole: Role {
    let name = "scripted"
    var reaction: [Effect] = []
    var heardAt: [Int64] = []
    var caughtUp: [UInt64] = []

    func receive(_ event: RecordedEvent, now: Int64) -> [Effect] {
        heardAt.append(now)
        return reaction
    }
    func timerFired(_ token: TimerToken, now: Int64) -> [Effect] {
        heardAt.append(now)
        return reaction
    }
    func catchUp(_ event: RecordedEvent) { caughtUp.append(event.sequence) }
    func resume(now: Int64) -> [Effect] { reaction }
}

struct RoleHostTests {
    private static func event(_ sequence: UInt64) -> RecordedEvent {
        RecordedEvent(sequence: sequence, timestamp: 0, commandID: nil, event: .appLaunched(device: "d1"))
    }

    private static func launches(_ count: Int) -> [Effect] { (0..<count).map { .send(.launchApp(device: "d\($0)")) } }

    @Test("Commands past the sender's window wait, in order, and go as answers make room") func commandsPastTheWindowWaitInOrderAndGoAsAnswersMakeRoom() {
        let role = ScriptedRole()
        role.reaction = Self.launches(5)
        let host = RoleHost(role: role)
        var transport = ScriptedTransport(window: 2)
        host.deliver(Self.event(1), over: &transport)
        #expect(transport.sent == [.launchApp(device: "d0"), .launchApp(device: "d1")])
        #expect(host.waitingCount == 3)
        #expect(!host.isSettled)
        // No room yet: nothing more goes.
        #expect(host.sendWaiting(over: &transport) == 0)
        transport.answered = 2
        #expect(host.sendWaiting(over: &transport) == 2)
        transport.answered = 4
        #expect(host.sendWaiting(over: &transport) == 1)
        #expect(transport.sent == Self.launches(5).map { effect -> CommandBody in
            guard case .send(let body) = effect else { preconditionFailure() }
            return body
        })
        #expect(host.waitingCount == 0)
        #expect(host.isSettled)
    }

    @Test("A command made while others wait goes behind them, even when the window has room") func aCommandMadeWhileOthersWaitQueuesBehindThemEvenWithRoom() {
        let role = ScriptedRole()
        role.reaction = Self.launches(3)
        let host = RoleHost(role: role)
        var transport = ScriptedTransport(window: 1)
        host.deliver(Self.event(1), over: &transport)
        // Room appears, but a new reaction must not overtake the two waiting commands.
        transport.answered = 1
        role.reaction = [.send(.launchApp(device: "later"))]
        host.deliver(Self.event(2), over: &transport)
        transport.window = 10
        host.sendWaiting(over: &transport)
        #expect(transport.sent == [.launchApp(device: "d0"), .launchApp(device: "d1"), .launchApp(device: "d2"), .launchApp(device: "later")])
    }

    @Test("A command the runtime makes itself goes at once with room, else behind the role's waiting ones, in order") func aRuntimesOwnCommandKeepsTheOrder() {
        let role = ScriptedRole()
        role.reaction = Self.launches(2)
        let host = RoleHost(role: role)
        var transport = ScriptedTransport(window: 2)
        host.send(.launchApp(device: "first"), over: &transport)
        #expect(transport.sent == [.launchApp(device: "first")])
        host.deliver(Self.event(1), over: &transport)
        #expect(host.waitingCount == 1)
        // Room appears, but the runtime's command must not overtake the role's waiting one.
        transport.answered = 2
        host.send(.launchApp(device: "second"), over: &transport)
        #expect(host.waitingCount == 2)
        host.sendWaiting(over: &transport)
        #expect(transport.sent == [.launchApp(device: "first"), .launchApp(device: "d0"), .launchApp(device: "d1"), .launchApp(device: "second")])
    }

    @Test("The role hears the environment's clock, and its timers count from it") func theRoleHearsTheEnvironmentsClockAndItsTimersCountFromIt() {
        let role = ScriptedRole()
        role.reaction = [.timer(afterNanoseconds: 500, .deviceStep(device: "d1"))]
        let host = RoleHost(role: role)
        var transport = ScriptedTransport(now: 1_000, window: 1)
        host.deliver(Self.event(1), over: &transport)
        transport.now = 1_500
        host.fire(.deviceStep(device: "d1"), over: &transport)
        #expect(role.heardAt == [1_000, 1_500])
        #expect(transport.timers.map(\.at) == [1_500, 2_000])
        #expect(transport.timers.allSatisfy { $0.token == .deviceStep(device: "d1") })
    }

    @Test("A replaced role loses what its predecessor had not sent, and catches up itself") func aReplacedRoleLosesWhatItsPredecessorHadNotSent() {
        let role = ScriptedRole()
        role.reaction = Self.launches(3)
        let host = RoleHost(role: role)
        var transport = ScriptedTransport(window: 1)
        host.resume(over: &transport)
        #expect(host.waitingCount == 2)
        let successor = ScriptedRole()
        host.replace(with: successor)
        host.catchUp(Self.event(1))
        #expect(host.waitingCount == 0)
        #expect(successor.caughtUp == [1])
        #expect(host.role === successor)
    }
}

struct InstalledAppTests {
    private static func observers() -> [BuiltInObserver] {
        [BuiltInObserver(name: "audit-1", behavior: .audit, storage: nil),
         BuiltInObserver(name: "attachesLate-2", behavior: .attachesLate, storage: nil)]
    }

    private static func commands(_ app: InstalledApp) -> [CommandBody] {
        var effects: [Effect] = []
        app.collect(into: &effects)
        return effects.compactMap { effect in
            guard case .send(let body) = effect else { return nil }
            return body
        }
    }

    @Test("A launch attaches its observers, and a late one only after its drawn user steps") func aLaunchAttachesItsObserversAndALateOneOnlyAfterItsDrawnSteps() {
        let choices = SeededChoices(seed: 1)
        let app = InstalledApp(queue: PaymentQueue(device: "d1", catalog: .sample, choices: choices), code: .builtInObservers(Self.observers),
                               observerChoices: choices)
        app.launch()
        #expect(Self.commands(app) == [.launchApp(device: "d1"), .attachObserver(device: "d1", observer: "audit-1")])
        #expect(app.hasLateObservers)
        // One or two steps, as drawn: never at launch, always by the second step.
        var steps = 0
        while app.hasLateObservers {
            steps += 1
            #expect(app.userStepped() == !app.hasLateObservers)
        }
        #expect((1...2).contains(steps))
        #expect(Self.commands(app) == [.attachObserver(device: "d1", observer: "attachesLate-2")])
    }

    @Test("A replay attaches late observers by name; a killed app loses its launch's observers") func aKilledAppLosesItsLaunchAndAReplayAttachesLateObserversByName() {
        let choices = SeededChoices(seed: 1)
        let app = InstalledApp(queue: PaymentQueue(device: "d1", catalog: .sample, choices: choices), code: .builtInObservers(Self.observers),
                               observerChoices: choices, drawsLateSteps: false)
        app.launch()
        _ = Self.commands(app)
        #expect(app.observers.count == 2)
        #expect(!app.attachLate(named: "nobody"))
        #expect(app.attachLate(named: "attachesLate-2"))
        #expect(Self.commands(app) == [.attachObserver(device: "d1", observer: "attachesLate-2")])
        app.terminate()
        #expect(app.observers.isEmpty)
        #expect(!app.hasLateObservers)
        #expect(Self.commands(app) == [.terminateApp(device: "d1")])
    }

    @Test("The user's own app code runs at every launch and attaches its observers itself") func theUsersOwnAppCodeRunsAtEveryLaunchAndAttachesItself() {
        let choices = SeededChoices(seed: 1)
        let launched = Counter()
        let app = InstalledApp(queue: PaymentQueue(device: "d1", catalog: .sample, choices: choices), code: .app { queue in
            launched.value += 1
            queue.add(BuiltInObserver(name: "own", behavior: .audit, storage: nil))
        }, observerChoices: choices)
        app.launch()
        app.terminate()
        app.launch()
        #expect(launched.value == 2)
        #expect(Self.commands(app) == [.launchApp(device: "d1"), .attachObserver(device: "d1", observer: "own"), .terminateApp(device: "d1"),
                                       .launchApp(device: "d1"), .attachObserver(device: "d1", observer: "own")])
    }

    private final class Counter { var value = 0 }
}
