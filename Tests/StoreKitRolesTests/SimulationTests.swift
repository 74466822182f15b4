import EventLog
import Foundation
import Testing
import StoreKitModel
import StoreKitRoles
import StoreKitRuntime
@testable import StoreKitSimulation
import StoreKitTestSupport

@Suite struct SimulationTests {
    /// A run with its log on disk under `directory`/log and real content files under `directory`.
    func run(_ scenario: Scenario, in directory: URL) throws -> (DeterministicRuntime, RunReport) {
        let logDirectory = directory.appendingPathComponent("log")
        try FileManager.default.createDirectory(at: logDirectory, withIntermediateDirectories: true)
        let environment = DeterministicEnvironment(
            storage: try DiskLogStorage(directory: logDirectory, partition: LogProjection.partition, durability: .defaultGroupCommit),
            content: FileContentStorage(root: directory), choices: SeededChoices(seed: scenario.seed), logDescription: logDirectory.path)
        let runtime = try DeterministicRuntime(scenario: scenario, environment: environment)
        return (runtime, try runtime.run())
    }

    func logBytes(_ directory: URL) throws -> [String: Data] {
        let partition = directory.appendingPathComponent("log/queue")
        var files: [String: Data] = [:]
        for name in try FileManager.default.contentsOfDirectory(atPath: partition.path) where name.hasSuffix(".segment") {
            files[name] = try Data(contentsOf: partition.appendingPathComponent(name))
        }
        return files
    }

    @Test("Same seed, byte-identical log; another seed, another log")
    func determinism() throws {
        let scratch = TemporaryDirectory()
        let scenario = Scenario(seed: 4242, devices: 6)
        let first = scratch.path("run")
        _ = try run(scenario, in: first)
        let firstBytes = try logBytes(first)
        try FileManager.default.moveItem(at: first, to: scratch.path("kept"))
        _ = try run(scenario, in: first)
        #expect(try logBytes(first) == firstBytes)
        _ = try run(Scenario(seed: 4243, devices: 6), in: scratch.path("other"))
        #expect(try logBytes(scratch.path("other")) != firstBytes)
    }

    @Test("The seed is recorded as the log's first event")
    func seedRecorded() throws {
        let scratch = TemporaryDirectory()
        _ = try run(Scenario(seed: 77, devices: 1), in: scratch.url)
        let first = try PartitionReader(directory: scratch.path("log"), partition: "queue").records(from: 1, through: 1)
        let event = try EventCodec.decodeEvent(first[0].payload).event
        guard case .runStarted(let header) = event else {
            Issue.record("first event is \(event)")
            return
        }
        #expect(header.seed == 77)
        #expect(header.runtime == "deterministic")
        #expect(header.startedAtUnixNanoseconds == 0)
        // The header alone gives back the scenario that ran, catalog included.
        let recovered = try Scenario(header: header)
        #expect(recovered.devices == 1)
        #expect(recovered.catalog.products.map(\.identifier) == Catalog.sample.products.map(\.identifier))
        #expect(recovered.header(runtime: "deterministic", startedAtUnixNanoseconds: 0) == header)
    }

    @Test("Across seeds every lifecycle completes without violations, and the projection rebuilt from the log equals the live one",
          arguments: [1, 2, 3, 5, 8] as [UInt64])
    func invariantsHold(seed: UInt64) throws {
        let scratch = TemporaryDirectory()
        var scenario = Scenario(seed: seed, devices: 8)
        scenario.apps.purchasesPerDevice = 6
        scenario.apps.relaunchProbability = 0.2
        scenario.apps.restoreProbability = 0.2
        scenario.store.deferralProbability = 0.2
        scenario.downloader.failureProbabilityPerTick = 0.02
        let (simulation, report) = try run(scenario, in: scratch.url)
        #expect(report.violations.isEmpty, "\(report.violations)")
        // Declined Ask to Buy requests stay deferred for good (F-A1); nothing else is left.
        #expect(report.pending == report.totals.declined)
        #expect(report.totals.purchased + report.totals.failed + report.totals.declined == 8 * 6)
        #expect(report.totals.finished == report.totals.purchased + report.totals.failed + report.totals.restored + report.totals.renewed)
        let rebuilt = try LogProjection.build(directory: scratch.path("log"))
        #expect(rebuilt.projection.devices == simulation.engine.projection.devices)
        #expect(rebuilt.projection.totals == simulation.engine.projection.totals)
        #expect(rebuilt.checker.violations.isEmpty)
    }

    @Test("A projection can be computed as of any sequence number")
    func projectionAtSequence() throws {
        let scratch = TemporaryDirectory()
        _ = try run(Scenario(seed: 9, devices: 3), in: scratch.url)
        let early = try LogProjection.build(directory: scratch.path("log"), through: 10)
        #expect(early.projection.lastSequence == 10)
        #expect(early.recordCount == 10)
    }

