import EventLog
import Foundation
import StoreKitModel
import Testing
@testable import StoreKitLive

/// A `failNext` store action armed before the store process is killed still fails the device's next
/// purchase once the store is restarted from the log (F-T3), with real processes and a real kill -9.
@Suite(.serialized) struct StoreRestartFidelityTests {
    static let topology = """
        name: failnext-restart
        seed: 3
        heartbeatMilliseconds: 100
        scenario:
          devices: 2
          purchasesPerDevice: 1
          restoreProbability: 0
          relaunchProbability: 0
          thinkTimeMilliseconds: {minimum: 1, mean: 5}
          store: {failureProbability: 0, deferralProbability: 0, cancellationProbability: 0, latencyMilliseconds: {minimum: 1500, mean: 1500}}
          storeActions:
            - {atMilliseconds: 0, action: clearTransactions, device: device-0001}
            - {atMilliseconds: 0, action: failNext, device: device-0002, error: paymentInvalid}
        processes:
          - {name: queue, role: queue, events: "ipc://{run}/e.ipc", requests: "ipc://{run}/r.ipc"}
          - {name: store, role: store}
          - {name: downloader, role: downloader}
          - {name: observer-1, role: observer, devices: "1-2"}
        """

    /// Every whole record of the queue's log so far, decoded (a torn tail is left for the next look).
    static func events(_ run: LiveRunTests.BackgroundRun) -> [(id: CommandID?, event: Event)] {
        var events: [(CommandID?, Event)] = []
        _ = try? PartitionReader(directory: run.runDirectory.appendingPathComponent("log"), partition: "queue").forEachRecord { record in
            if let decoded = try? EventCodec.decodeEvent(record.payload) { events.append((decoded.commandID, decoded.event)) }
        }
        return events
    }

    @Test("F-T3: kill -9 of the store after failNext was armed: the restarted store fails the device's next purchase with its error")
    func failNextSurvivesKill() throws {
        let run = try LiveRunTests.BackgroundRun(topologyText: Self.topology)
        let waiting = TransactionKey(device: "device-0002", number: 1)
        // The first store has acted (its clearTransactions is logged) and device-0002's purchase waits for
        // its decision, which the 1.5 s store latency keeps ahead: the store is killed then.
        var firstStore: String?
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline {
            let events = Self.events(run)
            firstStore = events.first { $0.id?.origin.hasPrefix("store.") == true }?.id?.origin
            let added = events.contains { if case .transactionAdded(waiting, _) = $0.event { true } else { false } }
            if firstStore != nil && added { break }
            usleep(20_000)
        }
        let storeOrigin = try #require(firstStore, "the store never acted")
        #expect(kill(try #require(try run.pid(of: "store")), SIGKILL) == 0)
        let result = try #require(try run.wait(seconds: 90), "the run did not end within 90 s")
        #expect(result.failure == nil, "\(result.failure ?? "")")
        #expect(result.restarts["store"] == 1)
        #expect(result.report.violations.isEmpty, "\(result.report.violations)")
        let decision = try #require(Self.events(run).first {
            switch $0.event {
            case .transactionPurchased(waiting, _, _, _), .transactionFailed(waiting, _), .transactionDeferred(waiting): true
            default: false
            }
        })
        #expect(decision.id?.origin.hasPrefix("store.") == true && decision.id?.origin != storeOrigin,
                "device-0002's purchase was decided by \(decision.id?.description ?? "nobody"), not by the restarted store")
        guard case .transactionFailed(_, let error) = decision.event else {
            Issue.record("device-0002's purchase was not failed after the restart: \(decision.event)"); return
        }
        #expect(error.code == .paymentInvalid)
        #expect(error.message.contains("failNext at 0.0 ms"))
    }
}
