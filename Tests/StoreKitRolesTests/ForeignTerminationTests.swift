import Testing
import StoreKitModel
import StoreKitRoles
import StoreKitRuntime
import StoreKitTestKit

/// Any client that reaches the queue can send `terminateApp` for a device (docs/wire-format.md: there is no
/// authorisation beyond CURVE keys). The app must take it as the system ending it: launched again at its
/// next step, its unfinished transactions delivered again to new observers (R-Q4), so the run still ends
/// with nothing pending. It once went on as if running, and its purchases stayed unfinished for ever.
@Suite struct ForeignTerminationTests {
    /// One device's app role wired to a queue engine, with the test as the store: every added payment is
    /// purchased. Timers fire in the order they were set; nothing runs concurrently.
    struct Loop {
        var harness = QueueHarness()
        let role: AppRole
        var timers: [TimerToken] = []
        var commands = 0
        var heard = 0

        init(purchases: Int) {
            var behavior = AppBehavior()
            behavior.purchasesPerDevice = purchases
            behavior.thinkTime = .uniform(minimumMilliseconds: 1, maximumMilliseconds: 2)
            behavior.restoreProbability = 0
            behavior.relaunchProbability = 0
            behavior.observers = [.deliverThenFinish]
            let app = DeviceApp(device: "d1", account: "a1", isAdditionalDevice: false, behavior: behavior,
                                catalog: .sample, choices: SeededChoices(seed: 3), storage: nil)
            role = AppRole(devices: [app])
        }

        mutating func perform(_ effects: [Effect]) {
            for effect in effects {
                switch effect {
                case .send(let body):
                    commands += 1
                    harness.send(body, id: CommandID(origin: "\(role.name).0", number: UInt64(commands)))
                case .timer(_, let token):
                    timers.append(token)
                }
            }
            deliver()
        }

        /// Hands the role every event it has not heard; the store purchases each payment added.
        mutating func deliver() {
            while heard < harness.recorded.count {
                let recorded = harness.recorded[heard]
                heard += 1
                if case .transactionAdded(let key, _) = recorded.event {
                    harness.send(.decidePurchase(key, .purchased(charged: true)), id: CommandID(origin: "store", number: UInt64(heard)))
                }
                perform(role.receive(recorded, now: Int64(heard)))
            }
        }

        /// Runs until nothing is left to do (bounded).
        mutating func runToEnd() {
            var steps = 0
            while !timers.isEmpty {
                steps += 1
                precondition(steps < 10_000, "the app keeps stepping")
                let token = timers.removeFirst()
                perform(role.timerFired(token, now: Int64(heard)))
            }
        }

        func events(_ isWanted: (Event) -> Bool) -> [RecordedEvent] { harness.recorded.filter { isWanted($0.event) } }
    }

    @Test("another client's terminateApp: the app is launched again and finishes every purchase; the run settles")
    func relaunchedAfterForeignTermination() throws {
        var loop = Loop(purchases: 3)
        loop.perform(loop.role.resume(now: 0))
        // Step until the first purchase is on the queue, then a stranger ends the app.
        var steps = 0
        while loop.events({ if case .transactionAdded = $0 { true } else { false } }).isEmpty, !loop.timers.isEmpty {
            steps += 1
            try #require(steps < 100)
            let token = loop.timers.removeFirst()
            loop.perform(loop.role.timerFired(token, now: 0))
        }
        let decision = loop.harness.send(.terminateApp(device: "d1"), id: CommandID(origin: "stranger", number: 1))
        #expect(decision == .accept([.appTerminated(device: "d1")]), "\(decision)")
        loop.deliver()
        loop.runToEnd()

        let launches = loop.events { if case .appLaunched = $0 { true } else { false } }
        #expect(launches.count == 2, "launched \(launches.count) times")
        let purchased = loop.events { if case .transactionPurchased = $0 { true } else { false } }
        let finished = loop.events { if case .transactionFinished = $0 { true } else { false } }
        #expect(purchased.count == 3 && finished.count == 3, "purchased \(purchased.count), finished \(finished.count)")
        #expect(loop.harness.projection.pendingCount == 0)
        #expect(loop.role.isSettled)
    }
}