    @Test("R-Q9: a second device of the same account gets the first device's restorable purchases back")
    func restoreOnNewDevice() throws {
        let scratch = TemporaryDirectory()
        var scenario = Scenario(seed: 11, devices: 2)
        scenario.apps.purchasesPerDevice = 8
        scenario.apps.restoreProbability = 0
        scenario.apps.relaunchProbability = 0
        scenario.store.failureProbability = 0
        scenario.store.cancellationProbability = 0
        scenario.store.deferralProbability = 0
        let (simulation, report) = try run(scenario, in: scratch.url)
        #expect(report.totals.restoresFinished == 1)
        let purchasedRestorable = simulation.engine.projection.totals.purchased
        #expect(report.totals.restored > 0 && report.totals.restored <= purchasedRestorable)
    }

    @Test("R-R1: nothing is restored unless a user asks")
    func noAutomaticRestore() throws {
        let scratch = TemporaryDirectory()
        var scenario = Scenario(seed: 12, devices: 4)
        scenario.apps.devicesPerAccount = 1
        scenario.apps.restoreProbability = 0
        scenario.apps.relaunchProbability = 0.5
        let (_, report) = try run(scenario, in: scratch.url)
        #expect(report.totals.restoresFinished + report.totals.restoresFailed == 0)
        #expect(report.totals.restored == 0)
    }

    @Test("R-D3, R-T4: an observer that finishes before its downloads end is caught as losing content")
    func contentLossIsAViolation() throws {
        let scratch = TemporaryDirectory()
        var scenario = Scenario(seed: 13, devices: 4)
        scenario.apps.observers = [.finishBeforeDownloads]
        scenario.apps.purchasesPerDevice = 10
        let (_, report) = try run(scenario, in: scratch.url)
        #expect(report.violations.contains { $0.rule == "R-D3" })
    }

    @Test("R-R5: restoreThenFinish downloads content of restored purchases that have it and finishes the others at once")
    func selectiveRestore() throws {
        let scratch = TemporaryDirectory()
        var scenario = Scenario(seed: 21, devices: 2)
        scenario.apps.observers = [.restoreThenFinish]
        scenario.apps.purchasesPerDevice = 10
        let (simulation, report) = try run(scenario, in: scratch.url)
        #expect(report.violations.isEmpty)
        #expect(report.totals.restored > 0)
        let kept = try #require(simulation.apps).apps.values.flatMap { $0.observers.flatMap(\.keptContent) }
        #expect(!kept.isEmpty)
        for path in kept { #expect(FileManager.default.fileExists(atPath: scratch.url.appendingPathComponent(path).path)) }
    }

    @Test("R-D1, R-T4, F-H1: downloaded content is a real package (Contents/<contentIdentifier> of contentLength bytes, ContentInfo.plist), deleted once the transaction is finished")
    func contentFiles() throws {
        let scratch = TemporaryDirectory()
        var scenario = Scenario(seed: 31, devices: 2)
        scenario.apps.purchasesPerDevice = 10
        scenario.downloader.failureProbabilityPerTick = 0
        let (simulation, report) = try run(scenario, in: scratch.url)
        #expect(report.totals.downloadsFinished > 0)
        // Every transaction is finished, so the downloader's copies are gone (R-T4)…
        let content = scratch.path("content")
        let leftover = FileManager.default.enumerator(atPath: content.path)?.allObjects.compactMap { $0 as? String }
            .filter { !$0.isEmpty && !isDirectory(content.appendingPathComponent($0)) } ?? []
        #expect(leftover.isEmpty, "\(leftover)")
        // …while the apps kept theirs, byte for byte (R-D3).
        let kept = try #require(simulation.apps).apps.values.flatMap { $0.observers.flatMap(\.keptContent) }
        #expect(!kept.isEmpty)
        for path in kept {
            let name = URL(fileURLWithPath: path).lastPathComponent
            let product = Catalog.sample.products.first { $0.hostedContent.contains { name == "\($0.contentIdentifier)-\($0.contentVersion)" } }
            let expected = try #require(product?.hostedContent.first { name == "\($0.contentIdentifier)-\($0.contentVersion)" })
            // A hosted-content package (F-H1): Contents/<contentIdentifier> and ContentInfo.plist.
            let package = scratch.url.appendingPathComponent(path)
            let data = try Data(contentsOf: FileContentStorage.contentsFile(package, contentIdentifier: expected.contentIdentifier))
            let info = try PropertyListSerialization.propertyList(from: Data(contentsOf: package.appendingPathComponent("ContentInfo.plist")),
                                                                  format: nil) as? [String: String]
            #expect(info == ["ContentIdentifier": expected.contentIdentifier, "ContentVersion": expected.contentVersion,
                             "IAPProductIdentifier": product?.identifier ?? ""])
            #expect(Int64(data.count) == expected.contentLength)
            #expect(data.first == ContentBytes.byte(contentIdentifier: expected.contentIdentifier, offset: 0))
            #expect(data.last == ContentBytes.byte(contentIdentifier: expected.contentIdentifier, offset: expected.contentLength - 1))
        }
    }

    private func isDirectory(_ url: URL) -> Bool {
        var flag: ObjCBool = false
        return FileManager.default.fileExists(atPath: url.path, isDirectory: &flag) && flag.boolValue
    }

    @Test("A run refuses to write into a log that already holds a run")
    func refusesExistingLog() throws {
        let scratch = TemporaryDirectory()
        _ = try run(Scenario(seed: 1, devices: 1), in: scratch.url)
        let error = #expect(throws: ConfigurationError.self) { _ = try run(Scenario(seed: 1, devices: 1), in: scratch.url) }
        #expect(error?.code == .logNotEmpty)
    }

    @Test("Invalid scenarios are refused with what to change", arguments: [0, -1, 1_000_000])
    func invalidScenario(devices: Int) {
        let error = #expect(throws: ConfigurationError.self) {
            _ = try DeterministicRuntime(scenario: Scenario(seed: 1, devices: devices), environment: .inMemory(seed: 1))
        }
        #expect(error?.code == .outOfRange && error?.message.hasPrefix("devices ") == true, "\(String(describing: error))")
    }
}

