import StoreKitTestKit
import Testing
@testable import StoreKitModel

@Suite struct QueueRuleTests {
    @Test("R-Q1: a payment added while payments are not allowed becomes a failed transaction with paymentNotAllowed")
    func paymentsNotAllowed() {
        var queue = QueueHarness()
        queue.ready()
        queue.send(.setPaymentsAllowed(device: "d1", allowed: false))
        #expect(queue.projection.device("d1")?.canMakePayments == false)
        let decision = queue.send(.addPayment(device: "d1", payment: Payment(productIdentifier: SampleProducts.coins)))
        guard case .accept(let events) = decision, events.count == 2, case .transactionAdded(let key, _) = events[0],
              case .transactionFailed(key, let error) = events[1] else {
            Issue.record("expected transactionAdded then transactionFailed, got \(decision)")
            return
        }
        #expect(error.code == .paymentNotAllowed && error.code.rawValue == 4)
        #expect(queue.transaction(key)?.transactionState == .failed)
        queue.send(.setPaymentsAllowed(device: "d1", allowed: true))
        let allowed = queue.buy(SampleProducts.coins)
        #expect(queue.transaction(allowed)?.transactionState == .purchasing)
    }

    @Test("R-Q2: a device registers once and its queue keeps its contents across launches")
    func onePersistentQueuePerInstall() {
        var queue = QueueHarness()
        queue.ready()
        #expect(queue.rejection(queue.send(.registerDevice(device: "d1", account: "a1"))) == .deviceAlreadyRegistered)
        let key = queue.buy(SampleProducts.coins)
        queue.send(.terminateApp(device: "d1"))
        queue.send(.launchApp(device: "d1"))
        #expect(queue.transaction(key)?.transactionState == .purchasing)
        #expect(queue.projection.device("d1")?.launchCount == 2)
    }

    @Test("R-Q3: observers attach and detach; attaching twice or detaching a stranger is refused")
    func observersAttachAndDetach() {
        var queue = QueueHarness()
        queue.ready()
        #expect(queue.rejection(queue.send(.attachObserver(device: "d1", observer: "o1"))) == .observerAlreadyAttached)
        queue.send(.attachObserver(device: "d1", observer: "o2"))
        #expect(queue.projection.device("d1")?.observers == ["o1", "o2"])
        queue.send(.detachObserver(device: "d1", observer: "o1"))
        #expect(queue.projection.device("d1")?.observers == ["o2"])
        #expect(queue.rejection(queue.send(.detachObserver(device: "d1", observer: "o1"))) == .observerNotAttached)
    }

    @Test("R-Q4: terminating the app detaches its observers but keeps unfinished transactions")
    func terminateKeepsTransactions() {
        var queue = QueueHarness()
        queue.ready()
        let key = queue.purchase(SampleProducts.removeAds)
        queue.send(.terminateApp(device: "d1"))
        #expect(queue.projection.device("d1")?.observers.isEmpty == true)
        #expect(queue.transaction(key)?.transactionState == .purchased)
    }

    @Test("R-Q7: an unknown product or a quantity of 0 or less is refused and changes nothing",
          arguments: [("no.such.product", 1, Rejection.Code.unknownProduct),
                      (SampleProducts.coins, 0, .invalidQuantity),
                      (SampleProducts.coins, -3, .invalidQuantity)])
    func invalidPayments(product: String, quantity: Int, expected: Rejection.Code) {
        var queue = QueueHarness()
        queue.ready()
        let before = queue.projection.device("d1")
        let decision = queue.send(.addPayment(device: "d1", payment: Payment(productIdentifier: product, quantity: quantity)))
        #expect(queue.rejection(decision) == expected)
        #expect(queue.projection.device("d1") == before)
        guard case .commandRejected(let command, let rejection) = queue.recorded.last?.event else {
            Issue.record("the rejection was not logged")
            return
        }
        #expect(command == .addPayment(device: "d1", payment: Payment(productIdentifier: product, quantity: quantity)))
        #expect(rejection.code == expected)
    }

    @Test("R-Q7: a valid payment creates a transaction in state purchasing")
    func validPaymentIsPurchasing() {
        var queue = QueueHarness()
        queue.ready()
        let key = queue.buy(SampleProducts.coins, quantity: 3)
        let transaction = queue.transaction(key)
        #expect(transaction?.transactionState == .purchasing)
        #expect(transaction?.payment.quantity == 3)
        #expect(transaction?.transactionIdentifier == nil)
    }

