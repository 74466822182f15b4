import StoreKitModel
import StoreKitRuntime
import StoreKitSimulation

/// JSON shapes of events, transactions and reports (documented in docs/cli.md, "log cat --json").
enum JSONShapes {
    static func key(_ key: TransactionKey) -> JSONValue { .string(key.description) }

    /// An event's transaction: the log's key, and Apple's decimal `transactionIdentifier` of it, the
    /// `transactionId` the App Store's server and its signed transactions carry (docs/log-format.md).
    static func transaction(_ key: TransactionKey) -> [(String, JSONValue)] {
        [("transaction", .string(key.description)), ("transactionIdentifier", decimal(QueueProjection.transactionIdentifier(key)))]
    }

    /// Apple's decimal form of a log transaction identifier (`device.number`).
    static func decimal(_ logIdentifier: String) -> JSONValue { .string(AppStoreIdentifier.transactionIdentifier(logIdentifier)) }
    static func download(_ key: DownloadKey) -> JSONValue { .string(key.description) }

    static func payment(_ payment: Payment) -> JSONValue {
        // Only a payment with a discount has the key (F-O5), so earlier logs print as they did.
        let discount: [(String, JSONValue)] = payment.discount.map { discount in
            [("discount", .object([("identifier", .string(discount.identifier)), ("keyIdentifier", .string(discount.keyIdentifier)),
                                   ("nonce", .string(discount.nonce)), ("signature", .string(discount.signature)),
                                   ("timestamp", .int(discount.timestamp))]))]
        } ?? []
        return .object([("productIdentifier", .string(payment.productIdentifier)), ("quantity", .int(payment.quantity)),
                        ("applicationUsername", .optional(payment.applicationUsername)),
                        ("requestDataBytes", payment.requestData.map { .int($0.count) } ?? .null)] + discount
                        // Only an Ask to Buy payment has the key, likewise.
                        + (payment.simulatesAskToBuyInSandbox ? [("simulatesAskToBuyInSandbox", .bool(true))] : []))
    }

    static func error(_ error: StoreError) -> JSONValue {
        .object([("code", .string(String(describing: error.code))), ("number", .int(Int(error.code.rawValue))),
                 ("domain", .string(StoreError.domain)), ("message", .string(error.message))])
    }

    static func contents(_ contents: [HostedContent]) -> JSONValue {
        .array(contents.map {
            .object([("contentIdentifier", .string($0.contentIdentifier)), ("contentLength", .int($0.contentLength)),
                     ("contentVersion", .string($0.contentVersion))])
        })
    }

    static func original(_ original: OriginalTransaction) -> JSONValue {
        // Only a receipt entry at an introductory offer has the key (F-O3), so earlier logs print as they did.
        let offer: [(String, JSONValue)] = original.introductoryOfferPeriod.map { [("introductoryOfferPeriod", .string($0.name))] } ?? []
        // Likewise Apple's `promotional_offer_id`, only on an entry at a promotional offer (F-O7).
        let promotional: [(String, JSONValue)] = original.promotionalOfferIdentifier.map { [("promotionalOfferIdentifier", .string($0))] } ?? []
        return .object([("transactionIdentifier", decimal(original.transactionIdentifier)), ("payment", payment(original.payment)),
                        ("transactionDate", .int(original.transactionDate))] + offer + promotional)
    }