@Suite struct StoreRoleTests {
    @Test("R-Q3: while no observer is attached the store does not process the device's payments; it does once one attaches")
    func noSyncWithoutObserver() {
        let store = StoreRole(catalog: .sample, behavior: StoreBehavior(), choices: SeededChoices(seed: 1))
        let feeder = RoleFeeder(store)
        @discardableResult func feed(_ event: Event) -> [Effect] { feeder.feed(event) }
        _ = feed(.deviceRegistered(device: "d", account: "a"))
        _ = feed(.appLaunched(device: "d"))
        let key = TransactionKey(device: "d", number: 1)
        #expect(feed(.transactionAdded(key, Payment(productIdentifier: "com.example.sksim.coins.small"))).isEmpty)
        let effects = feed(.observerAttached(device: "d", observer: "o"))
        #expect(effects.count == 1)
        guard case .timer(_, .decidePurchase(let decided)) = effects.first else {
            Issue.record("expected a decision timer, got \(effects)")
            return
        }
        #expect(decided == key)
    }

    @Test("R-R4: the store does not charge again for a non-consumable the account owns")
    func rebuyUncharged() {
        var behavior = StoreBehavior()
        behavior.failureProbability = 0
        behavior.cancellationProbability = 0
        behavior.deferralProbability = 0
        let store = StoreRole(catalog: .sample, behavior: behavior, choices: SeededChoices(seed: 1))
        let feeder = RoleFeeder(store)
        @discardableResult func feed(_ event: Event) -> [Effect] { feeder.feed(event) }
        feed(.deviceRegistered(device: "d", account: "a"))
        feed(.observerAttached(device: "d", observer: "o"))
        let payment = Payment(productIdentifier: "com.example.sksim.removeads")
        let first = TransactionKey(device: "d", number: 1)
        feed(.transactionAdded(first, payment))
        #expect(store.timerFired(.decidePurchase(first), now: 0) == [.send(.decidePurchase(first, .purchased(charged: true)))])
        feed(.transactionPurchased(first, identifier: "d.1", downloads: [], charged: true))
        let second = TransactionKey(device: "d", number: 2)
        feed(.transactionAdded(second, payment))
        #expect(store.timerFired(.decidePurchase(second), now: 0) == [.send(.decidePurchase(second, .purchased(charged: false)))])
    }
}

/// Store behaviours made to match real StoreKit (docs/storekit-fidelity.md).
@Suite struct StoreFidelityTests {
    /// A store that always purchases (or always defers, then decides by `approvalProbability`).
    func store(deferAll: Bool = false, approval: Double = 1) -> (StoreRole, (Event) -> [Effect]) {
        var behavior = StoreBehavior()
        behavior.failureProbability = 0
        behavior.cancellationProbability = 0
        behavior.deferralProbability = deferAll ? 1 : 0
        behavior.approvalProbability = approval
        let store = StoreRole(catalog: .sample, behavior: behavior, choices: SeededChoices(seed: 1))
        let feeder = RoleFeeder(store)
        return (store, { event in feeder.feed(event) })
    }

