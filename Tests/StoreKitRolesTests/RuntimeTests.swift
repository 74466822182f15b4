import Benchmarks
import Foundation
import Testing
import StoreKitModel
import StoreKitRoles
import StoreKitRuntime
import StoreKitSimulation

/// The one runtime over its environment: recorded choices, the network model, faults.
@Suite struct RuntimeTests {
    func scenario(seed: UInt64, devices: Int = 4, purchases: Int = 6) -> Scenario {
        var scenario = Scenario(seed: seed, devices: devices)
        scenario.apps.purchasesPerDevice = purchases
        scenario.apps.relaunchProbability = 0.2
        scenario.apps.restoreProbability = 0.2
        scenario.store.deferralProbability = 0.2
        return scenario
    }

    /// Runs in memory and returns the report and the log's bytes, record by record.
    func run(_ scenario: Scenario, choices: ChoiceSource) throws -> (RunReport, [[UInt8]]) {
        let storage = MemoryLogStorage()
        let environment = DeterministicEnvironment(storage: storage, content: VirtualContentStorage(), choices: choices, logDescription: "memory")
        let report = try DeterministicRuntime(scenario: scenario, environment: environment).run()
        var records: [[UInt8]] = []
        try storage.forEachRecord(from: 1) { _, _, payload in records.append(Array(payload)) }
        return (report, records)
    }

    @Test("The engine's payloads are copies of their own size: a command of one event does not keep the encoder's buffer")
    func payloadsDoNotShareTheEncodersBuffer() throws {
        let engine = try QueueEngine(catalog: .sample, storage: MemoryLogStorage())
        var payloads: [[UInt8]] = []
        let bodies: [CommandBody] = [.registerDevice(device: "d1", account: "a1"), .launchApp(device: "d1"),
                                     .attachObserver(device: "d1", observer: "o1")]
        for (index, body) in bodies.enumerated() {
            let outcome = try engine.handle(Command(id: CommandID(origin: "test", number: UInt64(index + 1)), body: body), timestamp: Int64(index))
            #expect(outcome.records.count == 1)
            payloads += outcome.records.map(\.payload)
        }
        for (index, payload) in payloads.enumerated() {
            // The encoder reserves 1 KiB; a payload sharing its buffer would hold all of it (and the
            // live queue keeps 65,536 recent payloads and more in its replies).
            #expect(payload.capacity < 256, "payload \(index) of \(payload.count) bytes holds \(payload.capacity)")
        }
        let addresses = payloads.map { $0.withUnsafeBufferPointer { UInt(bitPattern: $0.baseAddress) } }
        #expect(Set(addresses).count == payloads.count)
    }

    @Test("The benches' ceiling does the per-event work over a run's log: the same fold as the run, each event encoded again to its logged bytes")
    func perEventWorkMatchesTheRun() throws {
        let (report, records) = try run(scenario(seed: 11), choices: SeededChoices(seed: 11))
        var work = PerEventWork()
        var identical = 0
        for (index, payload) in records.enumerated() {
            let recorded = try payload.withUnsafeBytes { try LogProjection.decode(sequence: UInt64(index + 1), timestamp: 0, payload: $0) }
            if payload.withUnsafeBytes({ work.perform(recorded, comparingWith: $0) }) { identical += 1 }
        }
        #expect(work.totals == report.totals)
        #expect(work.events == records.count && identical == records.count)
        #expect(work.encodedBytes == records.reduce(0) { $0 + $1.count })
        // Bytes that differ in one place are told apart.
        var altered = records[1]
        altered[altered.count - 1] ^= 0xFF
        let recorded = try records[1].withUnsafeBytes { try LogProjection.decode(sequence: 2, timestamp: 0, payload: $0) }
        var again = PerEventWork()
        #expect(!altered.withUnsafeBytes { again.perform(recorded, comparingWith: $0) })
    }

    @Test("A recorded choice sequence reproduces the run exactly", arguments: [3, 17, 99] as [UInt64])
    func recordedChoicesReproduce(seed: UInt64) throws {
        let recording = SeededChoices(seed: seed, recording: true)
        let (report, records) = try run(scenario(seed: seed), choices: recording)
        #expect(report.violationCount == 0)
        #expect(recording.recorded.count == recording.count && recording.count > 100)
        let replayed = ReplayedChoices(recording.recorded)
        let (_, again) = try run(scenario(seed: seed), choices: replayed)
        #expect(again == records)
        #expect(replayed.substituted == 0)
    }