    static func event(_ recorded: RecordedEvent) -> JSONValue {
        var members: [(String, JSONValue)] = [
            ("sequence", .int(recorded.sequence)), ("timestamp", .int(recorded.timestamp)),
            ("command", recorded.commandID.map { .string($0.description) } ?? .null),
            ("type", .string(recorded.event.name)),
        ]
        switch recorded.event {
        case .runStarted(let header):
            members += [("seed", .unsigned(header.seed)), ("sksimVersion", .string(header.sksimVersion)),
                        ("runtime", .string(header.runtime)), ("startedAtUnixNanoseconds", .int(header.startedAtUnixNanoseconds)),
                        ("scenario", .string(header.scenario)), ("catalogSource", .string(header.catalogSource)),
                        ("catalogDigest", .string(header.catalogDigest))]
        case .deviceRegistered(let device, let account):
            members += [("device", .string(device)), ("account", .string(account))]
        case .appLaunched(let device), .appTerminated(let device):
            members += [("device", .string(device))]
        case .observerAttached(let device, let observer), .observerDetached(let device, let observer):
            members += [("device", .string(device)), ("observer", .string(observer))]
        case .paymentsAllowedChanged(let device, let allowed):
            members += [("device", .string(device)), ("allowed", .bool(allowed))]
        case .transactionAdded(let key, let value):
            members += transaction(key) + [("payment", payment(value))]
        case .transactionDeferred(let key), .transactionFinished(let key):
            members += transaction(key)
        case .transactionPurchased(let key, _, let downloads, let charged):
            members += transaction(key) + [("downloads", contents(downloads)), ("charged", .bool(charged))]
        case .transactionFailed(let key, let value):
            members += transaction(key) + [("error", error(value))]
        case .restoreStarted(let device, let restore, let username):
            members += [("device", .string(device)), ("restore", .int(restore)), ("applicationUsername", .optional(username))]
        case .transactionRestored(let key, let restore, _, let value, let downloads):
            members += transaction(key) + [("restore", .int(restore)), ("originalTransaction", original(value)), ("downloads", contents(downloads))]
        case .restoreFinished(let device, let restore):
            members += [("device", .string(device)), ("restore", .int(restore))]
        case .restoreFailed(let device, let restore, let value):
            members += [("device", .string(device)), ("restore", .int(restore)), ("error", error(value))]
        case .downloadStarted(let value), .downloadPaused(let value), .downloadResumed(let value), .downloadCancelled(let value):
            members += [("download", download(value))]
        case .downloadProgressed(let value, let progress, let timeRemaining):
            members += [("download", download(value)), ("progress", .double(progress)), ("timeRemaining", .double(timeRemaining))]
        case .downloadFinished(let value, let contentURL):
            members += [("download", download(value)), ("contentURL", .string(contentURL))]
        case .downloadFailed(let value, let failure):
            members += [("download", download(value)), ("error", error(failure))]
        case .appActionRecorded(let action):
            members += appAction(action)
        case .askToBuyDeclined(let key):
            members += transaction(key)
        case .subscriptionRenewed(let key, _, let value, let downloads):
            members += transaction(key) + [("originalTransaction", original(value)), ("downloads", contents(downloads))]
        case .subscriptionExpired(let device, let value), .entitlementsRevoked(let device, let value):
            members += [("device", .string(device)), ("originalTransaction", original(value))]
        case .interruptedPurchaseResumed(let key, let interrupted):
            members += transaction(key) + [("interruptedTransaction", Self.key(interrupted))]
        case .subscriptionBillingRetry(let device, let value, let grace):
            members += [("device", .string(device)), ("originalTransaction", original(value)), ("gracePeriodNanoseconds", .int(grace))]
        case .transactionsCleared(let device):
            members += [("device", .string(device))]
        case .receiptRefreshStarted(let device, let request):
            members += [("device", .string(device)), ("request", .int(request))]
        case .receiptDelivered(let device, let request, let firstIndex, let entries, let isLast):
            members += [("device", .string(device)), ("request", .int(request)), ("firstIndex", .int(firstIndex)),
                        ("entries", .array(entries.map(original))), ("isLast", .bool(isLast))]
        case .commandRejected(let command, let rejection):
            members += [("device", .string(command.device)), ("rejectedCommand", .string(command.name)),
                        ("body", body(command)),
                        ("reason", .string(String(describing: rejection.code))), ("message", .string(rejection.message))]
        }
        return .object(members)
    }

    static func downloads(_ keys: [DownloadKey]) -> JSONValue { .array(keys.map(download)) }

    /// An app action's fields: `action`, `observer` and what it concerns.
    static func appAction(_ action: AppAction) -> [(String, JSONValue)] {
        var fields: [(String, JSONValue)] = [("action", .string(action.name)), ("observer", .string(action.observer))]
        switch action {
        case .contentGranted(let value, _, let product): fields += transaction(value) + [("productIdentifier", .string(product))]
        case .contentKept(let value, _): fields += [("download", download(value))]
        case .restoreShownDone(let device, let restore, _): fields += [("device", .string(device)), ("restore", .int(restore))]
        case .failureShown(let value, _): fields += transaction(value)
        case .transactionReported(let value, _, let report): fields += transaction(value) + [("report", .string("\(report)"))]
        }
        return fields
    }

