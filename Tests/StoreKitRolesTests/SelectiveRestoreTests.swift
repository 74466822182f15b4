import Testing
import StoreKitModel
@testable import StoreKitRoles
import StoreKitRuntime
import StoreKitSimulation
import StoreKitTestKit

/// Selective restore (R-R5): `restoreThenFinish` downloads only the restored content the user picks
/// and grants and finishes every other restored transaction at once; docs/storekit-fidelity.md.
@Suite struct SelectiveRestoreTests {
    /// Restored transactions with content, and which of them had a download started, in a whole run.
    static func run(pick: Double) throws -> (withContent: Set<TransactionKey>, downloaded: Set<TransactionKey>, report: RunReport) {
        var scenario = Scenario(seed: 21, devices: 4)
        scenario.apps.observers = [.restoreThenFinish]
        scenario.apps.purchasesPerDevice = 10
        scenario.apps.restorePickProbability = pick
        let environment = DeterministicEnvironment.inMemory(seed: scenario.seed)
        let report = try DeterministicRuntime(scenario: scenario, environment: environment).run()
        var withContent: Set<TransactionKey> = []
        var downloaded: Set<TransactionKey> = []
        try environment.storage.forEachRecord(from: 1) { _, _, payload in
            switch try EventCodec.decodeEvent(payload).event {
            case .transactionRestored(let key, _, _, _, let downloads) where !downloads.isEmpty: withContent.insert(key)
            case .downloadStarted(let key) where withContent.contains(key.transaction): downloaded.insert(key.transaction)
            default: break
            }
        }
        return (withContent, downloaded, report)
    }

    @Test("R-R5: restored content the user does not pick is not downloaded; those transactions are granted and finished at once")
    func downloadsOnlyPicked() throws {
        let none = try Self.run(pick: 0)
        #expect(!none.withContent.isEmpty)
        #expect(none.downloaded.isEmpty)
        #expect(none.report.violations.isEmpty, "\(none.report.violations)")
        #expect(none.report.pending == none.report.totals.declined)
        let every = try Self.run(pick: 1)
        #expect(every.downloaded == every.withContent)
        #expect(every.report.violations.isEmpty)
        let some = try Self.run(pick: 0.5)
        #expect(!some.downloaded.isEmpty && some.downloaded.count < some.withContent.count, "\(some.downloaded.count) of \(some.withContent.count)")
        #expect(some.report.violations.isEmpty)
    }

    @Test("R-R5: downloadThenFinish downloads every restored product's content, unlike restoreThenFinish")
    func downloadThenFinishTakesAll() throws {
        var scenario = Scenario(seed: 21, devices: 4)
        scenario.apps.observers = [.downloadThenFinish]
        scenario.apps.purchasesPerDevice = 10
        scenario.apps.restorePickProbability = 0
        let environment = DeterministicEnvironment.inMemory(seed: scenario.seed)
        _ = try DeterministicRuntime(scenario: scenario, environment: environment).run()
        var withContent: Set<TransactionKey> = []
        var downloaded: Set<TransactionKey> = []
        try environment.storage.forEachRecord(from: 1) { _, _, payload in
            switch try EventCodec.decodeEvent(payload).event {
            case .transactionRestored(let key, _, _, _, let downloads) where !downloads.isEmpty: withContent.insert(key)
            case .downloadStarted(let key) where withContent.contains(key.transaction): downloaded.insert(key.transaction)
            default: break
            }
        }
        #expect(!withContent.isEmpty && downloaded == withContent)
    }
}
