import StoreKitModel
import Testing

/// The queue's state machine that the engine asserts on every event it appends
/// (`QueueProjection.brokenTransition`, docs/ARCHITECTURE.md "One engine").
@Suite struct QueueTransitionTests {
    let key = TransactionKey(device: "d1", number: 1)
    let content = HostedContent(contentIdentifier: "level", contentLength: 10, contentVersion: "1")

    /// A queue with device d1 running and transaction 1 added, folded from its events.
    func projection(_ more: [Event] = []) -> QueueProjection {
        var projection = QueueProjection()
        let events: [Event] = [.deviceRegistered(device: "d1", account: "a1"), .appLaunched(device: "d1"),
                               .transactionAdded(key, Payment(productIdentifier: "coins"))] + more
        for (index, event) in events.enumerated() {
            #expect(projection.brokenTransition(event) == nil, "\(event.name) should be allowed")
            projection.apply(RecordedEvent(sequence: UInt64(index + 1), timestamp: 0, commandID: nil, event: event))
        }
        return projection
    }

    @Test("A purchasing transaction may be deferred, purchased or failed, but not finished")
    func purchasingEdges() {
        let queue = projection()
        #expect(queue.brokenTransition(.transactionDeferred(key)) == nil)
        #expect(queue.brokenTransition(.transactionPurchased(key, identifier: "d1.1", downloads: [], charged: true)) == nil)
        #expect(queue.brokenTransition(.transactionFailed(key, StoreError(.unknown, "no"))) == nil)
        #expect(queue.brokenTransition(.transactionFinished(key)) != nil)
        #expect(queue.brokenTransition(.askToBuyDeclined(key)) != nil)
    }

    @Test("A complete transaction is only finished: it is never decided again")
    func completeEdges() {
        let queue = projection([.transactionPurchased(key, identifier: "d1.1", downloads: [], charged: true)])
        #expect(queue.brokenTransition(.transactionFinished(key)) == nil)
        #expect(queue.brokenTransition(.transactionFailed(key, StoreError(.unknown, "no"))) != nil)
        #expect(queue.brokenTransition(.transactionPurchased(key, identifier: "d1.1", downloads: [], charged: true)) != nil)
        #expect(queue.brokenTransition(.transactionDeferred(key)) != nil)
    }

    @Test("A finished transaction and a used number cannot come back")
    func finishedIsGone() {
        let queue = projection([.transactionPurchased(key, identifier: "d1.1", downloads: [], charged: true), .transactionFinished(key)])
        #expect(queue.brokenTransition(.transactionFinished(key)) != nil)
        #expect(queue.brokenTransition(.transactionAdded(key, Payment(productIdentifier: "coins"))) != nil)
        #expect(queue.brokenTransition(.transactionAdded(TransactionKey(device: "d1", number: 2), Payment(productIdentifier: "coins"))) == nil)
        #expect(queue.brokenTransition(.transactionAdded(TransactionKey(device: "d2", number: 1), Payment(productIdentifier: "coins"))) != nil)
    }

    @Test("A download moves waiting, active, paused, active, finished, and never on from finished")
    func downloadEdges() {
        let download = DownloadKey(transaction: key, index: 0)
        var queue = projection([.transactionPurchased(key, identifier: "d1.1", downloads: [content], charged: true)])
        #expect(queue.brokenTransition(.downloadPaused(download)) != nil)
        #expect(queue.brokenTransition(.downloadFinished(download, contentURL: "c")) != nil)
        #expect(queue.brokenTransition(.downloadStarted(DownloadKey(transaction: key, index: 1))) != nil)
        var sequence: UInt64 = 10
        for event: Event in [.downloadStarted(download), .downloadPaused(download), .downloadResumed(download),
                             .downloadFinished(download, contentURL: "c")] {
            #expect(queue.brokenTransition(event) == nil, "\(event.name) should be allowed")
            queue.apply(RecordedEvent(sequence: sequence, timestamp: 0, commandID: nil, event: event))
            sequence += 1
        }
        #expect(queue.brokenTransition(.downloadStarted(download)) != nil)
        #expect(queue.brokenTransition(.downloadCancelled(download)) != nil)
        #expect(queue.brokenTransition(.downloadFailed(download, error: StoreError(.unknown, "no"))) != nil)
    }

