import Foundation
import Testing
import StoreKitModel
import StoreKitRoles
import StoreKitRuntime
import StoreKitSimulation
import StoreKitTestKit

/// The app's receipt says which purchases and renewals were at an introductory offer (F-O3): the
/// receipt fields `is_trial_period` and `is_in_intro_offer_period`, carried by the store's receipt
/// pieces (R-R2) to the app's observers; docs/storekit-fidelity.md.
@Suite struct ReceiptOfferTests {
    static let second = IntroductoryOfferTests.second

    /// The store's answer to refresh 1 of `device`: each entry's identifier and offer.
    static func answer(_ feed: IntroductoryOfferTests.Feed, device: String, at time: Int64) -> [(String, IntroductoryOfferPeriod?)]? {
        _ = feed.receive(.receiptRefreshStarted(device: device, request: 1), at: time)
        guard case .send(.deliverReceipt(device, 1, 0, let entries, true))? = feed.store.timerFired(.answerReceiptRefresh(device: device, request: 1), now: time).first
        else { return nil }
        return entries.map { ($0.transactionIdentifier, $0.introductoryOfferPeriod) }
    }

    @Test("F-O3: the store's receipt pieces mark a free trial's purchase (not the regular renewal after it) and a pay-as-you-go purchase and renewal at the offer price")
    func storeMarksEntries() throws {
        let feed = try IntroductoryOfferTests.Feed()
        let (_, trial) = feed.buy("plus.monthly", at: 0)
        _ = feed.renew(trial, at: 7 * Self.second)
        let (_, paid) = feed.buy("plus.yearly", device: "e", at: 0)
        _ = feed.renew(paid, at: 30 * Self.second)
        let trialReceipt = try #require(Self.answer(feed, device: "d", at: 40 * Self.second))
        #expect(trialReceipt.map(\.0) == ["d.1", "d.2"])
        #expect(trialReceipt.map(\.1) == [.freeTrial, nil])
        let paidReceipt = try #require(Self.answer(feed, device: "e", at: 40 * Self.second))
        #expect(paidReceipt.map(\.0) == ["e.1", "e.2"])
        #expect(paidReceipt.map(\.1) == [.introductoryPrice, .introductoryPrice])
        // A refund taken from the history is the plain purchase: offers are only on receipt entries.
        #expect(feed.store.projection.history(of: "a").purchases.allSatisfy { $0.introductoryOfferPeriod == nil })
    }

    @Test("F-O3: the app's observers get each entry's offer on requestDidFinish (isTrialPeriod, isInIntroductoryOfferPeriod), across pieces with and without offers")
    func observersReadOffers() throws {
        let device = LoopbackDevice(catalog: try IntroductoryOfferTests.catalog())
        let observer = device.launchWithObserver()
        device.paymentQueue.refreshReceipt()
        device.pump()
        // 150 entries: the first piece (100) has the offers, the second none, so both tags are used.
        let entries = (1...150).map { number in
            OriginalTransaction(transactionIdentifier: "d1.\(number)", payment: Payment(productIdentifier: "plus.monthly"), transactionDate: 1,
                                introductoryOfferPeriod: number == 1 ? .freeTrial : number == 2 ? .introductoryPrice : nil)
        }
        let pieces = StoreTestSession.deliverReceipt(device: "d1", request: 1, entries: entries)
        #expect(pieces.count == 2)
        for piece in pieces { #expect(device.send(piece)) }
        #expect(!device.events.contains { if case .commandRejected = $0.event { true } else { false } })
        let receipt = try #require(observer.receipts.first)
        #expect(observer.receipts.count == 1)
        #expect(receipt == entries)
        #expect(receipt.prefix(3).map(\.isTrialPeriod) == [true, false, false])
        #expect(receipt.prefix(3).map(\.isInIntroductoryOfferPeriod) == [false, true, false])
    }

    /// RevenueCat's purchase tester catalog (both subscriptions with a free trial, one group), a
    /// deterministic run whose apps refresh their receipt after every purchase.
    static func runWithTrials() throws -> (RunReport, [(UInt64, Int64, [UInt8])]) {
        let url = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("StoreKitModelTests/Fixtures/purchasetester-v1.1.storekit")
        var scenario = Scenario(seed: 11, devices: 12, catalog: try Catalog.load(contentsOf: url), catalogSource: "purchasetester-v1.1.storekit")
        scenario.apps.purchasesPerDevice = 2
        scenario.apps.receiptRefreshProbability = 1
        let environment = DeterministicEnvironment.inMemory(seed: scenario.seed)
        let report = try DeterministicRuntime(scenario: scenario, environment: environment).run()
        var records: [(UInt64, Int64, [UInt8])] = []
        try environment.storage.forEachRecord(from: 1) { records.append(($0, $1, Array($2))) }
        return (report, records)
    }

    @Test("F-O3: a whole run of RevenueCat's catalog: every account's first subscription purchase is a free trial on every receipt that lists it, nothing else is; the same seed logs the same bytes")
    func wholeRunMarksTrials() throws {
        let (report, records) = try Self.runWithTrials()
        #expect(report.violations.isEmpty)
        #expect(report.totals.receiptsRefreshed > 0)
        let again = try Self.runWithTrials().1
        #expect(again.count == records.count)
        #expect(zip(again, records).allSatisfy { $0.0 == $1.0 && $0.1 == $1.1 && $0.2 == $1.2 })
        // An independent reading of the log: the first subscription purchase of each account (the
        // catalog has one group) is its trial (F-O2); renewals and later purchases are not.
        var accountOfDevice: [String: String] = [:]
        var payments: [TransactionKey: Payment] = [:]
        var subscribed: Set<String> = []
        var trials: [String: String] = [:]  // trial purchase → account
        var listedTrials: [String: Int] = [:]
        var entriesSeen = 0
        for (_, _, payload) in records {
            switch try EventCodec.decodeEvent(payload).event {
            case .deviceRegistered(let device, let account): accountOfDevice[device] = account
            case .transactionAdded(let key, let payment): payments[key] = payment
            case .transactionPurchased(let key, let identifier, _, let charged):
                guard charged, let payment = payments[key], payment.productIdentifier != "lifetime",
                      let account = payment.applicationUsername ?? accountOfDevice[key.device] else { continue }
                if subscribed.insert(account).inserted { trials[identifier] = account }
            case .receiptDelivered(_, _, _, let entries, _):
                for entry in entries {
                    entriesSeen += 1
                    #expect(entry.introductoryOfferPeriod == (trials[entry.transactionIdentifier] == nil ? nil : .freeTrial),
                            "\(entry.transactionIdentifier)")
                    if entry.isTrialPeriod { listedTrials[entry.transactionIdentifier, default: 0] += 1 }
                }
            default: break
            }
        }
        // Several accounts' trials reach receipts, and each is marked on every receipt listing it.
        #expect(Set(listedTrials.keys.compactMap { trials[$0] }).count >= 2)
        #expect(entriesSeen > listedTrials.values.reduce(0, +))
    }
}
