import Testing
import StoreKitModel
import StoreKitRoles
@testable import StoreKitReplay

/// A recorded-world process that starts after the apps began catches up on the log, then sends
/// what is due. Seen live: a downloader that caught up after 200 events never sent the reports of
/// the downloads started before it, so they stayed at 0 % and the replay diverged.
@Suite struct LiveReplayCatchUpTests {
    @Test("A downloader that starts after downloads began sends their recorded reports")
    func lateDownloaderSendsReports() throws {
        let recording = try recordInMemory(seed: 5, devices: 2, purchases: 6)
        let events = try recordedEvents(recording)
        let started = try #require(events.first { if case .downloadStarted = $0.event { true } else { false } }, "the recording starts no download")
        guard case .downloadStarted(let key) = started.event else { return }
        let plan = try LiveReplayPlan(recording: recording)
        let downloader = RecordedWorldRole(name: "downloader", kind: .downloader, plan: plan, speed: 1)
        for recorded in events where recorded.sequence <= started.sequence { downloader.catchUp(recorded) }
        let effects = downloader.resume(now: 0)
        #expect(effects.contains { if case .timer(_, .downloadTick(key, generation: 1)) = $0 { true } else { false } }, "\(effects)")
    }

    @Test("A store that starts after a purchase was decided does not decide it again")
    func lateStoreSkipsDecidedPurchases() throws {
        let recording = try recordInMemory(seed: 5, devices: 2, purchases: 6)
        let events = try recordedEvents(recording)
        let purchased = try #require(events.first { if case .transactionPurchased = $0.event { true } else { false } })
        guard case .transactionPurchased(let key, _, _, _) = purchased.event else { return }
        let plan = try LiveReplayPlan(recording: recording)
        let store = RecordedWorldRole(name: "store", kind: .store, plan: plan, speed: 1)
        for recorded in events where recorded.sequence <= purchased.sequence { store.catchUp(recorded) }
        var sent: [CommandBody] = []
        for effect in store.resume(now: purchased.timestamp) {
            guard case .timer(_, let token) = effect, token == .decidePurchase(key) else { continue }
            for fired in store.timerFired(token, now: purchased.timestamp + 10_000_000_000) { if case .send(let body) = fired { sent.append(body) } }
        }
        #expect(sent.isEmpty, "decided again: \(sent)")
    }

    @Test("A live replay's plan holds the store's billing retries among a purchase's later decisions, sent with the live run's purchase")
    func billingRetriesArePlanned() throws {
        let recording = try recordInMemory(seed: 7, devices: 6, purchases: 6) { $0.store.billingIssueProbability = 0.6 }
        let retries = try recordedEvents(recording).filter { if case .subscriptionBillingRetry = $0.event { true } else { false } }
        try #require(!retries.isEmpty, "the recording has no billing retry")
        let plan = try LiveReplayPlan(recording: recording)
        let planned = plan.laterDecisions.values.joined().filter { if case .beginBillingRetry = $0.body { true } else { false } }
        #expect(planned.count == retries.count)
        let original = OriginalTransaction(transactionIdentifier: "live.1", payment: Payment(productIdentifier: "x", quantity: 1, applicationUsername: nil), transactionDate: 7)
        guard case .beginBillingRetry(_, let sent, _)? = planned.first?.body.retargeted(to: original) else {
            Issue.record("not a billing retry")
            return
        }
        #expect(sent == original)
    }
}