    @Test("R-R4: re-buying an auto-renewable subscription the account pays for is not charged again; a non-renewing one is")
    func rebuyActiveSubscription() {
        let (store, feed) = store()
        _ = feed(.deviceRegistered(device: "d", account: "a"))
        _ = feed(.observerAttached(device: "d", observer: "o"))
        var number: UInt64 = 0
        func buy(_ product: String) -> Bool? {
            number += 1
            let key = TransactionKey(device: "d", number: number)
            _ = feed(.transactionAdded(key, Payment(productIdentifier: product)))
            guard case .send(.decidePurchase(_, .purchased(let charged))) = store.timerFired(.decidePurchase(key), now: 0).first else { return nil }
            _ = feed(.transactionPurchased(key, identifier: "d.\(number)", downloads: [], charged: charged))
            return charged
        }
        #expect(buy("com.example.sksim.premium.monthly") == true)
        #expect(buy("com.example.sksim.premium.monthly") == false)
        #expect(buy("com.example.sksim.seasonpass") == true)
        #expect(buy("com.example.sksim.seasonpass") == true)
    }

    @Test("F-A1: a declined Ask to Buy request is sent as a decline (no failure), and the store does not take it up again")
    func declineIsNotAFailure() {
        let (store, feed) = store(deferAll: true, approval: 0)
        _ = feed(.deviceRegistered(device: "d", account: "a"))
        _ = feed(.observerAttached(device: "d", observer: "o"))
        let key = TransactionKey(device: "d", number: 1)
        _ = feed(.transactionAdded(key, Payment(productIdentifier: "com.example.sksim.removeads")))
        let deferred = store.timerFired(.decidePurchase(key), now: 0)
        #expect(deferred.first == .send(.decidePurchase(key, .deferred)))
        _ = feed(.transactionDeferred(key))
        #expect(store.timerFired(.approveDeferred(key), now: 0) == [.send(.decidePurchase(key, .declined))])
        _ = feed(.askToBuyDeclined(key))
        #expect(store.resume(now: 0).isEmpty)
        #expect(feed(.observerAttached(device: "d", observer: "o2")).isEmpty)
    }

    @Test("R-Q1: the store decides nothing for a device whose user may not pay; the queue has failed the payment")
    func restrictedDeviceNotDecided() {
        let (_, feed) = store()
        _ = feed(.deviceRegistered(device: "d", account: "a"))
        _ = feed(.paymentsAllowedChanged(device: "d", allowed: false))
        _ = feed(.observerAttached(device: "d", observer: "o"))
        #expect(feed(.transactionAdded(TransactionKey(device: "d", number: 1), Payment(productIdentifier: "com.example.sksim.coins.small"))).isEmpty)
    }
}

/// A run honours the `.storekit` file's test settings (F-S1, F-S2).
@Suite struct TestSettingsRunTests {
    static let fixtures = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("StoreKitModelTests/Fixtures")

    func run(_ catalog: Catalog) throws -> (RunReport, [Event]) {
        var scenario = Scenario(seed: 11, devices: 4, catalog: catalog, catalogSource: "test")
        scenario.apps.purchasesPerDevice = 5
        scenario.store.approvalProbability = 0.5
        let storage = MemoryLogStorage()
        let report = try DeterministicRuntime(scenario: scenario, environment: DeterministicEnvironment(
            storage: storage, content: VirtualContentStorage(), choices: SeededChoices(seed: 11), logDescription: "memory")).run()
        var events: [Event] = []
        try storage.forEachRecord(from: 1) { _, _, payload in events.append(try EventCodec.decodeEvent(Array(payload)).event) }
        return (report, events)
    }

    @Test("F-S2: with every setting on, every purchase fails with SKError.unknown and nothing is deferred; without them, it does not")
    func everySettingOn() throws {
        var catalog = try Catalog.load(contentsOf: Self.fixtures.appendingPathComponent("every-setting-v5.storekit"))
        let (report, events) = try run(catalog)
        #expect(report.violationCount == 0, "\(report.violations)")
        #expect(report.totals.failed == 20 && report.totals.purchased == 0 && report.totals.deferred == 0)
        #expect(report.totals.failuresByCode == [.unknown: 20])
        #expect(events.contains { if case .transactionFailed(_, let error) = $0 { error.message.contains("_failTransactionsEnabled") } else { false } })
        catalog.testSettings = StoreKitTestSettings()
        let (plain, _) = try run(catalog)
        #expect(plain.totals.purchased > 0)
    }

    @Test("F-S1: with _askToBuyEnabled every purchase is deferred first, then approved or declined (declined stays deferred, F-A1)")
    func askToBuy() throws {
        let catalog = try Catalog.load(contentsOf: Self.fixtures.appendingPathComponent("ask-to-buy-v4.storekit"))
        let (report, _) = try run(catalog)
        #expect(report.violationCount == 0, "\(report.violations)")
        #expect(report.totals.deferred == 20)
        #expect(report.totals.declined > 0 && report.totals.purchased > 0)
        #expect(report.totals.purchased + report.totals.declined == 20)
        #expect(report.pending == report.totals.declined)
    }
}