    @Test("R-Q8: finishing a purchasing or deferred transaction is refused; finished ones leave; finishing twice is harmless")
    func finishRules() {
        var queue = QueueHarness()
        queue.ready()
        let key = queue.buy(SampleProducts.coins)
        #expect(queue.rejection(queue.send(.finishTransaction(key))) == .transactionStillPurchasing)
        queue.send(.decidePurchase(key, .deferred))
        #expect(queue.rejection(queue.send(.finishTransaction(key))) == .transactionStillPurchasing)
        queue.send(.decidePurchase(key, .purchased(charged: true)))
        #expect(queue.send(.finishTransaction(key)) == .accept([.transactionFinished(key)]))
        #expect(queue.transaction(key) == nil)
        #expect(queue.send(.finishTransaction(key)) == .accept([]))
        let unknown = TransactionKey(device: "d1", number: 99)
        #expect(queue.rejection(queue.send(.finishTransaction(unknown))) == .transactionNotFound)
    }

    @Test("R-Q8: a failed transaction can and must be finished")
    func finishFailed() {
        var queue = QueueHarness()
        queue.ready()
        let key = queue.buy(SampleProducts.coins)
        queue.send(.decidePurchase(key, .failed(StoreError(.paymentCancelled, "cancelled"))))
        #expect(queue.transaction(key)?.error?.code == .paymentCancelled)
        #expect(queue.send(.finishTransaction(key)) == .accept([.transactionFinished(key)]))
    }

    @Test("R-Q11: downloads start only for a purchased or restored transaction that is not finished")
    func downloadPreconditions() {
        var queue = QueueHarness()
        queue.ready()
        let pendingKey = queue.buy(SampleProducts.forest)
        let early = DownloadKey(transaction: pendingKey, index: 0)
        #expect(queue.rejection(queue.send(.startDownloads([early]))) == .downloadNotAllowed)
        queue.send(.decidePurchase(pendingKey, .purchased(charged: true)))
        #expect(queue.send(.startDownloads([early])) == .accept([.downloadStarted(early)]))
        #expect(queue.send(.startDownloads([early])) == .accept([]))  // Already under way: harmless.
        queue.send(.completeDownload(early, contentURL: "/c"))
        #expect(queue.rejection(queue.send(.startDownloads([early]))) == .invalidDownloadTransition)
        let other = queue.purchase(SampleProducts.desert)
        queue.send(.finishTransaction(other))
        let late = DownloadKey(transaction: other, index: 0)
        let decision = queue.send(.startDownloads([late]))
        #expect(queue.rejection(decision) == .downloadNotAllowed)
        #expect(queue.rejection(queue.send(.startDownloads([]))) == .invalidArgument)
        let missing = DownloadKey(transaction: pendingKey, index: 7)
        #expect(queue.rejection(queue.send(.startDownloads([missing]))) == .unknownDownload)
    }

    @Test("A retried command id takes effect once")
    func commandsApplyOnce() {
        var queue = QueueHarness()
        queue.ready()
        let id = CommandID(origin: "app", number: 42)
        let payment = CommandBody.addPayment(device: "d1", payment: Payment(productIdentifier: SampleProducts.coins))
        guard case .accept = queue.send(payment, id: id) else {
            Issue.record("first send was not accepted")
            return
        }
        #expect(queue.send(payment, id: id) == .duplicate)
        #expect(queue.projection.device("d1")?.pending.count == 1)
    }

    @Test("A duplicate's answer carries the last sequence the original produced, not the log's last")
    func duplicateCarriesOriginalSequence() throws {
        var queue = QueueHarness()
        queue.ready()
        let first = Command(id: CommandID(origin: "app", number: 1),
                            body: .addPayment(device: "d1", payment: Payment(productIdentifier: SampleProducts.coins)))
        let original = try queue.engine.handle(first, timestamp: 1)
        _ = queue.send(.addPayment(device: "d1", payment: Payment(productIdentifier: SampleProducts.coins)), id: CommandID(origin: "app", number: 2))
        #expect(queue.projection.lastSequence > original.lastSequence)
        let retried = try queue.engine.handle(first, timestamp: 2)
        #expect(retried.decision == .duplicate)
        #expect(retried.lastSequence == original.lastSequence)
        // Rebuilt from the log, the engine answers the same.
        var window = CommandWindow(capacity: 64)
        window.insert(first.id, sequence: 7)
        window.insert(CommandID(origin: "app", number: 64), sequence: 9)
        #expect(window.lastSequence(of: first.id) == 7)
        window.insert(CommandID(origin: "app", number: 65), sequence: 10)
        #expect(window.lastSequence(of: first.id) == nil, "out of the window: unknown, never another command's")
    }