    /// A command's fields (the whole body of a rejected command).
    static func body(_ command: CommandBody) -> JSONValue {
        let fields: [(String, JSONValue)]
        switch command {
        case .registerDevice(let device, let account): fields = [("device", .string(device)), ("account", .string(account))]
        case .launchApp(let device), .terminateApp(let device): fields = [("device", .string(device))]
        case .attachObserver(let device, let observer), .detachObserver(let device, let observer):
            fields = [("device", .string(device)), ("observer", .string(observer))]
        case .setPaymentsAllowed(let device, let allowed): fields = [("device", .string(device)), ("allowed", .bool(allowed))]
        case .addPayment(let device, let value): fields = [("device", .string(device)), ("payment", payment(value))]
        case .finishTransaction(let value): fields = [("transaction", key(value))]
        case .restoreCompletedTransactions(let device, let username):
            fields = [("device", .string(device)), ("applicationUsername", .optional(username))]
        case .startDownloads(let keys), .pauseDownloads(let keys), .resumeDownloads(let keys), .cancelDownloads(let keys):
            fields = [("downloads", downloads(keys))]
        case .decidePurchase(let value, let decision):
            let decisionValue: JSONValue = switch decision {
            case .purchased(let charged): .object([("outcome", .string("purchased")), ("charged", .bool(charged))])
            case .failed(let failure): .object([("outcome", .string("failed")), ("error", error(failure))])
            case .deferred: .object([("outcome", .string("deferred"))])
            case .declined: .object([("outcome", .string("declined"))])
            }
            fields = [("transaction", key(value)), ("decision", decisionValue)]
        case .completeRestore(let device, let restore, let firstIndex, let originals, let isLast):
            fields = [("device", .string(device)), ("restore", .int(restore)), ("firstIndex", .int(firstIndex)),
                      ("originals", .array(originals.map(original))), ("isLast", .bool(isLast))]
        case .failRestore(let device, let restore, let failure):
            fields = [("device", .string(device)), ("restore", .int(restore)), ("error", error(failure))]
        case .reportDownloadProgress(let value, let progress, let timeRemaining):
            fields = [("download", download(value)), ("progress", .double(progress)), ("timeRemaining", .double(timeRemaining))]
        case .completeDownload(let value, let contentURL): fields = [("download", download(value)), ("contentURL", .string(contentURL))]
        case .failDownload(let value, let failure): fields = [("download", download(value)), ("error", error(failure))]
        case .recordAppAction(let action): fields = appAction(action)
        case .renewSubscription(let device, let value), .expireSubscription(let device, let value), .refundPurchase(let device, let value):
            fields = [("device", .string(device)), ("originalTransaction", original(value))]
        case .resumeInterruptedPurchase(let device, let interrupted, let value, let charged):
            fields = [("device", .string(device)), ("interruptedTransaction", key(interrupted)), ("payment", payment(value)),
                      ("charged", .bool(charged))]
        case .beginBillingRetry(let device, let value, let grace):
            fields = [("device", .string(device)), ("originalTransaction", original(value)), ("gracePeriodNanoseconds", .int(grace))]
        case .clearTransactions(let device), .refreshReceipt(let device):
            fields = [("device", .string(device))]
        case .deliverReceipt(let device, let request, let firstIndex, let entries, let isLast):
            fields = [("device", .string(device)), ("request", .int(request)), ("firstIndex", .int(firstIndex)),
                      ("entries", .array(entries.map(original))), ("isLast", .bool(isLast))]
        }
        return .object([("command", .string(command.name))] + fields)
    }

    static func transaction(_ transaction: PaymentTransaction) -> JSONValue {
        .object([
            ("transaction", key(transaction.key)), ("state", .string(String(describing: transaction.transactionState))),
            ("payment", payment(transaction.payment)),
            ("transactionIdentifier", .optional(transaction.transactionIdentifier)),
            ("transactionDate", transaction.transactionDate.map { .int($0) } ?? .null),
            ("error", transaction.error.map(error) ?? .null),
            ("originalTransaction", transaction.originalTransaction.map(original) ?? .null),
            ("downloads", .array(transaction.downloads.map { value in
                .object([("download", download(value.key)), ("contentIdentifier", .string(value.contentIdentifier)),
                         ("state", .string(String(describing: value.downloadState))), ("progress", .double(value.progress)),
                         ("timeRemaining", .double(value.timeRemaining)), ("contentURL", .optional(value.contentURL))])
            })),
        ])
    }

    /// One device as the queue projects it (`log project --json`, the context of a replay's divergence).
    static func device(_ device: DeviceState) -> JSONValue {
        .object([("device", .string(device.device)), ("account", .string(device.account)),
                 ("running", .bool(device.isRunning)), ("canMakePayments", .bool(device.canMakePayments)),
                 ("observers", .array(device.observers.map { .string($0) })),
                 ("pending", .array(device.pendingTransactions.map(JSONShapes.transaction)))])
    }