    @Test("A restore ends once, and only one in progress gets transactions")
    func restoreEdges() {
        var queue = projection()
        #expect(queue.brokenTransition(.restoreFinished(device: "d1", restore: 1)) != nil)
        queue.apply(RecordedEvent(sequence: 10, timestamp: 0, commandID: nil, event: .restoreStarted(device: "d1", restore: 1, applicationUsername: nil)))
        #expect(queue.brokenTransition(.restoreStarted(device: "d1", restore: 1, applicationUsername: nil)) != nil)
        #expect(queue.brokenTransition(.restoreFinished(device: "d1", restore: 1)) == nil)
        queue.apply(RecordedEvent(sequence: 11, timestamp: 0, commandID: nil, event: .restoreFinished(device: "d1", restore: 1)))
        #expect(queue.brokenTransition(.restoreFailed(device: "d1", restore: 1, error: StoreError(.unknown, "no"))) != nil)
    }

    @Test("Device events need a registered device in the state the command required: launched once, observers attached once, receipts in order")
    func deviceEdges() {
        var queue = projection()
        let unknown = "d9"
        #expect(queue.brokenTransition(.deviceRegistered(device: "d1", account: "a1")) != nil)
        #expect(queue.brokenTransition(.appLaunched(device: "d1")) != nil)
        #expect(queue.brokenTransition(.appLaunched(device: unknown)) != nil)
        #expect(queue.brokenTransition(.paymentsAllowedChanged(device: unknown, allowed: false)) != nil)
        #expect(queue.brokenTransition(.observerDetached(device: "d1", observer: "o1")) != nil)
        var sequence: UInt64 = 10
        for event: Event in [.observerAttached(device: "d1", observer: "o1"), .receiptRefreshStarted(device: "d1", request: 1)] {
            #expect(queue.brokenTransition(event) == nil, "\(event.name) should be allowed")
            queue.apply(RecordedEvent(sequence: sequence, timestamp: 0, commandID: nil, event: event))
            sequence += 1
        }
        #expect(queue.brokenTransition(.observerAttached(device: "d1", observer: "o1")) != nil)
        #expect(queue.brokenTransition(.observerDetached(device: "d1", observer: "o1")) == nil)
        #expect(queue.brokenTransition(.receiptRefreshStarted(device: "d1", request: 1)) != nil)
        #expect(queue.brokenTransition(.receiptDelivered(device: "d1", request: 1, firstIndex: 0, entries: [], isLast: true)) == nil)
        #expect(queue.brokenTransition(.receiptDelivered(device: "d1", request: 1, firstIndex: 3, entries: [], isLast: true)) != nil)
        #expect(queue.brokenTransition(.receiptDelivered(device: "d1", request: 2, firstIndex: 0, entries: [], isLast: true)) != nil)
        queue.apply(RecordedEvent(sequence: sequence, timestamp: 0, commandID: nil, event: .appTerminated(device: "d1")))
        #expect(queue.brokenTransition(.appTerminated(device: "d1")) != nil)
        #expect(queue.brokenTransition(.observerAttached(device: "d1", observer: "o2")) != nil)
    }

    @Test("A subscription expires once and a purchase is refunded once")
    func subscriptionEdges() {
        var queue = projection()
        let original = OriginalTransaction(transactionIdentifier: "d1.1", payment: Payment(productIdentifier: "monthly"), transactionDate: 0)
        #expect(queue.brokenTransition(.subscriptionExpired(device: "d1", original: original)) == nil)
        #expect(queue.brokenTransition(.entitlementsRevoked(device: "d1", original: original)) == nil)
        queue.apply(RecordedEvent(sequence: 10, timestamp: 0, commandID: nil, event: .subscriptionExpired(device: "d1", original: original)))
        queue.apply(RecordedEvent(sequence: 11, timestamp: 0, commandID: nil, event: .entitlementsRevoked(device: "d1", original: original)))
        #expect(queue.brokenTransition(.subscriptionExpired(device: "d1", original: original)) != nil)
        #expect(queue.brokenTransition(.subscriptionBillingRetry(device: "d1", original: original, gracePeriodNanoseconds: 0)) != nil)
        #expect(queue.brokenTransition(.entitlementsRevoked(device: "d1", original: original)) != nil)
    }
}
