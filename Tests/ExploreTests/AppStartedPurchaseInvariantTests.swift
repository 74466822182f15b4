import StoreKitExplore
import StoreKitModel
import Testing

/// purchase-completion-shown-once and late-observers-see-deliveries (docs/invariants.md), fed event by event.
@Suite struct AppStartedPurchaseInvariantTests {
    static let device = "d1"
    static let first = TransactionKey(device: device, number: 1)
    static let second = TransactionKey(device: device, number: 2)

    static func violations(_ events: [Event]) -> [AppViolation] {
        RestoreDoneOnceTests.violations(events)
    }

    /// One purchase, delivered, granted and finished in the first launch.
    static func purchased(_ key: TransactionKey) -> [Event] {
        [.transactionAdded(key, Payment(productIdentifier: "coins")),
         .transactionPurchased(key, identifier: "\(key.number)", downloads: [], charged: true),
         .appActionRecorded(.contentGranted(key, observer: "o1", productIdentifier: "coins")),
         .transactionFinished(key)]
    }

    static let launched: [Event] = [.appLaunched(device: device), .observerAttached(device: device, observer: "o1")]

    static func shown(_ key: TransactionKey, _ report: AppReport) -> Event {
        .appActionRecorded(.transactionReported(key, observer: "Screen", report: report))
    }

    @Test("a purchase's completion shown once, for its own payment: no violation")
    func shownOnce() {
        #expect(Self.violations(Self.launched + Self.purchased(Self.first) + [Self.shown(Self.first, .purchaseCompletionShown)]).isEmpty)
    }

    @Test("shown twice: a violation at the second")
    func shownTwice() {
        let events = Self.launched + Self.purchased(Self.first)
            + [Self.shown(Self.first, .purchaseCompletionShown), Self.shown(Self.first, .purchaseCompletionShown)]
        let found = Self.violations(events)
        #expect(found.map(\.invariant) == [.purchaseCompletionShownOnce])
        #expect(found.first?.sequence == UInt64(events.count))
    }

    @Test("shown with a transaction another payment made: a violation")
    func shownForAnotherPayment() {
        let found = Self.violations(Self.launched + Self.purchased(Self.first) + [Self.shown(Self.first, .otherPurchaseCompletionShown)])
        #expect(found.map(\.message) == ["Screen told its user that a purchase it asked for completed with transaction \(Self.first), which another payment made"])
    }

    @Test("an observer attached after a purchase of its launch was finished: a violation; before it: none")
    func lateObserver() {
        let late = Event.observerAttached(device: Self.device, observer: "Analytics")
        let found = Self.violations(Self.launched + Self.purchased(Self.first) + [late])
        #expect(found.map(\.invariant) == [.lateObserversSeeDeliveries])
        #expect(Self.violations(Self.launched + [late] + Self.purchased(Self.first)).isEmpty)
    }

    @Test("a finish of an earlier launch does not count against an observer of the next one")
    func earlierLaunch() {
        let relaunched: [Event] = [.appTerminated(device: Self.device)] + Self.launched
        #expect(Self.violations(Self.launched + Self.purchased(Self.first) + relaunched + Self.purchased(Self.second)).isEmpty)
    }

    @Test("a redelivery finished before an observer attached is launch-observers-see-redeliveries, reported once")
    func redeliveryIsTheOtherInvariant() {
        let pending: [Event] = [.transactionAdded(Self.first, Payment(productIdentifier: "coins")),
                                .transactionPurchased(Self.first, identifier: "1", downloads: [], charged: true)]
        let relaunch: [Event] = [.appTerminated(device: Self.device), .appLaunched(device: Self.device),
                                 .observerAttached(device: Self.device, observer: "o1"),
                                 .appActionRecorded(.contentGranted(Self.first, observer: "o1", productIdentifier: "coins")),
                                 .transactionFinished(Self.first), .observerAttached(device: Self.device, observer: "Analytics")]
        #expect(Self.violations(Self.launched + pending + relaunch).map(\.invariant) == [.launchObserversSeeRedeliveries])
    }
}
