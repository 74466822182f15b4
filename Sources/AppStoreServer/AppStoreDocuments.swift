@_exported import AppStoreSigning
import Foundation
import StoreKitModel

/// Signed App Store objects of a run as of its log: signed transactions and renewal info (JWS),
/// notifications' signed payloads and app receipts (CMS). The one place that turns the ledger's facts
/// into Apple's documents; the server, `sksim log receipt` and load's backend calls all go through it.
public struct AppStoreDocuments: Sendable {
    public let chain: SigningChain
    public let settings: AppStoreSettings
    private let signer: JWSSigner

    public init(chain: SigningChain, settings: AppStoreSettings) async throws {
        self.chain = chain
        self.settings = settings
        signer = try await JWSSigner(chain: chain)
    }

    /// Milliseconds since 1970 now: `signedDate` is the wall-clock time of signing.
    public static func now() -> Int64 { Int64(Date().timeIntervalSince1970 * 1000) }

    // MARK: The API for callers

    /// The signed transaction (`signedTransactionInfo`, a JWS) of the log transaction `logIdentifier`
    /// (`device.number`, as events and StoreKit's API name it), or nil when the log has no charged
    /// purchase or renewal it stands for.
    public func signedTransaction(logIdentifier: String, in ledger: AppStoreLedger) async throws -> String? {
        try await signedTransaction(id: AppStoreIdentifier.transactionIdentifier(logIdentifier), in: ledger)
    }

    /// The same by Apple's decimal `transactionId`.
    public func signedTransaction(id: String, in ledger: AppStoreLedger) async throws -> String? {
        guard let transaction = ledger.transaction(id: id) else { return nil }
        return try await signer.sign(transactionPayload(transaction, in: ledger, signedDate: Self.now()))
    }

    /// The device's app receipt as of the ledger's end (CMS SignedData, DER), or nil for a device the log does not know.
    public func appReceipt(device: String, in ledger: AppStoreLedger) throws -> [UInt8]? {
        guard let entries = receiptEntries(device: device, in: ledger) else { return nil }
        return try AppReceipt.signed(entries: entries, bundleIdentifier: settings.bundleIdentifier, chain: chain, now: Date())
    }

    // MARK: Payloads

    public func transactionPayload(_ transaction: AppStoreLedger.Transaction, in ledger: AppStoreLedger, signedDate: Int64) -> TransactionPayload {
        let isSubscription = transaction.kind == .autoRenewableSubscription
        return TransactionPayload(
            transactionId: transaction.transactionId, originalTransactionId: transaction.originalTransactionId,
            webOrderLineItemId: isSubscription ? AppStoreIdentifier.webOrderLineItemIdentifier(transaction.logIdentifier) : nil,
            bundleId: settings.bundleIdentifier, productId: transaction.productIdentifier,
            subscriptionGroupIdentifier: isSubscription ? transaction.group : nil,
            purchaseDate: ledger.date(transaction.purchaseTime), originalPurchaseDate: ledger.date(transaction.originalPurchaseTime),
            expiresDate: transaction.expiresTime.map(ledger.date), quantity: transaction.quantity, type: Self.typeName(transaction.kind),
            appAccountToken: transaction.applicationUsername.flatMap { UUID(uuidString: $0) }.map { $0.uuidString.lowercased() },
            inAppOwnershipType: "PURCHASED", signedDate: signedDate,
            revocationReason: transaction.revocationTime == nil ? nil : 0, revocationDate: transaction.revocationTime.map(ledger.date),
            isUpgraded: nil, offerType: transaction.offerType, offerIdentifier: transaction.offerIdentifier,
            offerDiscountType: transaction.offerDiscountType, environment: settings.environment,
            storefront: ledger.storefront, storefrontId: Self.storefrontIdentifier(ledger.storefront),
            transactionReason: transaction.isRenewal ? "RENEWAL" : "PURCHASE",
            price: Self.milliunits(transaction.displayPrice), currency: Self.currency(ledger.storefront))
    }

    public func renewalInfoPayload(_ subscription: AppStoreLedger.SubscriptionState, in ledger: AppStoreLedger, signedDate: Int64) -> RenewalInfoPayload {
        let latest = ledger.transactions[subscription.latestIndex]
        let first = ledger.transactions[subscription.originalIndex]
        let renews = !subscription.isExpired
        return RenewalInfoPayload(
            originalTransactionId: first.transactionId, productId: subscription.productIdentifier,
            autoRenewProductId: subscription.autoRenewProductIdentifier, autoRenewStatus: renews ? 1 : 0,
            expirationIntent: subscription.expirationIntent,
            isInBillingRetryPeriod: renews ? subscription.billingRetryStart != nil : false,
            gracePeriodExpiresDate: renews ? subscription.gracePeriodEnd.map(ledger.date) : nil,
            offerType: nil, offerIdentifier: nil, signedDate: signedDate, environment: settings.environment,
            recentSubscriptionStartDate: ledger.date(first.purchaseTime),
            renewalDate: renews ? latest.expiresTime.map(ledger.date) : nil,
            currency: Self.currency(ledger.storefront),
            renewalPrice: ledger.catalog(product: subscription.autoRenewProductIdentifier).flatMap { Self.milliunits($0.displayPrice) },
            appAccountToken: first.applicationUsername.flatMap { UUID(uuidString: $0) }.map { $0.uuidString.lowercased() })
    }

