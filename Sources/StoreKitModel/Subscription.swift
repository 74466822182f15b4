/// An auto-renewable subscription the store keeps renewing (F-U1): started by a charged purchase,
/// renewed at each period end on the device that bought it, until it expires (F-U2).
public struct Subscription: Sendable, Hashable {
    public var device: String
    public var account: String
    /// The first purchase; every renewal's `originalTransaction`.
    public var original: OriginalTransaction
    public var group: String?
    /// Renewals so far.
    public var renewals: Int
    /// When the current period began: the purchase, then each renewal (nanoseconds of the run).
    public var periodStart: Int64
    /// When billing retry began, if the last period end could not be billed (F-B1), and when its
    /// grace period ends (nil: none).
    public var billingRetryStart: Int64?
    public var gracePeriodEnd: Int64?
    /// A downgrade, or a crossgrade to another period, takes effect at the next renewal (F-U3): this
    /// subscription waits for `startsAfter` to end, and that one is `replacedBy` this one.
    public var startsAfter: String?
    public var replacedBy: String?
    public var period: String?
    public var level: Int?
    /// The introductory offer this subscription got (F-O2): its account was new to the group when
    /// it was bought. nil: none (no offer, or not eligible); the periods are the product's.
    public var introductoryOffer: IntroductoryOffer?
    /// The promotional offer this subscription was bought at (F-O5): a valid signed discount of an
    /// account that had subscribed in the group. Never with an introductory offer (that account was new).
    public var promotionalOffer: PromotionalOffer?

    public var productIdentifier: String { original.payment.productIdentifier }

    /// Whether the current period (the purchase's, or the latest renewal's) is at the introductory
    /// offer (F-O2): a free trial's or pay-up-front offer's one period, or the first
    /// `numberOfPeriods` of pay as you go.
    public var isInIntroductoryOfferPeriod: Bool {
        guard let offer = introductoryOffer else { return false }
        return renewals < offer.offerPeriods
    }

    /// The same for a promotional offer (F-O5): its periods are timed as an introductory offer's are.
    public var isInPromotionalOfferPeriod: Bool {
        guard let offer = promotionalOffer else { return false }
        return renewals < offer.terms.offerPeriods
    }

    /// The terms of the offer the current period is at, introductory or promotional; nil at the regular price.
    public var currentOfferTerms: IntroductoryOffer? {
        if isInIntroductoryOfferPeriod { return introductoryOffer }
        return isInPromotionalOfferPeriod ? promotionalOffer?.terms : nil
    }

    /// StoreKit's renewal state at log time `time` (F-B1): subscribed, in its grace period (still
    /// entitled), or in billing retry (not entitled). An expired subscription is no longer tracked.
    public func renewalState(at time: Int64) -> RenewalState {
        guard billingRetryStart != nil else { return .subscribed }
        if let end = gracePeriodEnd, time < end { return .inGracePeriod }
        return .inBillingRetryPeriod
    }

    /// `Product.SubscriptionInfo.RenewalState`'s cases for a subscription still tracked.
    public enum RenewalState: String, Sendable, Hashable {
        case subscribed, inGracePeriod, inBillingRetryPeriod

        /// The user has what the subscription gives: while subscribed and in the grace period.
        public var isEntitled: Bool { self != .inBillingRetryPeriod }
    }
}

/// Renewal periods in simulated time: a `.storekit` period (ISO 8601, `P1M`) in days, sped up by
/// `SKTestSession.TimeRate` as Xcode does (F-U1, F-S3).
public enum SubscriptionPeriod {
    /// A day, week, month and year taken as 1, 7, 30 and 365 days (a month of 30 days, as
    /// `StoreKitTestSettings.speedFactor` takes it, so `P1M` at rate 15 renews every 30 s).
    public static func days(_ text: String) -> Int? {
        guard Catalog.isSubscriptionPeriod(text) else { return nil }
        var total = 0
        var digits = 0
        for character in text.dropFirst() {
            if let digit = character.wholeNumberValue {
                digits = min(digits * 10 + digit, 100_000)  // bounded: no period is longer than this
                continue
            }
            let unit = switch character { case "Y": 365; case "M": 30; case "W": 7; default: 1 }
            total = min(total + digits * unit, 36_500)
            digits = 0
        }
        return total
    }

    /// Nanoseconds of simulated time from one renewal to the next for `period` at `timeRate`
    /// (`SKTestSession.TimeRate`'s raw value); nil for a period or rate that cannot be read.
    /// At a fixed rate (1000 to 1005) every period lasts the rate's renewal interval, as Apple's
    /// test environment renews "subscriptions of any time length" at it (the billing grace period
    /// too; Apple's billing retry period is twice that, which callers using this get as once).
    public static func renewalNanoseconds(_ period: String, timeRate: Int) -> Int64? {
        guard let days = days(period), days > 0 else { return nil }
        if let fixed = StoreKitTestSettings.fixedRenewalSeconds(timeRate: timeRate) {
            return Int64(fixed * 1e9)
        }
        guard let speed = StoreKitTestSettings.speedFactor(timeRate: timeRate) else { return nil }
        let seconds = Double(days) * 86_400 / speed
        return Int64((seconds * 1e9).rounded())
    }
}
