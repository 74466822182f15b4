import Foundation
import StoreKitModel

/// `SKProduct`: a product of the simulated store's catalog, as an `SKProductsRequest` returns it.
open class SKProduct: NSObject, @unchecked Sendable {
    /// `SKProduct.PeriodUnit`, with Apple's raw values.
    public enum PeriodUnit: UInt, Sendable, Hashable {
        case day = 0
        case week = 1
        case month = 2
        case year = 3
    }

    let product: Product
    private let locale: Locale

    init(_ product: Product, locale: Locale) {
        self.product = product
        self.locale = locale
    }

    open var productIdentifier: String { product.identifier }
    /// The catalog's reference name: the simulated store has no localized texts.
    open var localizedTitle: String { product.referenceName }
    open var localizedDescription: String { product.referenceName }
    open var price: NSDecimalNumber { NSDecimalNumber(string: product.displayPrice, locale: Locale(identifier: "en_US_POSIX")) }
    /// The catalog's `_locale` (en_US when it sets none).
    open var priceLocale: Locale { locale }
    open var isDownloadable: Bool { !product.hostedContent.isEmpty }
    open var downloadContentLengths: [NSNumber] { product.hostedContent.map { NSNumber(value: $0.contentLength) } }
    open var downloadContentVersion: String { product.hostedContent.first?.contentVersion ?? "" }
    @available(*, deprecated, renamed: "downloadContentVersion")
    open var contentVersion: String { downloadContentVersion }
    open var isFamilyShareable: Bool { false }
    open var subscriptionGroupIdentifier: String? { product.subscriptionGroup }
    open var subscriptionPeriod: SKProductSubscriptionPeriod? { product.subscriptionPeriod.flatMap(SKProductSubscriptionPeriod.init(iso8601:)) }
    open var introductoryPrice: SKProductDiscount? {
        product.introductoryOffer.map { SKProductDiscount($0, identifier: nil, type: .introductory, locale: locale) }
    }
    /// The promotional offers (F-O4).
    open var discounts: [SKProductDiscount] {
        (product.promotionalOffers ?? []).map { SKProductDiscount($0.terms, identifier: $0.identifier, type: .subscription, locale: locale) }
    }
}

/// `SKProductSubscriptionPeriod`.
open class SKProductSubscriptionPeriod: NSObject, @unchecked Sendable {
    public let numberOfUnits: Int
    public let unit: SKProduct.PeriodUnit

    /// From an ISO 8601 duration of one unit, as catalogs write them ("P1M", "P2W", "P1Y", "P3D").
    init?(iso8601 text: String) {
        guard text.count >= 3, text.first == "P", let number = Int(text.dropFirst().dropLast()) else { return nil }
        switch text.last {
        case "D": unit = .day
        case "W": unit = .week
        case "M": unit = .month
        case "Y": unit = .year
        default: return nil
        }
        numberOfUnits = number
    }
}

/// `SKProductDiscount`: an introductory or promotional offer of a subscription.
open class SKProductDiscount: NSObject, @unchecked Sendable {
    /// `SKProductDiscount.PaymentMode`, with Apple's raw values.
    public enum PaymentMode: UInt, Sendable, Hashable {
        case payAsYouGo = 0
        case payUpFront = 1
        case freeTrial = 2
    }

    /// `SKProductDiscount.Type`, with Apple's raw values.
    public enum `Type`: UInt, Sendable, Hashable {
        case introductory = 0
        case subscription = 1
    }

    private let offer: IntroductoryOffer
    public let identifier: String?
    public let type: `Type`
    public let priceLocale: Locale

    init(_ offer: IntroductoryOffer, identifier: String?, type: `Type`, locale: Locale) {
        self.offer = offer
        self.identifier = identifier
        self.type = type
        self.priceLocale = locale
    }

    open var price: NSDecimalNumber { NSDecimalNumber(string: offer.displayPrice, locale: Locale(identifier: "en_US_POSIX")) }
    open var subscriptionPeriod: SKProductSubscriptionPeriod {
        SKProductSubscriptionPeriod(iso8601: offer.subscriptionPeriod) ?? SKProductSubscriptionPeriod(iso8601: "P1M")!
    }
    open var numberOfPeriods: Int { offer.numberOfPeriods }
    open var paymentMode: PaymentMode {
        switch offer.paymentMode {
        case .free: .freeTrial
        case .payUpFront: .payUpFront
        case .payAsYouGo: .payAsYouGo
        }
    }
}
