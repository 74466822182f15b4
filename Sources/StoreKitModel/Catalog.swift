import Foundation

/// The products the simulated App Store sells, validated and indexed by identifier.
public struct Catalog: Sendable, Hashable {
    /// All products in the order they were declared.
    ///
    /// Read-only so the identifier index can never go stale; build a new catalog to change it.
    public private(set) var products: [Product]
    private var indexByIdentifier: [String: Int]
    /// The test settings of the `.storekit` file it came from (empty for other catalogs), which
    /// the simulated store honours (docs/storekit-fidelity.md, F-S1 to F-S4).
    public var testSettings = StoreKitTestSettings()

    /// Creates a catalog from products, validating them.
    ///
    /// Rejects empty or duplicate identifiers, malformed prices and subscription periods,
    /// auto-renewable subscriptions without a group or period, and invalid hosted content.
    public init(products: [Product]) throws(CatalogError) {
        let entries = products.enumerated().map { index, product in
            ProductEntry(product: product, keyPaths: .native(base: "products[\(index)]", product: product))
        }
        try self.init(validating: entries, source: "catalog")
    }

    /// The product with this identifier, if the catalog sells it. Constant time.
    public func product(_ identifier: String) -> Product? {
        index(of: identifier).map { products[$0] }
    }

    /// The position in `products` of the product with this identifier. Hot paths read the fields
    /// they need through it (`products[index].kind`): `product(_:)` returns a copy of the whole
    /// product, every string and array in it retained and released.
    public func index(of identifier: String) -> Int? {
        indexByIdentifier[identifier]
    }

    /// True when the catalog sells a product with this identifier.
    public func contains(_ identifier: String) -> Bool {
        indexByIdentifier.index(forKey: identifier) != nil
    }

    public static func == (lhs: Catalog, rhs: Catalog) -> Bool {
        lhs.products == rhs.products && lhs.testSettings == rhs.testSettings
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(products)
        hasher.combine(testSettings)
    }

    /// Reads a catalog file, choosing the format by extension and content.
    ///
    /// Files ending in `.storekit` are Xcode StoreKit configurations. Other files are sniffed:
    /// a `"format": "sksim-catalog"` member means the native format, otherwise a StoreKit
    /// configuration is assumed when the file has its keys. A native catalog's relative
    /// `storekitConfiguration` path is resolved against the file's directory.
    public static func load(contentsOf url: URL) throws(CatalogError) -> Catalog {
        let catalog = try parseFile(url)
        try catalog.checkRecordable(source: url.path)
        return catalog
    }

    private static func parseFile(_ url: URL) throws(CatalogError) -> Catalog {
        let source = url.path
        let data = try readFile(url)
        let baseDirectory = url.deletingLastPathComponent()
        if url.pathExtension.lowercased() == "storekit" {
            return try importStoreKitConfiguration(data, source: source)
        }
        let root = try JSONNode.parse(data, source: source, documentKind: "a product catalog")
        let members = try root.object()
        if members["format"] != nil {
            return try nativeCatalog(root: root, baseDirectory: baseDirectory)
        }
        let storeKitKeys = ["version", "products", "nonRenewingSubscriptions", "subscriptionGroups"]
        if storeKitKeys.contains(where: { members[$0] != nil }) {
            return try storeKitCatalog(root: root)
        }
        throw root.error(
            .unrecognizedFormat,
            problem: "Expected an Xcode StoreKit configuration (with \"version\" and \"products\") "
                + "or a native catalog (with \"format\": \"\(nativeFormatName)\"), found neither.",
            remedy: "Pass a .storekit file exported by Xcode or a native catalog as described in docs/catalog-format.md."
        )
    }

    /// The most bytes the catalog's copy in a run's first log record (`nativeCatalogData()`) may
    /// take: that record holds at most 1 MiB (the log's default `maximumPayloadBytes`), and the
    /// scenario and versions beside the catalog take a few kilobytes. About 5,600 products with short identifiers.
    public static let maximumRecordedBytes = 1_000_000

    /// Refuses a catalog too big to be recorded in a run's log, so it fails when it is read, in
    /// words about products, rather than when a run starts, as a log record over its bound.
    private func checkRecordable(source: String) throws(CatalogError) {
        let recorded = nativeCatalogData().count
        guard recorded > Self.maximumRecordedBytes else { return }
        let fitting = Int(Double(products.count) * Double(Self.maximumRecordedBytes) / Double(recorded))
        throw CatalogError(
            reason: .invalidValue, source: source,
            problem: "The catalog's \(products.count) products take \(recorded) bytes in a run's log, where its first record holds at most \(Self.maximumRecordedBytes) bytes of catalog, so no run could start with it.",
            remedy: "Use a catalog of fewer products (about \(fitting) of these fit): keep the ones the scenario needs."
        )
    }
}

