import StoreKitExplore
import StoreKitModel
import StoreKitRoles
import StoreKitSim
import Testing

@Suite struct AppleNamesTests {
    @Test("SKError's codes have Apple's numbers and bridge to NSError in SKErrorDomain")
    func errorCodes() {
        #expect(SKErrorDomain == "SKErrorDomain")
        #expect(SKError.Code.paymentCancelled.rawValue == 2)
        #expect(SKError.Code.storeProductNotAvailable.rawValue == 5)
        #expect(SKError.Code.overlayPresentedInBackgroundScene.rawValue == 20)
        let error: any Error = SKError(.paymentNotAllowed)
        #expect((error as NSError).domain == SKErrorDomain)
        #expect((error as NSError).code == 4)
        #expect((error as? SKError)?.code == .paymentNotAllowed)
        var caught = false
        do { throw SKError(.paymentCancelled) } catch SKError.paymentCancelled { caught = true } catch {}
        #expect(caught)
    }

    @Test("transaction and download states have Apple's raw values")
    func rawValues() {
        #expect([SKPaymentTransactionState.purchasing, .purchased, .failed, .restored, .deferred].map(\.rawValue) == [0, 1, 2, 3, 4])
        #expect([SKDownloadState.waiting, .active, .paused, .finished, .failed, .cancelled].map(\.rawValue) == [0, 1, 2, 3, 4, 5])
        #expect([SKProductDiscount.PaymentMode.payAsYouGo, .payUpFront, .freeTrial].map(\.rawValue) == [0, 1, 2])
        #expect([SKProduct.PeriodUnit.day, .week, .month, .year].map(\.rawValue) == [0, 1, 2, 3])
    }

    @Test("Apple's global constants exist with their types: the download's unknown time, the receipt refresh's property keys")
    func globalConstants() {
        let unknown: TimeInterval = SKDownloadTimeRemainingUnknown
        #expect(unknown == -1)
        let properties: [String: Any] = [SKReceiptPropertyIsExpired: 1, SKReceiptPropertyIsRevoked: 0, SKReceiptPropertyIsVolumePurchase: 0]
        #expect(SKReceiptRefreshRequest(receiptProperties: properties).receiptProperties?.count == 3)
    }

    @Test("outside any simulated device, the default queue does nothing and there is no receipt")
    func outsideADevice() {
        #expect(!SKPaymentQueue.canMakePayments())
        #expect(SKPaymentQueue.default().transactions.isEmpty)
        #expect(readAppReceipt() == nil)
        #expect(Bundle.main.appStoreReceiptURL == nil)
    }

    @Test("SKPaymentQueueDelegate: set on the queue and held weakly, its optional methods defaulting as StoreKit's; the code redemption sheet and price consent are calls that change nothing")
    func queueDelegate() {
        final class Delegate: NSObject, SKPaymentQueueDelegate {}
        let queue = SKPaymentQueue.default()
        var delegate: Delegate? = Delegate()
        queue.delegate = delegate
        #expect(queue.delegate === delegate)
        #expect(delegate?.paymentQueueShouldShowPriceConsent(queue) == true)
        queue.presentCodeRedemptionSheet()
        queue.showPriceConsentIfNeeded()
        SKStoreReviewController.requestReview()
        #expect(queue.transactions.isEmpty)
        delegate = nil
        #expect(queue.delegate == nil)
    }

    @Test("an NSObject observer on every device hears its own device's transactions through SKPaymentQueue.default()")
    func observerPerDevice() throws {
        var scenario = Scenario.exploration(devices: 2, purchasesPerDevice: 2, observers: [.deliverThenFinish])
        scenario.apps.choicePoints = nil
        scenario.store.failureProbability = 0
        scenario.store.deferralProbability = 0
        scenario.store.cancellationProbability = 0
        let apps = Apps()
        let app = SimulatedApp { apps.made(PlainStoreObserver()) }
        let explorer = Explorer(scenario: scenario, appLaunch: app.launch)
        let run = try explorer.run(choices: SeededChoices(seed: 3), keepEvents: true)
        let finished = run.events.filter { if case .transactionFinished = $0.event { true } else { false } }
        #expect(finished.count >= 4)
        let observers = apps.all
        #expect(observers.count >= 2)
        // Each device's observer heard only its own transactions, each a distinct launch's queue.
        #expect(Set(observers.compactMap(\.queueIdentity)).count == observers.count)
        #expect(observers.reduce(0) { $0 + $1.removed } == finished.count)
        // Every purchase found its entry in the receipt, read with Bundle.main.appStoreReceiptURL.
        #expect(observers.flatMap(\.receiptSizes).count >= 4)
        #expect(observers.flatMap(\.receiptSizes).allSatisfy { $0 > 20 })
    }

