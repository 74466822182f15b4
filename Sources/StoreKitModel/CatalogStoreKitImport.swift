import Foundation

extension Catalog {
    /// The StoreKit configuration format versions (`version.major`) this importer reads: 1.0
    /// (Xcode 12) to 6.x (first seen in a file committed in July 2026; it adds
    /// `subscriptionBundleGroups` and `subscriptionSuiteGroups`).
    public static let supportedStoreKitConfigurationVersions: ClosedRange<Int64> = 1...6

    /// Imports an Xcode StoreKit configuration (`.storekit`, JSON, format versions 1.0 to 6.x).
    ///
    /// Reads `products`, `nonRenewingSubscriptions`, `subscriptionGroups[].subscriptions[]` with
    /// their introductory and promotional offers, and the test `settings`; every other key (offer
    /// codes, win-back offers, localizations, keys of future versions) is ignored.
    /// StoreKit configurations carry no hosted content; the native format adds it.
    /// - Parameter source: names the data in error messages, usually the file path.
    public static func importStoreKitConfiguration(_ data: Data, source: String) throws(CatalogError) -> Catalog {
        let root = try JSONNode.parse(data, source: source, documentKind: "an Xcode StoreKit configuration")
        return try storeKitCatalog(root: root)
    }

    static func storeKitCatalog(root: JSONNode) throws(CatalogError) -> Catalog {
        var catalog = try Catalog(validating: storeKitEntries(root: root), source: root.source)
        catalog.testSettings = try storeKitTestSettings(root: root)
        return catalog
    }

    /// Maps Xcode's `type` values to product kinds.
    private static let storeKitTypes: [String: ProductKind] = [
        "Consumable": .consumable,
        "NonConsumable": .nonConsumable,
        "NonRenewingSubscription": .nonRenewingSubscription,
        "RecurringSubscription": .autoRenewableSubscription,
    ]

    static func storeKitEntries(root: JSONNode) throws(CatalogError) -> [ProductEntry] {
        _ = try root.object()
        try checkStoreKitVersion(root: root)

        var entries: [ProductEntry] = []
        for node in try root.optionalArray("products") {
            entries.append(try storeKitEntry(node, allowedTypes: ["Consumable", "NonConsumable"], group: nil))
        }
        for node in try root.optionalArray("nonRenewingSubscriptions") {
            entries.append(try storeKitEntry(node, allowedTypes: ["NonRenewingSubscription"], group: nil))
        }
        // Groups are known by name here (`Product.subscriptionGroup`), so two of one name would be
        // merged into one, turning a second subscription into a crossgrade of the first.
        var groupKeyPaths: [String: String] = [:]
        for groupNode in try root.optionalArray("subscriptionGroups") {
            _ = try groupNode.object()
            // Xcode always writes a group name; fall back to its id so hand-written files still import.
            var groupName = try groupNode.optionalString("name")
            if groupName == nil {
                groupName = try groupNode.optionalString("id")
            }
            guard let groupName, !groupName.isEmpty else {
                throw groupNode.error(.missingValue, at: groupNode.keyPath(appending: "name"),
                                      problem: "The subscription group has no name.",
                                      remedy: "Give the subscription group a \"name\".")
            }
            let group = (name: groupName, keyPath: groupNode.keyPath(appending: "name"))
            if let earlier = groupKeyPaths[groupName] {
                throw groupNode.error(.invalidValue, at: group.keyPath,
                                      problem: "Two subscription groups are named \"\(groupName)\" (the other at \(earlier)); the simulated store knows a group by its name, so their subscriptions would be one group.",
                                      remedy: "Give each subscription group its own name.")
            }
            groupKeyPaths[groupName] = group.keyPath
            for node in try groupNode.optionalArray("subscriptions") {
                entries.append(try storeKitEntry(node, allowedTypes: ["RecurringSubscription"], group: group))
            }
        }
        try refuseUnreadGroups(root: root)
        return entries
    }

    /// Format 6 writes `subscriptionBundleGroups` and `subscriptionSuiteGroups`, empty in
    /// every real file seen. Their content is undocumented, so a file that fills them is refused
    /// rather than read with subscriptions silently missing.
    private static func refuseUnreadGroups(root: JSONNode) throws(CatalogError) {
        for key in ["subscriptionBundleGroups", "subscriptionSuiteGroups"] {
            guard let first = try root.optionalArray(key).first else { continue }
            throw first.error(
                .invalidValue,
                problem: "The file has \(key == "subscriptionBundleGroups" ? "a subscription bundle group" : "a subscription suite group") (format 6), which this simulator does not read, so the subscriptions in it would be missing.",
                remedy: "Empty \"\(key)\" in a copy of the file, and list the subscriptions the app buys under \"subscriptionGroups\" or in a native catalog (docs/catalog-format.md)."
            )
        }
    }