extension Catalog {
    /// Where each validated field of a product came from, so errors point into the right file format.
    struct ProductKeyPaths: Sendable {
        var identifier: String
        var displayPrice: String
        var subscriptionGroup: String
        var subscriptionPeriod: String
        /// One key path per piece of hosted content, in order.
        var hostedContent: [String]
        /// The introductory offer's object (F-O1); its fields' paths append to it.
        var introductoryOffer: String = ""
        /// Each promotional offer's object, in order (F-O4).
        var promotionalOffers: [String] = []

        static func native(base: String, product: Product) -> ProductKeyPaths {
            ProductKeyPaths(
                identifier: "\(base).identifier",
                displayPrice: "\(base).displayPrice",
                subscriptionGroup: "\(base).subscriptionGroup",
                subscriptionPeriod: "\(base).subscriptionPeriod",
                hostedContent: product.hostedContent.indices.map { "\(base).hostedContent[\($0)]" },
                introductoryOffer: "\(base).introductoryOffer",
                promotionalOffers: (product.promotionalOffers ?? []).indices.map { "\(base).promotionalOffers[\($0)]" }
            )
        }
    }

    struct ProductEntry: Sendable {
        var product: Product
        var keyPaths: ProductKeyPaths
    }

    /// Validates every product and builds the index; all public entry points end here.
    init(validating entries: [ProductEntry], source: String) throws(CatalogError) {
        func failure(_ reason: CatalogError.Reason, _ keyPath: String, _ problem: String, _ remedy: String) -> CatalogError {
            CatalogError(reason: reason, source: source, keyPath: keyPath, problem: problem, remedy: remedy)
        }
        var index: [String: Int] = [:]
        var identifierKeyPaths: [String: String] = [:]
        var contentKeyPaths: [String: String] = [:]
        for (position, entry) in entries.enumerated() {
            let product = entry.product
            let paths = entry.keyPaths
            if product.identifier.trimmingCharacters(in: .whitespaces).isEmpty {
                throw failure(.missingValue, paths.identifier,
                              "Expected a non-empty product identifier, found an empty one.",
                              "Give the product the identifier the app requests, e.g. \"com.example.coins\".")
            }
            if let earlier = identifierKeyPaths[product.identifier] {
                throw failure(.duplicateProduct, paths.identifier,
                              "The product identifier \"\(product.identifier)\" is already used at \(earlier).",
                              "Give each product its own identifier or remove the duplicate.")
            }
            identifierKeyPaths[product.identifier] = paths.identifier
            index[product.identifier] = position

            if !Self.isDecimalPrice(product.displayPrice) {
                throw failure(.invalidValue, paths.displayPrice,
                              "Expected a decimal price such as \"0.99\" for product \"\(product.identifier)\", found \"\(product.displayPrice)\".",
                              "Write the price with digits and at most one decimal point.")
            }
            if product.kind == .autoRenewableSubscription {
                if (product.subscriptionGroup ?? "").trimmingCharacters(in: .whitespaces).isEmpty {
                    throw failure(.missingValue, paths.subscriptionGroup,
                                  "Auto-renewable subscription \"\(product.identifier)\" has no subscription group.",
                                  "Put the subscription in a named subscription group.")
                }
                if product.subscriptionPeriod == nil {
                    throw failure(.missingValue, paths.subscriptionPeriod,
                                  "Auto-renewable subscription \"\(product.identifier)\" has no renewal period.",
                                  "Give it an ISO 8601 period such as \"P1M\" or \"P1Y\".")
                }
            }
            if let period = product.subscriptionPeriod, !Self.isSubscriptionPeriod(period) {
                throw failure(.invalidValue, paths.subscriptionPeriod,
                              "Expected an ISO 8601 duration such as \"P1W\", \"P1M\" or \"P1Y\" for product \"\(product.identifier)\", found \"\(period)\".",
                              "Write the period as P followed by counts of years (Y), months (M), weeks (W) or days (D).")
            }
            // A period of no length ("P0D") would never end, so the subscription would neither renew nor expire.
            if let period = product.subscriptionPeriod, SubscriptionPeriod.days(period) == 0 {
                throw failure(.invalidValue, paths.subscriptionPeriod,
                              "The renewal period \"\(period)\" of product \"\(product.identifier)\" has no length, so the subscription would never renew or expire.",
                              "Give a period of at least one day, such as \"P1W\" or \"P1M\".")
            }
            if let offer = product.introductoryOffer {
                try Self.validate(offer, of: product, at: paths.introductoryOffer.isEmpty
                                  ? "introductoryOffer of product \"\(product.identifier)\"" : paths.introductoryOffer, source: source)
            }
            if let offers = product.promotionalOffers {
                try Self.validate(offers, of: product, at: paths.promotionalOffers, source: source)
            }
            // Apple hosts content for non-consumable products only (F-H2), so a renewal, a consumable
            // or a non-renewing subscription never lists downloads.
            if !product.hostedContent.isEmpty && product.kind != .nonConsumable {
                throw failure(.invalidValue, paths.hostedContent.first ?? "hostedContent of product \"\(product.identifier)\"",
                              "Product \"\(product.identifier)\" is a \(product.kind) with hosted content; Apple hosts content for non-consumable products only.",
                              "Remove its hostedContent, or make the product nonConsumable.")
            }
            try Self.validateHostedContent(of: product, at: paths.hostedContent, seen: &contentKeyPaths, source: source)
        }
        self.products = entries.map(\.product)
        self.indexByIdentifier = index
    }

