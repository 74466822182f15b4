/// A promotional offer of an auto-renewable subscription (F-O4): a discount the developer gives
/// current and lapsed subscribers, by attaching a signed `PaymentDiscount` to a payment
/// (`SKProductDiscount` of type `subscription`). Read from a `.storekit` file's `adHocOffers`.
public struct PromotionalOffer: Sendable, Hashable, Codable {
    /// The offer identifier an app names in `SKPaymentDiscount.identifier` (the file's `offerID`).
    public var identifier: String
    /// The name developers see (the file's `referenceName`).
    public var referenceName: String?
    /// Payment mode, period, number of periods and price: the same terms an introductory offer has
    /// (both are `SKProductDiscount`s), applied to a subscription the same way (F-O2).
    public var terms: IntroductoryOffer

    public init(identifier: String, referenceName: String? = nil, terms: IntroductoryOffer) {
        self.identifier = identifier
        self.referenceName = referenceName
        self.terms = terms
    }

    /// The most promotional offers one subscription may list: well above the 10 active ones App Store
    /// Connect allows per subscription, and a bound, so a hand-written file cannot make a product unbounded.
    public static let maximumPerProduct = 100

    private enum CodingKeys: String, CodingKey { case identifier, referenceName }

    /// Flat, as the native catalog format writes it: `identifier`, `referenceName` and the terms'
    /// own names side by side (docs/catalog-format.md).
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        identifier = try container.decode(String.self, forKey: .identifier)
        referenceName = try container.decodeIfPresent(String.self, forKey: .referenceName)
        terms = try IntroductoryOffer(from: decoder)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(identifier, forKey: .identifier)
        try container.encodeIfPresent(referenceName, forKey: .referenceName)
        try terms.encode(to: encoder)
    }

    /// Words for listings: `comeback: payAsYouGo 0.99 per P1M x2`.
    public var summary: String { "\(identifier): \(terms.summary)" }
}