    private static func checkStoreKitVersion(root: JSONNode) throws(CatalogError) {
        let supported = "versions \(supportedStoreKitConfigurationVersions.lowerBound).0 through \(supportedStoreKitConfigurationVersions.upperBound).x"
        let versionNode = try root.requiredChild(
            "version",
            remedy: "A StoreKit configuration starts with \"version\": {\"major\": N, \"minor\": M}; this simulator reads \(supported). Re-save the file in Xcode."
        )
        _ = try versionNode.object()
        let major = try versionNode.requiredChild(
            "major", remedy: "Give the format version as {\"major\": N, \"minor\": M}; this simulator reads \(supported)."
        ).integer()
        let minor = try versionNode.child("minor")?.integer() ?? 0
        guard supportedStoreKitConfigurationVersions.contains(major) else {
            throw root.error(
                .unsupportedVersion, at: versionNode.keyPath(appending: "major"),
                problem: "StoreKit configuration format version \(major).\(minor) is not supported; this simulator reads \(supported).",
                remedy: "Save the file with an Xcode version that writes a supported format, or convert it to the native catalog format."
            )
        }
    }

    private static func storeKitEntry(
        _ node: JSONNode,
        allowedTypes: [String],
        group: (name: String, keyPath: String)?
    ) throws(CatalogError) -> ProductEntry {
        _ = try node.object()
        let identifier = try node.requiredString(
            "productID", remedy: "Give every product the \"productID\" the app requests, e.g. \"com.example.coins\"."
        )
        let typeNode = try node.requiredChild(
            "type", remedy: "Give product \"\(identifier)\" a \"type\": one of \(allowedTypes.map { "\"\($0)\"" }.joined(separator: ", "))."
        )
        let typeName = try typeNode.string()
        guard let kind = storeKitTypes[typeName] else {
            let known = storeKitTypes.keys.sorted().map { "\"\($0)\"" }.joined(separator: ", ")
            // Hand-written files (a real one has "SUBSCRIPTION" in products) miss the spelling or the list.
            let sameButCase = storeKitTypes.keys.first { $0.lowercased() == typeName.lowercased() }
            let hint = sameButCase.map { " (types are case-sensitive: \"\($0)\")" }
                ?? (typeName.lowercased().contains("subscription")
                    ? " (an auto-renewable subscription is a \"RecurringSubscription\" in \"subscriptionGroups[].subscriptions\", a non-renewing one a \"NonRenewingSubscription\" in \"nonRenewingSubscriptions\")"
                    : "")
            throw typeNode.error(
                .unknownProductType,
                problem: "Unknown product type \"\(typeName)\" for product \"\(identifier)\"; StoreKit configurations use \(known).",
                remedy: "Correct the type\(hint), or re-save the file in Xcode."
            )
        }
        guard allowedTypes.contains(typeName) else {
            throw typeNode.error(
                .invalidValue,
                problem: "Product \"\(identifier)\" of type \"\(typeName)\" is in the wrong list; here only \(allowedTypes.map { "\"\($0)\"" }.joined(separator: ", ")) belong.",
                remedy: "Move it: consumables and non-consumables go in \"products\", non-renewing subscriptions in \"nonRenewingSubscriptions\", auto-renewable ones in \"subscriptionGroups[].subscriptions\"."
            )
        }
        let priceNode = try node.child("displayPrice")
        var product = Product(
            identifier: identifier,
            kind: kind,
            referenceName: try node.optionalString("referenceName"),
            // Hand-written files sometimes omit the price; free is the least surprising default.
            displayPrice: try priceNode?.string() ?? "0",
            subscriptionGroup: group?.name,
            subscriptionPeriod: kind == .autoRenewableSubscription ? try node.optionalString("recurringSubscriptionPeriod") : nil,
            subscriptionLevel: kind == .autoRenewableSubscription ? (try node.child("groupNumber")?.integer()).map { Int(clamping: $0) } : nil
        )
        var offerKeyPath = node.keyPath(appending: "introductoryOffer")
        var promotionalKeyPaths: [String] = []
        if kind == .autoRenewableSubscription {
            if let offer = try storeKitIntroductoryOffer(node) {
                product.introductoryOffer = offer.offer
                offerKeyPath = offer.keyPath
            }
            let promotional = try storeKitPromotionalOffers(node)
            product.promotionalOffers = promotional.isEmpty ? nil : promotional.map(\.offer)
            promotionalKeyPaths = promotional.map(\.keyPath)
        }
        var keyPaths = ProductKeyPaths(
            identifier: node.keyPath(appending: "productID"),
            displayPrice: node.keyPath(appending: "displayPrice"),
            subscriptionGroup: group?.keyPath ?? node.keyPath(appending: "subscriptionGroupID"),
            subscriptionPeriod: node.keyPath(appending: "recurringSubscriptionPeriod"),
            hostedContent: []
        )
        keyPaths.introductoryOffer = offerKeyPath
        keyPaths.promotionalOffers = promotionalKeyPaths
        return ProductEntry(product: product, keyPaths: keyPaths)
    }

    /// A subscription's promotional offers (F-O4): `adHocOffers[]`, the name Xcode writes for them in
    /// every format that has them (3.0 to 6.x in the files read; Xcode's editor calls them "Promotional
    /// Offers"), each with `offerID`, `referenceName`, `paymentMode`, `subscriptionPeriod`,
    /// `numberOfPeriods` (absent: 1) and `displayPrice` (absent: free). An entry without `offerID` or
    /// `paymentMode`, or with an empty `offerID`, no app can name, so it is no offer (such files loaded
    /// before offers were read, and still do); `paymentMode` "none" is no offer, as for introductory
    /// offers. Format 5 may list an offer once per billing plan (`billingPlanType`): of one `offerID`,
    /// the entry billed up front (or of no plan) is kept, else the first, as for introductory offers.
    private static func storeKitPromotionalOffers(_ node: JSONNode) throws(CatalogError) -> [(offer: PromotionalOffer, keyPath: String)] {
        var offers: [(offer: PromotionalOffer, keyPath: String, billedUpFront: Bool)] = []
        for offerNode in try node.optionalArray("adHocOffers") {
            _ = try offerNode.object()
            guard let identifier = try offerNode.optionalString("offerID"), !identifier.isEmpty,
                  let terms = try storeKitOfferTerms(offerNode, kind: "promotional") else { continue }
            let plan = try offerNode.optionalString("billingPlanType")
            let entry = (offer: PromotionalOffer(identifier: identifier, referenceName: try offerNode.optionalString("referenceName"), terms: terms),
                         keyPath: offerNode.keyPath, billedUpFront: plan == nil || plan == "BILLED_UPFRONT")
            if let earlier = offers.firstIndex(where: { $0.offer.identifier == identifier }) {
                if entry.billedUpFront && !offers[earlier].billedUpFront { offers[earlier] = entry }
                continue
            }
            offers.append(entry)
        }
        return offers.map { ($0.offer, $0.keyPath) }
    }

    /// A subscription's introductory offer (F-O1): `introductoryOffer` (an object or null, formats 1
    /// to 4) or `introductoryOffers` (a list, format 5 on, one offer per billing plan). Of a list, the
    /// offer of the plan billed up front (`billingPlanType` "BILLED_UPFRONT", or no plan), the one a
    /// StoreKit 1 purchase gets, else the first. `paymentMode` "none" (with a price and no period,
    /// as some format 3 files carry) is no offer; so is an entry without `paymentMode`, which Xcode
    /// never writes (a hand-written file's `offerMode`/`duration` entry): both loaded before offers
    /// were read, and still do.
    private static func storeKitIntroductoryOffer(_ node: JSONNode) throws(CatalogError) -> (offer: IntroductoryOffer, keyPath: String)? {
        var candidates = try node.optionalArray("introductoryOffers")
        if candidates.isEmpty, let single = try node.child("introductoryOffer") {
            candidates = [single]
        }
        var chosen: JSONNode?
        for candidate in candidates {
            _ = try candidate.object()
            let plan = try candidate.optionalString("billingPlanType")
            if plan == nil || plan == "BILLED_UPFRONT" {
                chosen = candidate
                break
            }
        }
        guard let offerNode = chosen ?? candidates.first,
              let offer = try storeKitOfferTerms(offerNode, kind: "introductory") else { return nil }
        return (offer, offerNode.keyPath)
    }

    /// An offer's terms as `.storekit` files spell them, for introductory and promotional offers
    /// alike: nil for `paymentMode` "none" or no `paymentMode`; a malformed one is refused at its key path.
    private static func storeKitOfferTerms(_ offerNode: JSONNode, kind: String) throws(CatalogError) -> IntroductoryOffer? {
        guard let modeNode = try offerNode.child("paymentMode") else { return nil }
        let modeName = try modeNode.string()
        if modeName == "none" { return nil }
        guard let mode = IntroductoryOffer.PaymentMode(rawValue: modeName) else {
            let known = IntroductoryOffer.PaymentMode.allCases.map { "\"\($0.rawValue)\"" }.joined(separator: ", ")
            let sameButCase = IntroductoryOffer.PaymentMode.allCases.first { $0.rawValue.lowercased() == modeName.lowercased() }
            throw modeNode.error(
                .invalidValue,
                problem: "Unknown \(kind) offer payment mode \"\(modeName)\"; StoreKit configurations use \(known)\(sameButCase.map { " (case-sensitive: \"\($0.rawValue)\")" } ?? "").",
                remedy: "Correct the payment mode, or re-save the file in Xcode.")
        }
        let period = try offerNode.requiredString(
            "subscriptionPeriod", remedy: "Give the offer's duration as an ISO 8601 period, e.g. \"P1W\" for a one-week free trial, or re-save the file in Xcode.")
        let count = try offerNode.child("numberOfPeriods")?.integer() ?? 1
        return IntroductoryOffer(
            paymentMode: mode, subscriptionPeriod: period, numberOfPeriods: Int(clamping: count),
            // Only free trials are written without a price; a paid offer without one is free, as a product is.
            displayPrice: try offerNode.optionalString("displayPrice") ?? "0",
            internalID: try offerNode.optionalString("internalID"))
    }
}
