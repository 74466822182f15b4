/// A product the simulated store sells.
public struct Product: Sendable, Hashable, Codable {
    /// The product identifier (StoreKit's `productIdentifier`).
    public var identifier: String
    /// What kind of in-app purchase this is.
    public var kind: ProductKind
    /// The name developers see; not shown to customers.
    public var referenceName: String
    /// The price as decimal text, for example "0.99"; kept as text so no rounding creeps in.
    public var displayPrice: String
    /// The subscription group name, for auto-renewable subscriptions.
    public var subscriptionGroup: String?
    /// The renewal period as an ISO 8601 duration, for example "P1M".
    public var subscriptionPeriod: String?
    /// Content the store hosts for this product, downloaded after purchase.
    public var hostedContent: [HostedContent]
    /// The level within its subscription group (the `.storekit` `groupNumber`): 1 is the highest.
    /// Decides whether a change in the group is an upgrade, a downgrade or a crossgrade (F-U3).
    public var subscriptionLevel: Int?
    /// The introductory offer of an auto-renewable subscription, if it has one (F-O1): what a
    /// purchase by an account new to the subscription group gets.
    public var introductoryOffer: IntroductoryOffer?
    /// The promotional offers of an auto-renewable subscription (F-O4), what a payment's signed
    /// discount names; nil when it has none, so catalogs without keep their bytes.
    public var promotionalOffers: [PromotionalOffer]?

    /// The promotional offer `identifier` names, if the product has it.
    public func promotionalOffer(_ identifier: String) -> PromotionalOffer? {
        promotionalOffers?.first { $0.identifier == identifier }
    }

    /// Whether purchases of this product come back on restore; consumables do not (R-Q9).
    public var isRestorable: Bool { kind.isRestorable }

    /// Creates a product; `Catalog` validates it.
    public init(
        identifier: String,
        kind: ProductKind,
        referenceName: String? = nil,
        displayPrice: String,
        subscriptionGroup: String? = nil,
        subscriptionPeriod: String? = nil,
        hostedContent: [HostedContent] = [],
        subscriptionLevel: Int? = nil,
        introductoryOffer: IntroductoryOffer? = nil,
        promotionalOffers: [PromotionalOffer]? = nil
    ) {
        self.identifier = identifier
        self.kind = kind
        self.referenceName = referenceName ?? identifier
        self.displayPrice = displayPrice
        self.subscriptionGroup = subscriptionGroup
        self.subscriptionPeriod = subscriptionPeriod
        self.hostedContent = hostedContent
        self.subscriptionLevel = subscriptionLevel
        self.introductoryOffer = introductoryOffer
        self.promotionalOffers = promotionalOffers?.isEmpty == true ? nil : promotionalOffers
    }
}
