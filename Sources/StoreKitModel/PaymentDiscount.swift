import Foundation

/// What an app attaches to a payment to buy at a promotional offer (`SKPaymentDiscount`, F-O5):
/// the offer, and the signature the developer's server made over it with its subscription key.
public struct PaymentDiscount: Sendable, Hashable, Codable {
    /// The promotional offer's identifier (`SKPaymentDiscount.identifier`, a catalog `offerID`).
    public var identifier: String
    /// The identifier of the key that signed it (`keyIdentifier`).
    public var keyIdentifier: String
    /// A UUID, lowercase, once per signature (`nonce`).
    public var nonce: String
    /// The signature, in base64 (`signature`); what it is in the simulator: `PromotionalOfferKey`.
    public var signature: String
    /// When the server signed it, in milliseconds since 1970 (`timestamp`); signed, not checked for age.
    public var timestamp: Int64

    public init(identifier: String, keyIdentifier: String, nonce: String, signature: String, timestamp: Int64) {
        self.identifier = identifier
        self.keyIdentifier = keyIdentifier
        self.nonce = nonce
        self.signature = signature
        self.timestamp = timestamp
    }
}

/// The subscription key a simulated store checks promotional offer signatures with (F-O6). Apple
/// signs with ECDSA over P-256; the simulator uses HMAC-SHA256 under a shared secret, so any
/// language makes a valid signature with its standard library, and a run stays deterministic.
///
/// The signature is base64 (standard alphabet, padded) of HMAC-SHA256 with key `secret` (UTF-8)
/// over Apple's payload: key identifier, product identifier, offer identifier, application
/// username (empty when none), nonce (lowercase) and timestamp (decimal), in that order, UTF-8,
/// joined by U+2063 INVISIBLE SEPARATOR (Apple's separator; Apple's payload begins with the app's
/// bundle identifier, which a simulated app does not have). docs/storekit-fidelity.md shows one in Python.
public struct PromotionalOfferKey: Sendable, Hashable, Codable {
    public var identifier: String
    public var secret: String

    public init(identifier: String, secret: String) {
        self.identifier = identifier
        self.secret = secret
    }

    /// The key a scenario that names none uses (`store.promotionalOfferKey`).
    public static let simulator = PromotionalOfferKey(identifier: "SKSIMKEY01", secret: "sksim-promotional-offers")

    /// The signature of a discount on `payment` for offer `offer`, with `nonce` and `timestamp`.
    public func signature(productIdentifier: String, offerIdentifier: String, applicationUsername: String?,
                          nonce: String, timestamp: Int64) -> String {
        let payload = [identifier, productIdentifier, offerIdentifier, applicationUsername ?? "", nonce.lowercased(), String(timestamp)]
            .joined(separator: "\u{2063}")
        return Data(SHA256.authenticationCode(Array(payload.utf8), key: Array(secret.utf8))).base64EncodedString()
    }

    /// A discount for `payment` at `offerIdentifier`, signed with this key.
    public func discount(for payment: Payment, offerIdentifier: String, nonce: String, timestamp: Int64) -> PaymentDiscount {
        PaymentDiscount(identifier: offerIdentifier, keyIdentifier: identifier, nonce: nonce,
                        signature: signature(productIdentifier: payment.productIdentifier, offerIdentifier: offerIdentifier,
                                             applicationUsername: payment.applicationUsername, nonce: nonce, timestamp: timestamp),
                        timestamp: timestamp)
    }

    /// Whether `discount` on `payment` was signed with this key.
    public func isValid(_ discount: PaymentDiscount, on payment: Payment) -> Bool {
        discount.keyIdentifier == identifier
            && discount.signature == signature(productIdentifier: payment.productIdentifier, offerIdentifier: discount.identifier,
                                               applicationUsername: payment.applicationUsername, nonce: discount.nonce,
                                               timestamp: discount.timestamp)
    }

    /// A nonce made from `seed` text (a UUID's form, version 4 bits set): deterministic, so a
    /// simulated app signing at the same step of the same run makes the same one.
    public static func nonce(from seed: String) -> String {
        var bytes = Array(SHA256.hash(Array(seed.utf8)).prefix(16))
        bytes[6] = bytes[6] & 0x0f | 0x40
        bytes[8] = bytes[8] & 0x3f | 0x80
        let hex = bytes.map { String($0, radix: 16).count == 1 ? "0" + String($0, radix: 16) : String($0, radix: 16) }.joined()
        let characters = Array(hex)
        return [0..<8, 8..<12, 12..<16, 16..<20, 20..<32].map { String(characters[$0]) }.joined(separator: "-")
    }
}
