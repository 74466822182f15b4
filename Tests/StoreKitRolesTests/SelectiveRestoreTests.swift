import Testing
import StoreKitModel
@testable import StoreKitRoles
import StoreKitRuntime
import StoreKitSimulation

/// Selective restore (R-R5): `restoreThenFinish` downloads only the restored content the device
/// lacks and grants and finishes every other restored transaction at once; docs/storekit-fidelity.md.
@Suite struct SelectiveRestoreTests {
    struct Outcome {
        /// Restored transactions with content, whether their device had kept that product's content before.
        var restoredWithContent: [(key: TransactionKey, alreadyKept: Bool)] = []
        var downloaded: Set<TransactionKey> = []
        var report: RunReport?
    }

    /// A whole run where users restore often, so devices restore content they already downloaded.
    static func run(_ observer: ObserverBehavior) throws -> Outcome {
        var scenario = Scenario(seed: 21, devices: 4)
        scenario.apps.observers = [observer, .audit]
        scenario.apps.purchasesPerDevice = 10
        scenario.apps.restoreProbability = 0.4
        let environment = DeterministicEnvironment.inMemory(seed: scenario.seed)
        var outcome = Outcome()
        outcome.report = try DeterministicRuntime(scenario: scenario, environment: environment).run()
        var products: [TransactionKey: String] = [:]
        var kept: Set<String> = []  // "device product"
        try environment.storage.forEachRecord(from: 1) { _, _, payload in
            switch try EventCodec.decodeEvent(payload).event {
            case .transactionAdded(let key, let payment): products[key] = payment.productIdentifier
            case .transactionRestored(let key, _, _, let original, let downloads):
                products[key] = original.payment.productIdentifier
                if !downloads.isEmpty {
                    outcome.restoredWithContent.append((key, kept.contains("\(key.device) \(original.payment.productIdentifier)")))
                }
            case .appActionRecorded(.contentKept(let key, _)):
                kept.insert("\(key.transaction.device) \(products[key.transaction] ?? "")")
            case .downloadStarted(let key): outcome.downloaded.insert(key.transaction)
            default: break
            }
        }
        return outcome
    }

    @Test("R-R5: restoreThenFinish downloads restored content only where the device lacks it; the rest is granted and finished at once")
    func downloadsOnlyWhatTheDeviceLacks() throws {
        let outcome = try Self.run(.restoreThenFinish)
        let report = try #require(outcome.report)
        #expect(report.violations.isEmpty, "\(report.violations)")
        #expect(report.pending == report.totals.declined)
        #expect(outcome.restoredWithContent.contains { $0.alreadyKept }, "no device restored content it had")
        #expect(outcome.restoredWithContent.contains { !$0.alreadyKept }, "no device restored content it lacked")
        for (key, alreadyKept) in outcome.restoredWithContent {
            #expect(outcome.downloaded.contains(key) == !alreadyKept, "\(key): kept before \(alreadyKept)")
        }
    }

    @Test("R-R5: downloadThenFinish downloads every restored product's content, also what the device has")
    func downloadThenFinishTakesAll() throws {
        let outcome = try Self.run(.downloadThenFinish)
        #expect(outcome.restoredWithContent.contains { $0.alreadyKept })
        #expect(outcome.restoredWithContent.allSatisfy { outcome.downloaded.contains($0.key) })
    }
}
