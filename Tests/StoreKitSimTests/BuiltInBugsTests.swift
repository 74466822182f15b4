import StoreKitExplore
import StoreKitModel
import StoreKitRoles
import StoreKitSim
import Testing

/// Every built-in buggy behaviour, rewritten on Apple's API, is found within 2,000 schedules;
/// the correct one breaks nothing (issue 28, "Targets").
@Suite struct BuiltInBugsTests {
    enum App: String, CaseIterable, Sendable {
        case correct, creditEveryDelivery, finishOnFirstDownload, finishAtFullProgress, restoreDoneEarly, deferredAsFailed,
             sdkFinishesEarly, attachesLate, firstDownloadOnly, restoreAsPurchase, analyticsForgets, analyticsCountsRestores,
             singleCompletion, completionOnEveryDelivery, analyticsAfterFirstPurchase

        /// What exploration may find first; empty: nothing (as docs/explore.md lists for the built-in behaviours).
        var expected: Set<AppInvariant> {
            switch self {
            case .correct: []
            case .creditEveryDelivery: [.grantedOnce]
            case .finishOnFirstDownload: [.downloadsBeforeFinish]
            case .finishAtFullProgress: [.noCompletionFromProgress]
            case .restoreDoneEarly: [.restoreDoneAfterHandled]
            case .deferredAsFailed: [.deferredApprovedGranted, .queueDrains]  // queue-drains when the parent declines
            case .sdkFinishesEarly: [.grantBeforeFinish]
            // Attached after a piece of work: it misses what launch redelivered, or what was finished meanwhile.
            case .attachesLate: [.launchObserversSeeRedeliveries, .lateObserversSeeDeliveries]
            case .firstDownloadOnly: [.allDownloadsStarted]
            case .restoreAsPurchase: [.restoreNotCreditedAsNew]
            case .analyticsForgets, .analyticsCountsRestores: [.revenueReportedOnce]
            case .singleCompletion, .completionOnEveryDelivery: [.purchaseCompletionShownOnce]
            case .analyticsAfterFirstPurchase: [.lateObserversSeeDeliveries]
            }
        }

        func launch(_ store: EntitlementStore) -> AppObjects {
            let objects = AppObjects()
            switch self {
            case .correct:
                objects.screen = PurchaseScreen(store: store)
                objects.objects = [ContentObserver(store: store), RevenueAnalytics(store: store)]
            case .singleCompletion:
                objects.screen = SingleCompletionScreen(store: store)
                objects.objects = [ContentObserver(store: store)]
            case .completionOnEveryDelivery:
                objects.screen = CompletionOnEveryDeliveryScreen(store: store)
                objects.objects = [ContentObserver(store: store)]
            case .analyticsAfterFirstPurchase: objects.objects = [AnalyticsAfterFirstPurchaseObserver(store: store)]
            case .creditEveryDelivery: objects.objects = [CreditEveryDeliveryObserver(store: store)]
            case .finishOnFirstDownload: objects.objects = [FinishOnFirstDownloadObserver(store: store)]
            case .finishAtFullProgress: objects.objects = [FinishAtFullProgressObserver(store: store)]
            case .restoreDoneEarly: objects.objects = [RestoreDoneEarlyObserver(store: store)]
            case .deferredAsFailed: objects.objects = [DeferredAsFailedObserver(store: store)]
            case .sdkFinishesEarly: objects.objects = [ContentObserver(store: store), EagerSDK()]
            case .firstDownloadOnly: objects.objects = [FirstDownloadOnlyObserver(store: store)]
            case .restoreAsPurchase: objects.objects = [RestoreAsPurchaseObserver(store: store)]
            case .analyticsForgets: objects.objects = [ContentObserver(store: store), RevenueAnalytics(store: store, remembers: false)]
            case .analyticsCountsRestores: objects.objects = [ContentObserver(store: store), RevenueAnalytics(store: store, countsRestores: true)]
            case .attachesLate:
                objects.objects = [ContentObserver(store: store)]
                // The app sets up its analytics a while after launch.
                SimulatedWork.start(canFail: false) { _ in
                    let analytics = LateAnalytics()
                    objects.objects.append(analytics)
                    SKPaymentQueue.default().add(analytics)
                }
            }
            return objects
        }

        /// The app as the explorer runs it: its storage, what it believes, its launch and its purchase screen.
        var simulated: SimulatedApp {
            SimulatedApp(storage: { EntitlementStore() },
                         belief: { store in
                             AppBelief(credits: store.credits, restoresShownDone: store.restoresShownDone, revenueReported: store.revenue,
                                       purchaseCompletionsShown: store.purchasesShown.map { .init(payment: $0.payment, transaction: $0.transaction) })
                         },
                         launch: { launch($0) },
                         buy: { objects, product, quantity in objects.buy(product, quantity: quantity) })
        }
    }

    @Test("each app rewritten on Apple's API: a bug is found within 2,000 schedules, the correct app breaks nothing in 2,000",
          arguments: App.allCases)
    func found(app: App) throws {
        let simulated = app.simulated
        var explorer = Explorer(scenario: .exploration(devices: 1, purchasesPerDevice: 3), appLaunch: simulated.launch,
                                appPurchase: simulated.purchase)
        explorer.shrinkStepLimit = 20_000
        let report = try explorer.explore(strategy: .random, budget: ExplorationBudget(schedules: 2_000, seconds: 120), seed: 1, jobs: 2)
        let found = Set(report.violations.map(\.invariant))
        #expect(app.expected.isEmpty ? found.isEmpty : !found.isDisjoint(with: app.expected),
                "\(report.violations.map { "\($0.invariant): \($0.message)" })")
        if app.expected.isEmpty { #expect(report.schedules == 2_000) }
    }
}