    static func violations(_ violations: [Violation]) -> JSONValue {
        .array(violations.map {
            .object([("sequence", .int($0.sequence)), ("rule", .string($0.rule)), ("message", .string($0.message))])
        })
    }

    /// The summary object `simulate --json` and `run --json` print.
    static func report(_ report: RunReport, extra: [(String, JSONValue)] = []) -> JSONValue {
        let totals = report.totals
        let transactions: JSONValue = .object([
            ("purchased", .int(totals.purchased)), ("failed", .int(totals.failed)), ("restored", .int(totals.restored)),
            ("deferred", .int(totals.deferred)), ("declined", .int(totals.declined)), ("finished", .int(totals.finished)),
            ("pending", .int(report.pending)), ("renewed", .int(totals.renewed)), ("expired", .int(totals.expired)),
            ("refunded", .int(totals.revoked))])
        let errors: JSONValue = .object(StoreError.Code.allCases.compactMap { code in
            totals.failuresByCode[code].map { (String(describing: code), .int($0)) }
        })
        let downloads: JSONValue = .object([("finished", .int(totals.downloadsFinished)), ("failed", .int(totals.downloadsFailed)),
                                            ("cancelled", .int(totals.downloadsCancelled))])
        let restores: JSONValue = .object([("finished", .int(totals.restoresFinished)), ("failed", .int(totals.restoresFailed))])
        let simulatedSeconds = (Double(report.simulatedNanoseconds) / 1e9 * 1000).rounded() / 1000
        // Only runs whose apps refreshed receipts (R-R2) have the key, so earlier runs print as they did.
        let receipts: [(String, JSONValue)] = totals.receiptsRefreshed == 0 && totals.receiptEntries == 0 ? []
            : [("receipts", .object([("refreshed", .int(totals.receiptsRefreshed)), ("entries", .int(totals.receiptEntries))]))]
        return .object([
            ("seed", .unsigned(report.seed)),
            ("events", .int(totals.events)),
            ("transactions", transactions),
            ("downloads", downloads),
            ("restores", restores),
        ] + receipts + [
            ("errors", errors),
            ("rejections", .int(totals.rejections)),
            ("duplicateCommands", .int(report.duplicateCommands)),
            ("violations", violations(report.violations)),
            ("violationCount", .int(report.violationCount)),
            ("simulatedSeconds", .double(simulatedSeconds)),
            ("stoppedAtTimeLimit", .bool(report.stoppedAtTimeLimit)),
            ("logDirectory", .string(report.logDirectory)),
        ] + extra)
    }

    static func summaryText(_ report: RunReport) -> String {
        let totals = report.totals
        var lines = [
            "seed            \(report.seed)",
            "events          \(totals.events) (\(totals.rejections) commands rejected, \(report.duplicateCommands) duplicates ignored)",
            "transactions    \(totals.purchased) purchased, \(totals.failed) failed, \(totals.restored) restored, \(totals.deferred) deferred, \(totals.declined) declined, \(totals.finished) finished, \(report.pending) pending, \(totals.renewed) renewed, \(totals.expired) expired, \(totals.revoked) refunded",
            "downloads       \(totals.downloadsFinished) finished, \(totals.downloadsFailed) failed, \(totals.downloadsCancelled) cancelled",
            "restores        \(totals.restoresFinished) finished, \(totals.restoresFailed) failed",
        ] + (totals.receiptsRefreshed == 0 && totals.receiptEntries == 0 ? [] : [
            "receipts        \(totals.receiptsRefreshed) refreshed, \(totals.receiptEntries) entries",
        ]) + [
            "errors          " + (totals.failuresByCode.isEmpty ? "none" : StoreError.Code.allCases.compactMap { code in
                totals.failuresByCode[code].map { "\($0) \(code) (SKError \(code.rawValue))" }
            }.joined(separator: ", ")),
            String(format: "simulated time  %.3f s%@", Double(report.simulatedNanoseconds) / 1e9, report.stoppedAtTimeLimit ? " (stopped at the time limit)" : ""),
            "log             \(report.logDirectory)",
        ]
        if report.violationCount == 0 {
            lines.append("violations      none")
        } else {
            lines.append("violations      \(report.violationCount):")
            lines += report.violations.prefix(20).map { "  \($0)" }
        }
        return lines.joined(separator: "\n")
    }
}