    @Test("Bundle.main.appStoreReceiptURL, shadowed by StoreKitSim, is each device's own receipt file")
    func receiptPerDevice() async throws {
        let catalog = Catalog.sample
        let first = PaymentQueue(device: "d1", catalog: catalog, choices: SeededChoices(seed: 1))
        let second = PaymentQueue(device: "d2", catalog: catalog, choices: SeededChoices(seed: 1))
        let firstURL = SimulatedApp.run(on: first) { Bundle.main.appStoreReceiptURL }
        let secondURL = SimulatedApp.run(on: second) { Bundle.main.appStoreReceiptURL }
        #expect(firstURL != nil && secondURL != nil && firstURL != secondURL)
        let bytes = try #require(SimulatedApp.run(on: first) { readAppReceipt() })
        // Apple's PKCS #7 receipt, signed, with no purchase yet.
        #expect(await SimulatedReceipt.isSigned(bytes))
        let contents = try #require(SimulatedReceipt.contents(bytes))
        #expect(contents["bundle_id"] as? String == "com.example.sksim")
        #expect((contents["in_app"] as? [[String: Any]])?.isEmpty == true)
    }

    @Test("the receipt an app reads is the App Store server's signed PKCS #7 receipt, listing the decimal identifiers the app is told, dated from the scenario's start")
    func receiptIsTheServersReceipt() async throws {
        var scenario = Scenario.exploration(devices: 1, purchasesPerDevice: 3, observers: [.deliverThenFinish])
        scenario.apps.choicePoints = nil
        scenario.store.failureProbability = 0
        scenario.store.deferralProbability = 0
        scenario.store.cancellationProbability = 0
        scenario.startDate = Date(timeIntervalSince1970: 1_939_291_200)  // 2031-06-15T12:00:00Z
        let apps = Apps()
        let explorer = Explorer(scenario: scenario, appLaunch: SimulatedApp { apps.made(PlainStoreObserver()) }.launch)
        _ = try explorer.run(choices: SeededChoices(seed: 4), keepEvents: false)
        let observer = try #require(apps.all.last { $0.lastReceipt != nil })
        let receipt = try #require(observer.lastReceipt)
        // What the App Store server's `/verifyReceipt` checks: the signature by the simulator's chain, then the fields.
        #expect(await SimulatedReceipt.isSigned(receipt))
        #expect(!(await SimulatedReceipt.isSigned(Data(receipt.dropLast()))))
        let entries = try #require(SimulatedReceipt.contents(receipt)?["in_app"] as? [[String: Any]])
        let identifiers = entries.compactMap { $0["transaction_id"] as? String }
        #expect(!identifiers.isEmpty)
        #expect(identifiers.allSatisfy { $0.count == 19 && $0.allSatisfy(\.isNumber) })
        #expect(Set(identifiers).isSubset(of: Set(observer.paidIdentifiers)))
        #expect(observer.paidIdentifiers.allSatisfy { $0.count == 19 && $0.allSatisfy(\.isNumber) })
        #expect(entries.allSatisfy { ($0["purchase_date"] as? String)?.hasPrefix("2031-06-15T12:") == true })
        // The app's own transaction dates count from the same start.
        #expect(!observer.paidDates.isEmpty)
        #expect(observer.paidDates.allSatisfy { $0 >= scenario.startDate && $0 < scenario.startDate.addingTimeInterval(3600) })
    }
}

/// The app objects made at every launch of every device.
final class Apps: @unchecked Sendable {
    private let lock = NSLock()
    private var made: [PlainStoreObserver] = []
    func made(_ observer: PlainStoreObserver) -> PlainStoreObserver {
        lock.withLock { made.append(observer) }
        return observer
    }
    var all: [PlainStoreObserver] { lock.withLock { made } }
}