    public func signedRenewalInfo(_ subscription: AppStoreLedger.SubscriptionState, in ledger: AppStoreLedger) async throws -> String {
        try await signer.sign(renewalInfoPayload(subscription, in: ledger, signedDate: Self.now()))
    }

    public func signedTransaction(_ transaction: AppStoreLedger.Transaction, in ledger: AppStoreLedger) async throws -> String {
        try await signer.sign(transactionPayload(transaction, in: ledger, signedDate: Self.now()))
    }

    /// A notification's `signedPayload`, about the transaction `index` of the ledger (nil: TEST).
    public func signedNotification(type: String, subtype: String?, uuid: String, transactionIndex: Int?, in ledger: AppStoreLedger) async throws -> String {
        let now = Self.now()
        var data = NotificationPayload.Data(bundleId: settings.bundleIdentifier, environment: settings.environment)
        if let transactionIndex {
            let transaction = ledger.transactions[transactionIndex]
            data.signedTransactionInfo = try await signer.sign(transactionPayload(transaction, in: ledger, signedDate: now))
            if let subscription = ledger.subscription(of: transaction) {
                data.signedRenewalInfo = try await signer.sign(renewalInfoPayload(subscription, in: ledger, signedDate: now))
                data.status = ledger.status(subscription)
            }
        }
        return try await signer.sign(NotificationPayload(notificationType: type, subtype: subtype, notificationUUID: uuid, data: data,
                                                         version: "2.0", signedDate: now))
    }

    /// The in-app entries of a device's receipt: the store's receipt (R-R2), in purchase order.
    public func receiptEntries(device: String, in ledger: AppStoreLedger) -> [AppReceipt.Entry]? {
        guard let purchases = ledger.receiptEntries(device: device) else { return nil }
        return purchases.map { purchase in
            let transaction = ledger.transaction(logIdentifier: purchase.transactionIdentifier)
            let isSubscription = transaction?.kind == .autoRenewableSubscription
            return AppReceipt.Entry(
                quantity: purchase.payment.quantity, productIdentifier: purchase.payment.productIdentifier,
                transactionId: AppStoreIdentifier.transactionIdentifier(purchase.transactionIdentifier),
                originalTransactionId: transaction?.originalTransactionId ?? AppStoreIdentifier.transactionIdentifier(purchase.transactionIdentifier),
                purchaseDate: ledger.date(purchase.transactionDate),
                originalPurchaseDate: ledger.date(transaction?.originalPurchaseTime ?? purchase.transactionDate),
                expiresDate: transaction?.expiresTime.map(ledger.date), cancellationDate: transaction?.revocationTime.map(ledger.date),
                webOrderLineItemId: isSubscription ? AppStoreIdentifier.webOrderLineItemIdentifier(purchase.transactionIdentifier) : nil,
                isTrialPeriod: purchase.isTrialPeriod, isInIntroductoryOfferPeriod: purchase.isInIntroductoryOfferPeriod,
                promotionalOfferIdentifier: purchase.promotionalOfferIdentifier)
        }
    }

    // MARK: Apple's names and numbers

    static func typeName(_ kind: ProductKind) -> String {
        switch kind {
        case .autoRenewableSubscription: "Auto-Renewable Subscription"
        case .nonConsumable: "Non-Consumable"
        case .consumable: "Consumable"
        case .nonRenewingSubscription: "Non-Renewing Subscription"
        }
    }

    /// Apple's `price`: the display price in thousandths of the currency ("0.99" → 990); nil when unreadable.
    static func milliunits(_ displayPrice: String) -> Int64? {
        let number = displayPrice.filter { $0.isNumber || $0 == "." }
        guard let value = Decimal(string: number) else { return nil }
        return NSDecimalNumber(decimal: value * 1000).int64Value
    }

    /// Apple's numeric storefront ids of some countries (Apple publishes no full table); others use the country code.
    static func storefrontIdentifier(_ countryCode: String) -> String {
        let known = ["USA": "143441", "FRA": "143442", "DEU": "143443", "GBR": "143444", "CAN": "143455", "AUS": "143460",
                     "JPN": "143462", "ITA": "143450", "ESP": "143454", "CHN": "143465", "BRA": "143503", "IND": "143467"]
        return known[countryCode] ?? countryCode
    }

    static func currency(_ countryCode: String) -> String {
        let known = ["USA": "USD", "FRA": "EUR", "DEU": "EUR", "ITA": "EUR", "ESP": "EUR", "GBR": "GBP", "CAN": "CAD",
                     "AUS": "AUD", "JPN": "JPY", "CHN": "CNY", "BRA": "BRL", "IND": "INR"]
        return known[countryCode] ?? "USD"
    }
}
