import Foundation
import JWTKit
import X509

/// Apple's `JWSTransactionDecodedPayload` (App Store Server API, "JWSTransactionDecodedPayload"):
/// the fields the simulator knows from the log. Dates are milliseconds since 1970; nil fields are left out.
public struct TransactionPayload: JWTPayload, Equatable {
    public var transactionId: String
    public var originalTransactionId: String
    public var webOrderLineItemId: String?
    public var bundleId: String
    public var productId: String
    public var subscriptionGroupIdentifier: String?
    public var purchaseDate: Int64
    public var originalPurchaseDate: Int64
    public var expiresDate: Int64?
    public var quantity: Int
    /// "Auto-Renewable Subscription", "Non-Consumable", "Consumable" or "Non-Renewing Subscription".
    public var type: String
    public var appAccountToken: String?
    /// "PURCHASED": the simulator has no Family Sharing.
    public var inAppOwnershipType: String
    public var signedDate: Int64
    /// 0: refunded for another reason (the simulator's refunds name none).
    public var revocationReason: Int?
    public var revocationDate: Int64?
    public var isUpgraded: Bool?
    /// 1: introductory offer, 2: promotional offer.
    public var offerType: Int?
    public var offerIdentifier: String?
    /// "FREE_TRIAL", "PAY_AS_YOU_GO" or "PAY_UP_FRONT".
    public var offerDiscountType: String?
    public var environment: String
    public var storefront: String
    public var storefrontId: String
    /// "PURCHASE" or "RENEWAL".
    public var transactionReason: String
    /// Milliunits of the currency (Apple's `price`).
    public var price: Int64?
    public var currency: String?

    public init(transactionId: String, originalTransactionId: String, webOrderLineItemId: String? = nil, bundleId: String, productId: String, subscriptionGroupIdentifier: String? = nil, purchaseDate: Int64, originalPurchaseDate: Int64, expiresDate: Int64? = nil, quantity: Int, type: String, appAccountToken: String? = nil, inAppOwnershipType: String, signedDate: Int64, revocationReason: Int? = nil, revocationDate: Int64? = nil, isUpgraded: Bool? = nil, offerType: Int? = nil, offerIdentifier: String? = nil, offerDiscountType: String? = nil, environment: String, storefront: String, storefrontId: String, transactionReason: String, price: Int64? = nil, currency: String? = nil) {
        self.transactionId = transactionId
        self.originalTransactionId = originalTransactionId
        self.webOrderLineItemId = webOrderLineItemId
        self.bundleId = bundleId
        self.productId = productId
        self.subscriptionGroupIdentifier = subscriptionGroupIdentifier
        self.purchaseDate = purchaseDate
        self.originalPurchaseDate = originalPurchaseDate
        self.expiresDate = expiresDate
        self.quantity = quantity
        self.type = type
        self.appAccountToken = appAccountToken
        self.inAppOwnershipType = inAppOwnershipType
        self.signedDate = signedDate
        self.revocationReason = revocationReason
        self.revocationDate = revocationDate
        self.isUpgraded = isUpgraded
        self.offerType = offerType
        self.offerIdentifier = offerIdentifier
        self.offerDiscountType = offerDiscountType
        self.environment = environment
        self.storefront = storefront
        self.storefrontId = storefrontId
        self.transactionReason = transactionReason
        self.price = price
        self.currency = currency
    }

    public func verify(using algorithm: some JWTAlgorithm) async throws {}
}

/// Apple's `JWSRenewalInfoDecodedPayload`: a subscription's renewal state.
public struct RenewalInfoPayload: JWTPayload, Equatable {
    public var originalTransactionId: String
    public var productId: String
    public var autoRenewProductId: String
    /// 1: renews, 0: does not.
    public var autoRenewStatus: Int
    /// Why it expired (1 cancelled, 2 billing error); only once expired.
    public var expirationIntent: Int?
    public var isInBillingRetryPeriod: Bool?
    public var gracePeriodExpiresDate: Int64?
    public var offerType: Int?
    public var offerIdentifier: String?
    public var signedDate: Int64
    public var environment: String
    public var recentSubscriptionStartDate: Int64?
    public var renewalDate: Int64?
    public var currency: String?
    public var renewalPrice: Int64?
    public var appAccountToken: String?

