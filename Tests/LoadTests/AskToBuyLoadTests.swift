import Foundation
import StoreKitTestKit
import Testing

/// Ask to Buy as a lifecycle of its own in `--mix`: real queue, store and driver processes, the
/// run's log read back.
@Suite(.serialized) struct AskToBuyLoadTests {
    @Test("--mix askToBuy: every such payment asks a parent (simulatesAskToBuyInSandbox in the log), is deferred, then approved or declined; each outcome is timed as its stage (F-S1, F-A1)")
    func askToBuyLifecycles() throws {
        let scratch = LoadRunTests.Scratch()
        let run = scratch.path("run")
        let outcome = try LoadRunTests.sksim(["load", "--mix", "purchase=1,askToBuy=3", "--rate", "60", "--duration", "2s", "--devices", "12",
                                              "--out", run, "--json"])
        #expect(outcome.status == 0, "\(outcome.error)\n\(outcome.output)")
        let json = outcome.json
        #expect(json["errors"] as? Int == 0)
        #expect(json["lifecycles"] as? Int == 120)
        let stages = try #require(json["stages"] as? [String: [String: Any]])
        let deferred = try #require(stages["deferred"]?["count"] as? Int)
        let approved = stages["approved"]?["count"] as? Int ?? 0
        let declined = stages["declined"]?["count"] as? Int ?? 0
        // Every Ask to Buy lifecycle was deferred and decided; the parent approves most (the store's approvalProbability).
        #expect(deferred == approved + declined)
        #expect(approved > 0)
        #expect(deferred > 40)

        // The log: each Ask to Buy payment carries the flag, and each of them, only they, were deferred.
        let added = try CatalogLoadTests.events(run, "transactionAdded")
        let asking = Set(added.filter { ($0["payment"] as? [String: Any])?["simulatesAskToBuyInSandbox"] as? Bool == true }.compactMap { $0["transaction"] as? String })
        let deferredInLog = Set(try CatalogLoadTests.events(run, "transactionDeferred").compactMap { $0["transaction"] as? String })
        #expect(asking.count == deferred)
        #expect(deferredInLog.isSuperset(of: asking))
        #expect(try CatalogLoadTests.events(run, "askToBuyDeclined").count == declined)
    }
}