    @Test("Senders are remembered up to a bound: a new one beyond it is refused and not remembered; known ones go on")
    func senderCap() {
        var window = CommandWindow(capacity: 64, maximumOrigins: 3)
        for origin in ["a", "b", "c"] { window.insert(CommandID(origin: origin, number: 1)) }
        #expect(window.isOriginOverLimit("d"))
        #expect(!window.isOriginOverLimit("a"))
        #expect(window.originCount == 3)
        var projection = QueueProjection(commandWindow: 64)
        projection.apply(RecordedEvent(sequence: 1, timestamp: 0, commandID: CommandID(origin: "x", number: 1),
                                       event: .commandRejected(.launchApp(device: "d"), Rejection(.tooManySenders, "full"))))
        #expect(projection.recentCommands.originCount == 0, "a refused sender is not remembered")
    }

    @Test("Devices are registered up to a bound: one more is refused with tooManyDevices and not registered; known ones go on")
    func deviceCap() {
        var projection = QueueProjection()
        projection.maximumDevices = 2
        var sequence: UInt64 = 0
        func handle(_ body: CommandBody) -> Decision {
            sequence += 1
            let command = Command(id: CommandID(origin: "apps.0", number: sequence), body: body)
            let decision = projection.decide(command, catalog: .sample)
            let events: [Event] = switch decision {
            case .accept(let events): events
            case .reject(let rejection): [QueueProjection.rejectionEvent(command, rejection)]
            case .duplicate: []
            }
            for event in events { projection.apply(RecordedEvent(sequence: sequence, timestamp: 0, commandID: command.id, event: event)) }
            return decision
        }
        #expect(handle(.registerDevice(device: "d1", account: "a1")) == .accept([.deviceRegistered(device: "d1", account: "a1")]))
        #expect(handle(.registerDevice(device: "d2", account: "a1")) == .accept([.deviceRegistered(device: "d2", account: "a1")]))
        guard case .reject(let rejection) = handle(.registerDevice(device: "d3", account: "a1")) else {
            Issue.record("a third device was registered past the bound of 2")
            return
        }
        #expect(rejection.code == .tooManyDevices && rejection.message.contains("partitions"), "\(rejection)")
        #expect(projection.deviceCount == 2 && !projection.isRegistered("d3"))
        #expect(handle(.launchApp(device: "d2")) == .accept([.appLaunched(device: "d2")]))
        #expect(QueueProjection.defaultMaximumDevices == 250_000 && QueueProjection().maximumDevices == 250_000)
    }

    @Test("A sender that sent a few commands costs a few words, not the whole 65,536-id window")
    func smallSendersAreSmall() {
        var window = CommandWindow(capacity: 65_536)
        for origin in 0..<1_000 { window.insert(CommandID(origin: "sender-\(origin)", number: 3)) }
        #expect(window.count == 1_000)
        #expect(window.contains(CommandID(origin: "sender-7", number: 3)))
        #expect(!window.contains(CommandID(origin: "sender-7", number: 2)))
        window.insert(CommandID(origin: "sender-7", number: 70_000))
        #expect(window.contains(CommandID(origin: "sender-7", number: 3)), "older than the window counts as applied")
        #expect(!window.contains(CommandID(origin: "sender-7", number: 69_999)))
    }

    @Test("A command that skips ahead of its sender's next number is recognised (the live queue answers it 'retry later')")
    func skipsAhead() {
        var window = CommandWindow(capacity: 64)
        #expect(window.skipsAhead(CommandID(origin: "o", number: 9)), "a sender starts at 1: 1 to 8 are on their way")
        #expect(!window.skipsAhead(CommandID(origin: "o", number: 1)))
        #expect(!window.skipsAhead(CommandID(origin: "o", number: 1_000)), "beyond the window's reach: a forged id, refused, not held")
        window.insert(CommandID(origin: "o", number: 1))
        #expect(!window.skipsAhead(CommandID(origin: "o", number: 2)))
        #expect(window.skipsAhead(CommandID(origin: "o", number: 3)), "command 2 is still on its way")
        window.insert(CommandID(origin: "o", number: 2))
        #expect(!window.skipsAhead(CommandID(origin: "o", number: 3)))
    }

