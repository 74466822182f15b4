import Foundation
import StoreKitModel
import StoreKitRuntime
import Testing
@testable import StoreKitReplay

/// Live replay compares the store's later decisions (renewals, expiries, refunds) too.
@Suite struct LiveSubscriptionComparisonTests {
    /// A recording (4 devices, 3 purchases each) whose store renews subscriptions (each renewal also
    /// reaching the account's other device, F-U4) and lets some expire.
    static func recording() throws -> Recording { try recordInMemory(seed: 3, devices: 4, purchases: 3) }

    @Test("A renewal is a transaction of its own (renewal n of the purchase); an expiry is on the purchase's later-decisions track")
    func subscriptionTracks() throws {
        var identities = TransactionIdentities()
        var renewals: [LiveComparison.Track] = []
        var expiries: [LiveComparison.Track] = []
        try Self.recording().forEachUnit { unit in
            for recorded in unit.events {
                _ = identities.learn(recorded.event)
                guard let (track, _) = LiveComparison.classify(recorded.event, identities) else { continue }
                switch recorded.event {
                case .subscriptionRenewed: renewals.append(track)
                case .subscriptionExpired: expiries.append(track)
                default: break
                }
            }
        }
        #expect(renewals.count >= 2, "\(renewals)")
        var seen: [String: Int] = [:]  // renewals so far per device and purchase
        for (index, track) in renewals.enumerated() {
            guard case .transaction(.renewed(let device, let original, let ordinal)) = track else {
                Issue.record("renewal \(index + 1) is on \(track)")
                continue
            }
            seen["\(device) \(original)", default: 0] += 1
            #expect(ordinal == seen["\(device) \(original)"])
        }
        #expect(expiries.count >= 1)
        #expect(expiries.allSatisfy { if case .laterDecisions = $0 { true } else { false } }, "\(expiries)")
    }

    @Test("A replayed log without the store's later decisions diverges on their tracks (missing)")
    func missingLaterDecisionsDiverge() throws {
        let recording = try Self.recording()
        let stripped = MemoryLogStorage()
        try recording.forEachUnit { unit in
            let kept = unit.events.indices.filter { index in
                switch unit.events[index].event {
                case .subscriptionRenewed, .subscriptionExpired, .entitlementsRevoked: false
                default: true
                }
            }
            guard !kept.isEmpty else { return }
            _ = try stripped.appendUnit(kept.map { unit.payloads[$0] }, timestamp: unit.timestamp)
        }
        let outcome = try LiveComparison.compare(recording: recording, replayed: try Recording.storage(stripped))
        #expect(outcome.result.missing >= 3, "\(outcome.differingTracks)")
        #expect(outcome.differingTracks.contains { $0.description.hasPrefix("what the store later decided about") })
        #expect(outcome.differingTracks.contains { $0.description.hasPrefix("the outcome of renewal 1 of") })
    }
}
