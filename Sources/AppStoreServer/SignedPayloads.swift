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
    }

    public var notificationType: String
    public var subtype: String?
    public var notificationUUID: String
    public var data: Data
    public var version: String
    public var signedDate: Int64

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