    /// A product's hosted content: each piece with an identifier that names one folder and is used once in
    /// the catalog (`seen`: identifier to key path), a length, and a version of numbers separated by dots.
    private static func validateHostedContent(of product: Product, at keyPaths: [String], seen contentKeyPaths: inout [String: String],
                                              source: String) throws(CatalogError) {
        func failure(_ reason: CatalogError.Reason, _ keyPath: String, _ problem: String, _ remedy: String) -> CatalogError {
            CatalogError(reason: reason, source: source, keyPath: keyPath, problem: problem, remedy: remedy)
        }
        for (contentIndex, content) in product.hostedContent.enumerated() {
            let contentPath = contentIndex < keyPaths.count
                ? keyPaths[contentIndex]
                : "hostedContent of product \"\(product.identifier)\"[\(contentIndex)]"
            if content.contentIdentifier.trimmingCharacters(in: .whitespaces).isEmpty {
                throw failure(.missingValue, "\(contentPath).contentIdentifier",
                              "Expected a non-empty content identifier for hosted content of product \"\(product.identifier)\".",
                              "Give each piece of hosted content an identifier, e.g. \"\(product.identifier).content\".")
            }
            // Downloads are stored in a folder named after the identifier: it must be one name.
            let identifier = content.contentIdentifier
            if !FolderName.isSingleComponent(identifier) {
                throw failure(.invalidValue, "\(contentPath).contentIdentifier",
                              "The content identifier \"\(identifier)\" cannot name a folder (it holds '/' or a NUL byte, or is '.' or '..').",
                              "Use a reverse-DNS name such as \"\(product.identifier).content\".")
            }
            if let earlier = contentKeyPaths[content.contentIdentifier] {
                throw failure(.duplicateContent, "\(contentPath).contentIdentifier",
                              "The content identifier \"\(content.contentIdentifier)\" is already used at \(earlier).",
                              "Give each piece of hosted content its own identifier; downloads are stored under it.")
            }
            contentKeyPaths[content.contentIdentifier] = "\(contentPath).contentIdentifier"
            if content.contentLength <= 0 {
                throw failure(.invalidValue, "\(contentPath).contentLength",
                              "Expected a content length in bytes greater than zero for \"\(content.contentIdentifier)\", found \(content.contentLength).",
                              "Set contentLength to the size of the download in bytes.")
            }
            if !HostedContent.isValidContentVersion(content.contentVersion) {
                throw failure(.invalidValue, "\(contentPath).contentVersion",
                              "Expected a content version of integers separated by dots such as \"1.0.2\" for \"\(content.contentIdentifier)\", found \"\(content.contentVersion)\".",
                              "Write the version as numbers separated by dots.")
            }
        }
    }