    public init(originalTransactionId: String, productId: String, autoRenewProductId: String, autoRenewStatus: Int, expirationIntent: Int? = nil, isInBillingRetryPeriod: Bool? = nil, gracePeriodExpiresDate: Int64? = nil, offerType: Int? = nil, offerIdentifier: String? = nil, signedDate: Int64, environment: String, recentSubscriptionStartDate: Int64? = nil, renewalDate: Int64? = nil, currency: String? = nil, renewalPrice: Int64? = nil, appAccountToken: String? = nil) {
        self.originalTransactionId = originalTransactionId
        self.productId = productId
        self.autoRenewProductId = autoRenewProductId
        self.autoRenewStatus = autoRenewStatus
        self.expirationIntent = expirationIntent
        self.isInBillingRetryPeriod = isInBillingRetryPeriod
        self.gracePeriodExpiresDate = gracePeriodExpiresDate
        self.offerType = offerType
        self.offerIdentifier = offerIdentifier
        self.signedDate = signedDate
        self.environment = environment
        self.recentSubscriptionStartDate = recentSubscriptionStartDate
        self.renewalDate = renewalDate
        self.currency = currency
        self.renewalPrice = renewalPrice
        self.appAccountToken = appAccountToken
    }

    public func verify(using algorithm: some JWTAlgorithm) async throws {}
}

/// Apple's `ResponseBodyV2DecodedPayload` of an App Store Server Notification V2.
public struct NotificationPayload: JWTPayload, Equatable {
    public struct Data: Codable, Sendable, Equatable {
        public var bundleId: String
        public var environment: String
        public var signedTransactionInfo: String?
        public var signedRenewalInfo: String?
        /// 1: active, 2: expired, 3: billing retry, 4: grace period, 5: revoked (subscriptions only).
        public var status: Int?

        public init(bundleId: String, environment: String, signedTransactionInfo: String? = nil, signedRenewalInfo: String? = nil, status: Int? = nil) {
            self.bundleId = bundleId
            self.environment = environment
            self.signedTransactionInfo = signedTransactionInfo
            self.signedRenewalInfo = signedRenewalInfo
            self.status = status
        }
    }

    public var notificationType: String
    public var subtype: String?
    public var notificationUUID: String
    public var data: Data
    public var version: String
    public var signedDate: Int64

    public init(notificationType: String, subtype: String? = nil, notificationUUID: String, data: Data, version: String, signedDate: Int64) {
        self.notificationType = notificationType
        self.subtype = subtype
        self.notificationUUID = notificationUUID
        self.data = data
        self.version = version
        self.signedDate = signedDate
    }

    public func verify(using algorithm: some JWTAlgorithm) async throws {}
}

/// Signs App Store objects as compact JWS, ES256, with the chain in `x5c` (leaf, intermediate, root),
/// through jwt-kit: no `aud`, `exp`, `iat` or `nbf` claims, which Apple's signed objects do not carry
/// either (its verifier would check them).
public struct JWSSigner: Sendable {
    private let keys: JWTKeyCollection
    private let header: JWTHeader

    public init(chain: SigningChain) async throws {
        keys = JWTKeyCollection()
        await keys.add(ecdsa: try ES256PrivateKey(backing: chain.leafKey))
        var header = JWTHeader()
        header.alg = "ES256"
        // jwt-kit takes the chain as PEM and writes each certificate's DER in standard base64 (`SigningChain.x5c`).
        header.x5c = try [chain.leaf, chain.intermediate, chain.root].map { try $0.serializeAsPEM().pemString }
        self.header = header
    }

    public func sign(_ payload: some JWTPayload) async throws -> String {
        try await keys.sign(payload, header: header)
    }
}
