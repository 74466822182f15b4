import StoreKitTestKit
import Testing
@testable import StoreKitModel

/// StoreKit behaviours the seeds are silent on, made to match real StoreKit (docs/storekit-fidelity.md).
@Suite struct StoreKitFidelityTests {
    /// Apple's `SKError.Code` names and numbers (SKError.h, StoreKit 1).
    static let appleCodes: [(String, UInt8)] = [
        ("unknown", 0), ("clientInvalid", 1), ("paymentCancelled", 2), ("paymentInvalid", 3), ("paymentNotAllowed", 4),
        ("storeProductNotAvailable", 5), ("cloudServicePermissionDenied", 6), ("cloudServiceNetworkConnectionFailed", 7),
        ("cloudServiceRevoked", 8), ("privacyAcknowledgementRequired", 9), ("unauthorizedRequestData", 10),
        ("invalidOfferIdentifier", 11), ("invalidSignature", 12), ("missingOfferParams", 13), ("invalidOfferPrice", 14),
        ("overlayCancelled", 15), ("overlayInvalidConfiguration", 16), ("overlayTimeout", 17), ("ineligibleForOffer", 18),
        ("unsupportedPlatform", 19), ("overlayPresentedInBackgroundScene", 20),
    ]

    @Test("F-E1: every error code has SKError's name and number, and nothing else is a code")
    func skErrorCodes() {
        #expect(StoreError.Code.allCases.map { String(describing: $0) } == Self.appleCodes.map(\.0))
        #expect(StoreError.Code.allCases.map(\.rawValue) == Self.appleCodes.map(\.1))
        #expect(StoreError.domain == "SKErrorDomain")
    }

    @Test("F-E1: errors encode as SKError's number; codes 21 and 22 of sksim 0.3.0 logs still decode, as unknown with their message")
    func legacyCodesDecode() throws {
        // The bytes sksim 0.3.0 wrote for restoreFailed (invented code 22) and downloadFailed (21).
        let restoreFailed = try #require(CodecGoldenTests.bytes(fromHex: "020106676f6c64656eac020f01640216026e6f"))
        let downloadFailed = try #require(CodecGoldenTests.bytes(fromHex: "020106676f6c64656eac02160b6465766963652d303030310701150764726f70706564"))
        #expect(try EventCodec.decodeEvent(restoreFailed).event == .restoreFailed(device: "d", restore: 2, error: StoreError(.unknown, "no")))
        let download = DownloadKey(transaction: TransactionKey(device: "device-0001", number: 7), index: 1)
        #expect(try EventCodec.decodeEvent(downloadFailed).event == .downloadFailed(download, error: StoreError(.unknown, "dropped")))
        let failed = EventCodec.encode(.transactionFailed(TransactionKey(device: "d", number: 1), StoreError(.paymentNotAllowed, "x")), commandID: nil)
        #expect(failed.suffix(3) == [4, 1, UInt8(ascii: "x")])
        // 23 and above were never written: still refused, never trapped.
        var unknown = restoreFailed
        unknown[unknown.count - 4] = 23
        #expect(throws: DecodingFailure.self) { try EventCodec.decodeEvent(unknown) }
    }

    @Test("F-P1: a payment's quantity is at most 10; 11 is refused with what to do", arguments: [10, 11])
    func quantityAtMostTen(quantity: Int) {
        var queue = QueueHarness()
        queue.ready()
        let decision = queue.send(.addPayment(device: "d1", payment: Payment(productIdentifier: SampleProducts.coins, quantity: quantity)))
        if quantity <= 10 {
            #expect(queue.rejection(decision) == nil)
        } else {
            guard case .reject(let rejection) = decision else {
                Issue.record("quantity \(quantity) was accepted")
                return
            }
            #expect(rejection.code == .invalidQuantity)
        }
    }

    @Test("F-A1: an Ask to Buy request the parent declines stays deferred, and the store cannot decide it again")
    func declinedStaysDeferred() {
        var queue = QueueHarness()
        queue.ready()
        let key = queue.buy(SampleProducts.removeAds)
        #expect(queue.rejection(queue.send(.decidePurchase(key, .declined))) == .transactionNotAwaitingStore)
        queue.send(.decidePurchase(key, .deferred))
        guard case .accept(let events) = queue.send(.decidePurchase(key, .declined)) else {
            Issue.record("declining a deferred transaction was refused")
            return
        }
        #expect(events == [.askToBuyDeclined(key)])
        #expect(queue.transaction(key)?.transactionState == .deferred)
        #expect(queue.transaction(key)?.error == nil)
        #expect(queue.projection.device("d1")?.onlyDeclinedPending == true)
        #expect(queue.rejection(queue.send(.decidePurchase(key, .purchased(charged: true)))) == .transactionNotAwaitingStore)
        #expect(queue.rejection(queue.send(.finishTransaction(key))) == .transactionStillPurchasing)
        #expect(queue.projection.totals.declined == 1)
    }

    @Test("F-R1: non-renewing subscriptions and consumables are not restorable; non-consumables and auto-renewables are",
          arguments: ProductKind.allCases)
    func restorableKinds(kind: ProductKind) {
        #expect(kind.isRestorable == (kind == .nonConsumable || kind == .autoRenewableSubscription))
    }

    @Test("F-R1: a restore piece holding a non-renewing subscription is refused")
    func nonRenewingNotRestored() {
        var queue = QueueHarness()
        queue.ready()
        queue.send(.restoreCompletedTransactions(device: "d1", applicationUsername: nil))
        let original = OriginalTransaction(transactionIdentifier: "d0.1", payment: Payment(productIdentifier: SampleProducts.seasonPass), transactionDate: 0)
        let decision = queue.send(.completeRestore(device: "d1", restore: 1, firstIndex: 0, originals: [original], isLast: true))
        #expect(queue.rejection(decision) == .invalidArgument)
    }
}
