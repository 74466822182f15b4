import Testing
import StoreKitModel
@testable import StoreKitRoles
import StoreKitRuntime
import StoreKitSimulation

/// R-O3: an app shows each restore done once its own restored transactions are handled. A user who
/// restores again while the first restore's downloads still run must see both restores done.
@Suite struct RestoreShownDoneTests {
    struct RestoreID: Hashable, CustomStringConvertible {
        var device: String
        var number: UInt64
        var description: String { "\(device) restore \(number)" }
    }

    @Test("downloadThenFinish shows every finished restore done exactly once, also when a second restore ends before the first one's downloads", arguments: [3, 21, 40])
    func everyRestoreShownDoneOnce(seed: UInt64) throws {
        var scenario = Scenario(seed: seed, devices: 4)
        scenario.apps.observers = [.downloadThenFinish, .audit]
        scenario.apps.purchasesPerDevice = 12
        scenario.apps.restoreProbability = 0.5
        scenario.apps.relaunchProbability = 0  // a quit loses the observer's memory of waiting restores
        scenario.apps.thinkTime = .uniform(minimumMilliseconds: 1, maximumMilliseconds: 5)
        let environment = DeterministicEnvironment.inMemory(seed: seed)
        let report = try DeterministicRuntime(scenario: scenario, environment: environment).run()
        #expect(report.awaiting == 0 && report.violationCount == 0, "pending \(report.pending), declined \(report.totals.declined)")
        var finished: Set<RestoreID> = []
        var shown: [RestoreID: Int] = [:]
        var restoredWithContent: Set<TransactionKey> = []
        var endedBeforeItsDownloads = 0
        var unfinishedRestored: [String: Set<TransactionKey>] = [:]
        try environment.storage.forEachRecord(from: 1) { _, _, payload in
            switch try EventCodec.decodeEvent(payload).event {
            case .transactionRestored(let key, _, _, _, let downloads) where !downloads.isEmpty:
                restoredWithContent.insert(key)
                unfinishedRestored[key.device, default: []].insert(key)
            case .transactionFinished(let key) where restoredWithContent.contains(key):
                unfinishedRestored[key.device]?.remove(key)
            case .restoreFinished(let device, let number):
                let id = RestoreID(device: device, number: number)
                finished.insert(id)
                if !(unfinishedRestored[device] ?? []).isEmpty { endedBeforeItsDownloads += 1 }
            case .appActionRecorded(.restoreShownDone(let device, let number, let observer)):
                #expect(observer.hasPrefix("downloadThenFinish"), "only the downloading observer shows restores done")
                shown[RestoreID(device: device, number: number), default: 0] += 1
            default: break
            }
        }
        #expect(endedBeforeItsDownloads > 0, "the scenario must end restores while restored downloads still run")
        let missing = finished.subtracting(shown.keys).sorted { $0.description < $1.description }
        #expect(missing.isEmpty, "restores finished but never shown done: \(missing)")
        #expect(shown.values.allSatisfy { $0 == 1 }, "each restore shown done once: \(shown.filter { $0.value != 1 })")
        #expect(Set(shown.keys).isSubset(of: finished))
    }
}