    @Test("A shortened or edited choice sequence still drives a valid run to the end", arguments: [0, 10, 200] as [Int])
    func shortenedChoicesStayValid(kept: Int) throws {
        let recording = SeededChoices(seed: 5, recording: true)
        _ = try run(scenario(seed: 5), choices: recording)
        var edited = Array(recording.recorded.prefix(kept)).map(\.value)
        if edited.count > 3 { edited[3] = .max }  // out of bound: the simplest choice is taken
        let (report, _) = try run(scenario(seed: 5), choices: ReplayedChoices(edited))
        #expect(report.violationCount == 0, "\(report.violations)")
        // Declined Ask to Buy requests stay deferred for good (F-A1); nothing else is left.
        #expect(report.pending == report.totals.declined)
        #expect(!report.stoppedAtTimeLimit)
        #expect(report.totals.purchased + report.totals.failed + report.totals.declined == 4 * 6)
    }

    @Test("The all-zero choice sequence is the simplest run: every purchase succeeds, nothing fails")
    func zeroChoicesAreSimplest() throws {
        let (report, _) = try run(scenario(seed: 1), choices: ReplayedChoices([UInt64]()))
        #expect(report.totals.failed == 0 && report.totals.deferred == 0 && report.totals.downloadsFailed == 0)
        #expect(report.totals.purchased == 4 * 6)
        #expect(report.pending == 0 && report.violationCount == 0)
    }

    @Test("Duplicated, lost and delayed messages and crashes of every role still end with nothing pending and no violation",
          arguments: [1, 2, 3, 4, 5, 6] as [UInt64])
    func faultyNetwork(seed: UInt64) throws {
        var faulty = scenario(seed: seed)
        faulty.network.duplicateProbability = 0.1
        faulty.network.lossProbability = 0.05
        faulty.network.crashProbability = 0.01
        let storage = MemoryLogStorage()
        let runtime = try DeterministicRuntime(scenario: faulty, environment: DeterministicEnvironment(
            storage: storage, content: VirtualContentStorage(), choices: SeededChoices(seed: seed), logDescription: "memory"))
        let report = try runtime.run()
        #expect(runtime.counters.crashes > 0)
        #expect(runtime.counters.duplicatesDelivered > 0)
        #expect(report.duplicateCommands > 0)
        #expect(report.violationCount == 0, "\(report.violations)")
        // Declined Ask to Buy requests stay deferred for good (F-A1); nothing else is left.
        #expect(report.pending == report.totals.declined)
        #expect(!report.stoppedAtTimeLimit)
        // The log alone rebuilds the same state the live engine ended with.
        let rebuilt = try QueueEngine(catalog: faulty.catalog, storage: storage)
        #expect(rebuilt.projection.totals == runtime.engine.projection.totals)
    }

    @Test("Two devices of one account with 1,500 purchases each: the restore goes out in bounded pieces and completes")
    func largeRestoreInPieces() throws {
        // Re-buying what the account owns is not charged (R-R4) and so not restored again: many products are needed.
        let products = (1...250).map { Product(identifier: "nonconsumable.\($0)", kind: .nonConsumable, displayPrice: "0.99") }
        var shape = Scenario(seed: 8, devices: 2, catalog: try Catalog(products: products), catalogSource: "250 non-consumables")
        shape.apps.purchasesPerDevice = 1_500
        shape.apps.devicesPerAccount = 2
        shape.apps.restoreProbability = 0
        shape.apps.relaunchProbability = 0
        shape.apps.observers = [.deliverThenFinish]
        shape.store.failureProbability = 0
        shape.store.cancellationProbability = 0
        shape.store.deferralProbability = 0
        let (report, records) = try run(shape, choices: SeededChoices(seed: 8))
        #expect(report.violationCount == 0 && report.pending == 0)
        #expect(report.totals.restoresFinished == 1)
        #expect(report.totals.restored > QueueProjection.maximumRestorePiece)
        #expect(report.totals.rejections == 0)
        // No record, and so no command, grows with the history (the first holds the catalog, not history).
        #expect(records.dropFirst().map(\.count).max() ?? 0 < 8_192)
    }

    @Test("Every random choice of a run goes through the one source: a seed's runs match, another seed differs")
    func oneChoiceSource() throws {
        let first = SeededChoices(seed: 12, recording: true)
        let second = SeededChoices(seed: 12, recording: true)
        let (_, a) = try run(scenario(seed: 12), choices: first)
        let (_, b) = try run(scenario(seed: 12), choices: second)
        #expect(a == b)
        #expect(first.recorded == second.recorded)
        #expect(Set(first.recorded.map(\.kind)).isSuperset(of: [.storeOutcome, .latency, .networkDelay, .observerOrder, .product, .durabilityDelay]))
        let (_, other) = try run(scenario(seed: 13), choices: SeededChoices(seed: 13))
        #expect(other != a)
    }
}
