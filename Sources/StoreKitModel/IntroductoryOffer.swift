/// An auto-renewable subscription's introductory offer (F-O1): a free trial or a discounted first
/// stretch, for accounts new to the subscription group (`SKProduct.introductoryPrice`).
public struct IntroductoryOffer: Sendable, Hashable, Codable {
    /// `SKProductDiscount.PaymentMode`, spelled as `.storekit` files spell it.
    public enum PaymentMode: String, Sendable, Hashable, Codable, CaseIterable {
        /// Nothing to pay for the offer's duration (`freeTrial`).
        case free
        /// The offer price once, for the offer's whole duration.
        case payUpFront
        /// The offer price at each of `numberOfPeriods` billing periods of `subscriptionPeriod`.
        case payAsYouGo
    }

    public var paymentMode: PaymentMode
    /// An ISO 8601 duration: one billing period of the offer (`SKProductDiscount.subscriptionPeriod`).
    public var subscriptionPeriod: String
    /// How many of those periods the offer lasts (`SKProductDiscount.numberOfPeriods`), 1 or more.
    public var numberOfPeriods: Int
    /// The offer price as decimal text; "0" for a free trial.
    public var displayPrice: String
    /// Xcode's own identifier of the offer, kept so a listing can name it.
    public var internalID: String?

    public init(paymentMode: PaymentMode, subscriptionPeriod: String, numberOfPeriods: Int = 1,
                displayPrice: String = "0", internalID: String? = nil) {
        self.paymentMode = paymentMode
        self.subscriptionPeriod = subscriptionPeriod
        self.numberOfPeriods = numberOfPeriods
        self.displayPrice = paymentMode == .free ? "0" : displayPrice
        self.internalID = internalID
    }

    /// The most periods an offer may give: well above the pay-as-you-go offers real files carry
    /// (at most 3 periods in the 253 files read), and a bound, so a hand-written file cannot start
    /// a subscription that never reaches its regular price.
    public static let maximumNumberOfPeriods = 99

    /// How many of the subscription's periods are at the offer: a free trial or a pay-up-front offer
    /// is one period as long as the whole offer; pay as you go is `numberOfPeriods` billing periods,
    /// each ended by a renewal at the offer price (Apple's timelines for the three modes).
    public var offerPeriods: Int { paymentMode == .payAsYouGo ? numberOfPeriods : 1 }

    /// How many `subscriptionPeriod`s one offer period lasts: the whole offer for a free trial or
    /// pay up front, one for pay as you go.
    public var periodMultiple: Int { paymentMode == .payAsYouGo ? 1 : numberOfPeriods }

    /// Words for listings: `free trial P1W`, `payUpFront 1.99 for P2M`, `payAsYouGo 0.99 per P1M x3`.
    public var summary: String {
        switch paymentMode {
        case .free: "free trial \(multiplied)"
        case .payUpFront: "payUpFront \(displayPrice) for \(multiplied)"
        case .payAsYouGo: "payAsYouGo \(displayPrice) per \(subscriptionPeriod) x\(numberOfPeriods)"
        }
    }

    private var multiplied: String { numberOfPeriods == 1 ? subscriptionPeriod : "\(numberOfPeriods) x \(subscriptionPeriod)" }
}