    @Test("The command window remembers ids per origin within a bounded window")
    func commandWindowIsBounded() {
        var window = CommandWindow(capacity: 64)
        for number in [1, 2, 4, 70] as [UInt64] { window.insert(CommandID(origin: "o", number: number)) }
        #expect(window.contains(CommandID(origin: "o", number: 70)))
        #expect(!window.contains(CommandID(origin: "o", number: 69)))  // A hole inside the window: not applied.
        #expect(!window.contains(CommandID(origin: "o", number: 71)))
        #expect(window.contains(CommandID(origin: "o", number: 4)))    // Older than the window: treated as applied.
        #expect(!window.contains(CommandID(origin: "other", number: 70)))
        window.insert(CommandID(origin: "o", number: 69))
        #expect(window.contains(CommandID(origin: "o", number: 69)))
        #expect(window.count <= 64)
    }

    @Test("Commands to unknown devices, or apps that are not running, are refused")
    func lifecycleRejections() {
        var queue = QueueHarness()
        #expect(queue.rejection(queue.send(.launchApp(device: "ghost"))) == .unknownDevice)
        queue.send(.registerDevice(device: "d1", account: "a1"))
        #expect(queue.rejection(queue.send(.addPayment(device: "d1", payment: Payment(productIdentifier: SampleProducts.coins)))) == .appNotRunning)
        #expect(queue.rejection(queue.send(.attachObserver(device: "d1", observer: "o"))) == .appNotRunning)
        queue.send(.launchApp(device: "d1"))
        #expect(queue.rejection(queue.send(.launchApp(device: "d1"))) == .appAlreadyRunning)
        #expect(queue.rejection(queue.send(.registerDevice(device: "", account: "a1"))) == .invalidArgument)
    }

    @Test("A device name that would leave the run directory's content and apps folders is refused", arguments: [
        "../../tmp/evil", "a/b", ".", "..", "a\u{0}b",
    ])
    func deviceNamesThatAreNotFolders(name: String) {
        var queue = QueueHarness()
        #expect(queue.rejection(queue.send(.registerDevice(device: name, account: "a1"))) == .invalidArgument)
        #expect(queue.projection.device(name) == nil)
        queue.send(.registerDevice(device: "device-0001.a_b", account: "a1"))
        #expect(queue.projection.device("device-0001.a_b") != nil)
    }

    @Test("A command number far ahead of its origin is refused and cannot make the origin's real commands duplicates")
    func poisonedCommandNumber() {
        var queue = QueueHarness()
        queue.send(.registerDevice(device: "d1", account: "a1"), id: CommandID(origin: "victim", number: 1))
        let forged = queue.send(.launchApp(device: "d1"), id: CommandID(origin: "victim", number: .max))
        #expect(queue.rejection(forged) == .commandNumberOutOfWindow)
        #expect(queue.projection.device("d1")?.isRunning == false)
        // The victim's next real command is applied, not answered "duplicate".
        let real = queue.send(.launchApp(device: "d1"), id: CommandID(origin: "victim", number: 2))
        #expect(real == .accept([.appLaunched(device: "d1")]))
        #expect(queue.projection.device("d1")?.isRunning == true)
    }
}

/// Totals of several partitions are summed field by field (a field left out of `add` went
/// missing from a two-partition run's summary once: `declined`).
@Suite struct EventTotalsTests {
    @Test("adding totals to empty ones gives them back, every field included")
    func addKeepsEveryField() {
        var totals = EventTotals()
        totals.events = 1; totals.purchased = 2; totals.failed = 3; totals.restored = 4; totals.deferred = 5
        totals.finished = 6; totals.downloadsFinished = 7; totals.downloadsFailed = 8; totals.downloadsCancelled = 9
        totals.rejections = 10; totals.restoresFinished = 11; totals.restoresFailed = 12; totals.declined = 13
        totals.renewed = 16; totals.expired = 17; totals.revoked = 18
        totals.receiptsRefreshed = 19; totals.receiptEntries = 20
        totals.failuresByCode = [.unknown: 14, .paymentNotAllowed: 15]
        let fields = Mirror(reflecting: totals).children.count
        #expect(fields == 19, "EventTotals has \(fields) fields: set the new one here and sum it in EventTotals.add")
        var sum = EventTotals()
        sum.add(totals)
        #expect(sum == totals)
        sum.add(totals)
        #expect(sum.declined == 26 && sum.failuresByCode[.paymentNotAllowed] == 30)
    }
}