    /// Promotional offers (F-O4) have the terms of an introductory offer, a non-empty identifier of
    /// their own within the product, and are bounded in number.
    private static func validate(_ offers: [PromotionalOffer], of product: Product, at keyPaths: [String], source: String) throws(CatalogError) {
        let listPath = keyPaths.first.map { String($0.prefix { $0 != "[" }) } ?? "promotionalOffers of product \"\(product.identifier)\""
        guard offers.count <= PromotionalOffer.maximumPerProduct else {
            throw CatalogError(reason: .invalidValue, source: source, keyPath: listPath,
                               problem: "Product \"\(product.identifier)\" has \(offers.count) promotional offers; a product may have at most \(PromotionalOffer.maximumPerProduct).",
                               remedy: "Keep the offers the apps use.")
        }
        var seen: [String: String] = [:]
        for (index, offer) in offers.enumerated() {
            let keyPath = index < keyPaths.count ? keyPaths[index] : "\(listPath)[\(index)]"
            if offer.identifier.trimmingCharacters(in: .whitespaces).isEmpty {
                throw CatalogError(reason: .missingValue, source: source, keyPath: "\(keyPath).identifier",
                                   problem: "A promotional offer of product \"\(product.identifier)\" has an empty identifier, so no payment could name it.",
                                   remedy: "Give the offer the identifier apps put in SKPaymentDiscount.identifier, e.g. \"comeback\".")
            }
            if let earlier = seen[offer.identifier] {
                throw CatalogError(reason: .invalidValue, source: source, keyPath: keyPath,
                                   problem: "The promotional offer identifier \"\(offer.identifier)\" of product \"\(product.identifier)\" is already used at \(earlier).",
                                   remedy: "Give each promotional offer of a product its own identifier.")
            }
            seen[offer.identifier] = keyPath
            try validate(offer.terms, of: product, at: keyPath, source: source, kind: "promotional")
        }
    }

    /// An introductory or promotional offer belongs to an auto-renewable subscription and lasts a
    /// period of some length, a bounded number of times, at a decimal price (F-O1, F-O4).
    private static func validate(_ offer: IntroductoryOffer, of product: Product, at keyPath: String, source: String,
                                 kind: String = "introductory") throws(CatalogError) {
        func failure(_ reason: CatalogError.Reason, _ field: String?, _ problem: String, _ remedy: String) -> CatalogError {
            CatalogError(reason: reason, source: source, keyPath: field.map { "\(keyPath).\($0)" } ?? keyPath, problem: problem, remedy: remedy)
        }
        guard product.kind == .autoRenewableSubscription else {
            throw failure(.invalidValue, nil, "Product \"\(product.identifier)\" is a \(product.kind) with \(kind == "introductory" ? "an" : "a") \(kind) offer; only auto-renewable subscriptions have one.",
                          "Remove the \(kind) offer, or make the product an auto-renewable subscription.")
        }
        let period = offer.subscriptionPeriod
        guard isSubscriptionPeriod(period), let days = SubscriptionPeriod.days(period), days > 0 else {
            throw failure(.invalidValue, "subscriptionPeriod",
                          "Expected an ISO 8601 duration of at least one day such as \"P1W\" or \"P1M\" for the \(kind) offer of product \"\(product.identifier)\", found \"\(period)\".",
                          "Write the offer's period as P followed by counts of years (Y), months (M), weeks (W) or days (D), as Xcode writes it.")
        }
        guard (1...IntroductoryOffer.maximumNumberOfPeriods).contains(offer.numberOfPeriods) else {
            throw failure(.invalidValue, "numberOfPeriods",
                          "The \(kind) offer of product \"\(product.identifier)\" lasts \(offer.numberOfPeriods) periods; an offer lasts 1 to \(IntroductoryOffer.maximumNumberOfPeriods).",
                          "Give numberOfPeriods as a whole number from 1 to \(IntroductoryOffer.maximumNumberOfPeriods), or leave it out for 1.")
        }
        guard isDecimalPrice(offer.displayPrice) else {
            throw failure(.invalidValue, "displayPrice",
                          "Expected a decimal price such as \"0.99\" for the \(kind) offer of product \"\(product.identifier)\", found \"\(offer.displayPrice)\".",
                          "Write the price with digits and at most one decimal point.")
        }
    }

    /// Digits with at most one decimal point between digits, e.g. "0.99" or "199".
    static func isDecimalPrice(_ text: String) -> Bool {
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count <= 2 else { return false }
        return parts.allSatisfy { part in
            !part.isEmpty && part.allSatisfy { $0.isASCII && $0.isNumber }
        }
    }

    /// The subset of ISO 8601 durations subscriptions use: `P`, then counts of Y, M, W, D in that order.
    public static func isSubscriptionPeriod(_ text: String) -> Bool {
        guard text.first == "P", text.count > 1 else { return false }
        let designators: [Character] = ["Y", "M", "W", "D"]
        var nextDesignator = 0
        var digits = ""
        for character in text.dropFirst() {
            if character.isASCII && character.isNumber {
                digits.append(character)
                continue
            }
            guard !digits.isEmpty,
                  let position = designators[nextDesignator...].firstIndex(of: character) else { return false }
            nextDesignator = position + 1
            digits = ""
        }
        return digits.isEmpty
    }
}
