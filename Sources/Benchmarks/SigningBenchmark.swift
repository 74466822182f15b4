import AppStoreSigning
import Crypto
import Foundation

/// What signing costs (`sksim bench signing`): signed transactions (ES256 JWS with the chain in `x5c`,
/// through jwt-kit) and app receipts (CMS SignedData) per second, beside the limit they are built on,
/// raw P-256 signatures by the same key over an input of the same size, measured in the same run.
public enum SigningBenchmark {
    public struct Measurement: Sendable {
        public var operations: Int
        public var seconds: Double
        public var perSecond: Double { seconds > 0 ? Double(operations) / seconds : 0 }
    }

    public struct Result: Sendable {
        public var signedTransactions: Measurement
        public var receipts: Measurement
        /// The baseline: `P256.Signing.PrivateKey.signature(for:)` over the bytes a JWS signs.
        public var rawSignatures: Measurement
        public var ratioToRawSignatures: Double { rawSignatures.perSecond > 0 ? signedTransactions.perSecond / rawSignatures.perSecond : 0 }
    }

    /// Runs each measurement for about `seconds` on one thread, with a chain made for the run.
    public static func run(seconds: Double) async throws -> Result {
        let chain = try SigningChain.generate().chain
        let signer = try await JWSSigner(chain: chain)
        let payload = TransactionPayload(
            transactionId: "2798666297169724750", originalTransactionId: "2798666297169724750", webOrderLineItemId: nil,
            bundleId: AppStoreSettings.defaultBundleIdentifier, productId: "com.example.sksim.coins.small", subscriptionGroupIdentifier: nil,
            purchaseDate: 1_767_225_600_000, originalPurchaseDate: 1_767_225_600_000, expiresDate: nil, quantity: 1, type: "Consumable",
            appAccountToken: nil, inAppOwnershipType: "PURCHASED", signedDate: 1_767_225_600_000, revocationReason: nil, revocationDate: nil,
            isUpgraded: nil, offerType: nil, offerIdentifier: nil, offerDiscountType: nil, environment: AppStoreSettings.defaultEnvironment,
            storefront: "USA", storefrontId: "143441", transactionReason: "PURCHASE", price: 990, currency: "USD")
        let sample = try await signer.sign(payload)
        // The baseline signs what a JWS signs: its header and payload, as text.
        let signingInput = Data(sample.split(separator: ".").prefix(2).joined(separator: ".").utf8)
        let entries = (1...5).map { index in
            AppReceipt.Entry(quantity: 1, productIdentifier: "com.example.sksim.coins.small", transactionId: "279866629716972475\(index)",
                             originalTransactionId: "279866629716972475\(index)", purchaseDate: 1_767_225_600_000, originalPurchaseDate: 1_767_225_600_000,
                             expiresDate: nil, cancellationDate: nil, webOrderLineItemId: nil, isTrialPeriod: false,
                             isInIntroductoryOfferPeriod: false, promotionalOfferIdentifier: nil)
        }
        let signedTransactions = try await measure(seconds: seconds) { _ = try await signer.sign(payload) }
        let rawSignatures = try await measure(seconds: seconds) { _ = try chain.leafKey.signature(for: signingInput) }
        let receipts = try await measure(seconds: seconds) {
            _ = try AppReceipt.signed(entries: entries, bundleIdentifier: AppStoreSettings.defaultBundleIdentifier, chain: chain, now: Date())
        }
        return Result(signedTransactions: signedTransactions, receipts: receipts, rawSignatures: rawSignatures)
    }

    /// Repeats `operation` in batches until `seconds` have passed (at least one batch).
    private static func measure(seconds: Double, _ operation: () async throws -> Void) async throws -> Measurement {
        let clock = ContinuousClock()
        let start = clock.now
        let limit = Duration.milliseconds(Int64(seconds * 1000))
        var operations = 0
        repeat {
            for _ in 0..<16 { try await operation() }
            operations += 16
        } while clock.now - start < limit
        let elapsed = clock.now - start
        return Measurement(operations: operations, seconds: Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18)
    }
}
