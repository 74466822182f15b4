import StoreKitTestKit
import Testing
@testable import StoreKitModel

@Suite struct InvariantCheckerTests {
    private func check(_ events: [Event]) -> [Violation] {
        var checker = InvariantChecker()
        for (index, event) in events.enumerated() {
            checker.check(RecordedEvent(sequence: UInt64(index + 1), timestamp: 0, commandID: nil, event: event))
        }
        return checker.violations
    }

    private let key = TransactionKey(device: "d", number: 1)
    private let payment = Payment(productIdentifier: "p")
    private let content = HostedContent(contentIdentifier: "c", contentLength: 10, contentVersion: "1")

    @Test("A queue that follows the rules produces no violations")
    func cleanHistory() {
        var queue = QueueHarness()
        queue.ready()
        let key = queue.purchase(SampleProducts.desert)
        let downloads = (0..<2).map { DownloadKey(transaction: key, index: $0) }
        queue.send(.startDownloads(downloads))
        for download in downloads { queue.send(.completeDownload(download, contentURL: "/c")) }
        queue.send(.finishTransaction(key))
        var checker = InvariantChecker()
        for record in queue.recorded { checker.check(record) }
        #expect(checker.violations.isEmpty)
    }

    @Test("R-T1: a completed transaction that changes state again is a violation")
    func finalStateLeft() {
        let violations = check([.transactionAdded(key, payment), .transactionFailed(key, StoreError(.unknown, "")),
                                .transactionPurchased(key, identifier: "i", downloads: [], charged: true)])
        #expect(violations.map(\.rule) == ["R-T1"])
    }

    @Test("R-Q8: finishing a purchasing transaction is a violation")
    func finishWhilePurchasing() {
        let violations = check([.transactionAdded(key, payment), .transactionFinished(key)])
        #expect(violations.map(\.rule) == ["R-Q8"])
    }

    @Test("R-D3: finishing while a started download is still active loses content")
    func contentLost() {
        let download = DownloadKey(transaction: key, index: 0)
        let violations = check([.transactionAdded(key, payment),
                                .transactionPurchased(key, identifier: "i", downloads: [content], charged: true),
                                .downloadStarted(download), .transactionFinished(key)])
        #expect(violations.map(\.rule) == ["R-D3"])
    }

    @Test("R-Q9: a restored transaction after its restore finished is a violation")
    func restoreOrder() {
        let original = OriginalTransaction(transactionIdentifier: "o", payment: payment, transactionDate: 0)
        let violations = check([.restoreStarted(device: "d", restore: 1, applicationUsername: nil),
                                .restoreFinished(device: "d", restore: 1),
                                .transactionRestored(key, restore: 1, identifier: "n", original: original, downloads: [])])
        #expect(violations.map(\.rule) == ["R-Q9"])
    }

    @Test("R-Q9: restores are told apart by number: one still open while a later one ended is fine; one never started is named so")
    func restoresByNumber() {
        let original = OriginalTransaction(transactionIdentifier: "o", payment: payment, transactionDate: 0)
        let second = TransactionKey(device: "d", number: 2)
        let third = TransactionKey(device: "d", number: 3)
        let violations = check([.restoreStarted(device: "d", restore: 1, applicationUsername: nil),
                                .restoreStarted(device: "d", restore: 2, applicationUsername: nil),
                                .restoreFinished(device: "d", restore: 2),
                                .transactionRestored(key, restore: 1, identifier: "n1", original: original, downloads: []),
                                .transactionRestored(second, restore: 2, identifier: "n2", original: original, downloads: []),
                                .transactionRestored(third, restore: 5, identifier: "n3", original: original, downloads: [])])
        #expect(violations.map(\.message) == ["transaction d#2 was restored by restore 2 after that restore had ended",
                                               "transaction d#3 was restored by restore 5, which was never started"])
    }

    @Test("R-T3 and R-Q11: duplicate identifiers and downloads of unpaid transactions are violations")
    func identifiersAndDownloads() {
        let other = TransactionKey(device: "d", number: 2)
        let violations = check([.transactionAdded(key, payment), .transactionAdded(other, payment),
                                .transactionPurchased(key, identifier: "same", downloads: [], charged: true),
                                .transactionPurchased(other, identifier: "same", downloads: [], charged: true),
                                .downloadStarted(DownloadKey(transaction: TransactionKey(device: "d", number: 3), index: 0))])
        #expect(violations.map(\.rule) == ["R-T3", "R-T4"])
    }
}
