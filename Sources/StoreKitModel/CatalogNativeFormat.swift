import Foundation

extension Catalog {
    /// The value of the native format's `"format"` member.
    public static let nativeFormatName = "sksim-catalog"
    /// The native format version this code writes when no product has an introductory offer; the
    /// shape of version 1, so such catalogs (the built-in one) keep their bytes in a run's log.
    public static let nativeFormatVersion: Int64 = 1
    /// The version written when a product has an introductory offer (F-O1): version 1 plus
    /// `introductoryOffer`, so an sksim that predates offers refuses such a catalog (and a log
    /// recording it) instead of reading it without them. Both versions are read.
    public static let nativeFormatVersionWithOffers: Int64 = 2
    /// The version written when a product has a promotional offer (F-O4): version 2 plus
    /// `promotionalOffers`, so an sksim that predates them refuses such a catalog (and a log
    /// recording it) instead of selling without them. Every version up to it is read.
    public static let nativeFormatVersionWithPromotionalOffers: Int64 = 3
    /// The versions `parseNativeCatalog` reads.
    public static let nativeFormatVersions: ClosedRange<Int64> = 1...3

    /// The version this catalog is written in: 3 when it carries a promotional offer, 2 when it
    /// carries an introductory offer, else 1; the lowest that holds it, so catalogs keep their bytes.
    public var nativeVersion: Int64 {
        if products.contains(where: { $0.promotionalOffers != nil }) { return Self.nativeFormatVersionWithPromotionalOffers }
        return products.contains { $0.introductoryOffer != nil } ? Self.nativeFormatVersionWithOffers : Self.nativeFormatVersion
    }

    /// Parses the native catalog format (see docs/catalog-format.md).
    ///
    /// A relative `storekitConfiguration` path is resolved against the current directory;
    /// use `load(contentsOf:)` or `parseNativeCatalog(_:source:baseDirectory:)` to resolve it
    /// against the catalog file's own directory.
    public static func parseNativeCatalog(_ data: Data, source: String) throws(CatalogError) -> Catalog {
        try parseNativeCatalog(data, source: source, baseDirectory: nil)
    }

    /// Parses the native catalog format, resolving a relative `storekitConfiguration` path
    /// against `baseDirectory` (or the current directory when it is nil).
    public static func parseNativeCatalog(_ data: Data, source: String, baseDirectory: URL?) throws(CatalogError) -> Catalog {
        let root = try JSONNode.parse(data, source: source, documentKind: "a \(nativeFormatName) catalog")
        return try nativeCatalog(root: root, baseDirectory: baseDirectory)
    }

    /// The catalog in the native format, as pretty-printed JSON with sorted keys;
    /// `parseNativeCatalog` reads it back to an equal catalog.
    public func nativeCatalogData() -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        let document = NativeDocument(format: Self.nativeFormatName, version: nativeVersion, products: products,
                                      testSettings: testSettings.isEmpty ? nil : testSettings)
        do {
            return try encoder.encode(document)
        } catch {
            // Only strings, integers and arrays are encoded, which JSONEncoder always accepts.
            preconditionFailure("Encoding a catalog as JSON failed: \(error)")
        }
    }

    private struct NativeDocument: Encodable {
        var format: String
        var version: Int64
        var products: [Product]
        /// Absent when empty, so catalogs without settings keep their bytes.
        var testSettings: StoreKitTestSettings?
    }

    static func nativeCatalog(root: JSONNode, baseDirectory: URL?) throws(CatalogError) -> Catalog {
        _ = try root.object()
        let formatNode = try root.requiredChild(
            "format", remedy: "Start a native catalog with \"format\": \"\(nativeFormatName)\", \"version\": \(nativeFormatVersion)."
        )
        let format = try formatNode.string()
        guard format == nativeFormatName else {
            throw formatNode.error(
                .unrecognizedFormat,
                problem: "Expected \"\(nativeFormatName)\", found \"\(format)\".",
                remedy: "Set \"format\" to \"\(nativeFormatName)\", or pass an Xcode .storekit file instead."
            )
        }
        let versionNode = try root.requiredChild(
            "version", remedy: "Add \"version\": \(nativeFormatVersion)."
        )
        let version = try versionNode.integer()
        guard nativeFormatVersions.contains(version) else {
            throw versionNode.error(
                .unsupportedVersion,
                problem: "Native catalog version \(version) is not supported; this simulator reads versions \(nativeFormatVersions.lowerBound) to \(nativeFormatVersions.upperBound).",
                remedy: "Set \"version\" to \(nativeFormatVersionWithPromotionalOffers) (\(nativeFormatVersionWithOffers) without promotional offers, \(nativeFormatVersion) without any offer) and describe the products as in docs/catalog-format.md."
            )
        }

        var entries: [ProductEntry] = []
        if let referenceNode = try root.child("storekitConfiguration") {
            entries += try importReferencedConfiguration(referenceNode, baseDirectory: baseDirectory)
        }
        for node in try root.optionalArray("products") {
            entries.append(try nativeEntry(node, version: version))
        }
        if let hostedContentNode = try root.child("hostedContent") {
            try attachHostedContent(hostedContentNode, to: &entries)
        }
        var catalog = try Catalog(validating: entries, source: root.source)
        if let settingsNode = try root.child("testSettings") {
            catalog.testSettings = try nativeTestSettings(settingsNode)
        }
        return catalog
    }

    /// Imports the `.storekit` file a native catalog refers to; it is validated on its own first
    /// so its errors name that file.
    private static func importReferencedConfiguration(_ node: JSONNode, baseDirectory: URL?) throws(CatalogError) -> [ProductEntry] {
        let path = try node.string()
        let url: URL
        if path.hasPrefix("/") {
            url = URL(fileURLWithPath: path)
        } else {
            let base = baseDirectory ?? URL(fileURLWithPath: FileManager.default.currentDirectoryPath, isDirectory: true)
            url = base.appendingPathComponent(path)
        }
        let data: Data
        do {
            data = try readFile(url)
        } catch {
            throw node.error(
                .unreadableFile,
                problem: "The StoreKit configuration \"\(path)\" could not be read at \(url.path): \(error.problem)",
                remedy: "Give a path relative to the catalog file's directory, or an absolute path, to an existing .storekit file."
            )
        }
        let imported = try importStoreKitConfiguration(data, source: url.path)
        return imported.products.map { product in
            let origin = "\(node.keyPath) (\(path), product \"\(product.identifier)\")"
            return ProductEntry(product: product, keyPaths: ProductKeyPaths(
                identifier: origin, displayPrice: origin, subscriptionGroup: origin,
                subscriptionPeriod: origin, hostedContent: [], introductoryOffer: origin
            ))
        }
    }

    private static func nativeEntry(_ node: JSONNode, version: Int64) throws(CatalogError) -> ProductEntry {
        _ = try node.object()
        let identifier = try node.requiredString(
            "identifier", remedy: "Give every product the \"identifier\" the app requests, e.g. \"com.example.coins\"."
        )
        let kinds = ProductKind.allCases.map { "\"\($0.rawValue)\"" }.joined(separator: ", ")
        let kindNode = try node.requiredChild("kind", remedy: "Give product \"\(identifier)\" a \"kind\": one of \(kinds).")
        let kindName = try kindNode.string()
        guard let kind = ProductKind(rawValue: kindName) else {
            throw kindNode.error(
                .invalidValue,
                problem: "Unknown kind \"\(kindName)\" for product \"\(identifier)\"; expected one of \(kinds).",
                remedy: "Use one of the listed kinds."
            )
        }
        let price = try node.requiredChild(
            "displayPrice", remedy: "Give product \"\(identifier)\" a \"displayPrice\" as a string, e.g. \"0.99\"."
        ).string()
        var offer: IntroductoryOffer?
        if let offerNode = try node.child("introductoryOffer") {
            offer = try nativeIntroductoryOffer(offerNode)
        }
        var promotionalOffers: [PromotionalOffer] = []
        let promotionalNodes = try node.optionalArray("promotionalOffers")
        // An older sksim would read such a catalog without them, so only version 3 may have them.
        if !promotionalNodes.isEmpty && version < nativeFormatVersionWithPromotionalOffers {
            throw node.error(.invalidValue, at: node.keyPath(appending: "promotionalOffers"),
                             problem: "Product \"\(identifier)\" lists promotionalOffers, which native catalog version \(version) does not have.",
                             remedy: "Set \"version\" to \(nativeFormatVersionWithPromotionalOffers).")
        }
        for offerNode in promotionalNodes {
            _ = try offerNode.object()
            promotionalOffers.append(PromotionalOffer(
                identifier: try offerNode.requiredString("identifier", remedy: "Give the offer the \"identifier\" apps put in SKPaymentDiscount.identifier."),
                referenceName: try offerNode.optionalString("referenceName"),
                terms: try nativeIntroductoryOffer(offerNode)))
        }
        var contentPaths: [String] = []
        var content: [HostedContent] = []
        for contentNode in try node.optionalArray("hostedContent") {
            content.append(try hostedContent(contentNode))
            contentPaths.append(contentNode.keyPath)
        }
        let product = Product(
            identifier: identifier,
            kind: kind,
            referenceName: try node.optionalString("referenceName"),
            displayPrice: price,
            subscriptionGroup: try node.optionalString("subscriptionGroup"),
            subscriptionPeriod: try node.optionalString("subscriptionPeriod"),
            hostedContent: content,
            subscriptionLevel: (try node.child("subscriptionLevel")?.integer()).map { Int(clamping: $0) },
            introductoryOffer: offer,
            promotionalOffers: promotionalOffers
        )
        var keyPaths = ProductKeyPaths.native(base: node.keyPath, product: product)
        keyPaths.hostedContent = contentPaths
        return ProductEntry(product: product, keyPaths: keyPaths)
    }

    /// `introductoryOffer`, and a promotional offer's terms: the names `IntroductoryOffer` encodes
    /// (F-O1, F-O4); `Catalog` validates the values.
    private static func nativeIntroductoryOffer(_ node: JSONNode) throws(CatalogError) -> IntroductoryOffer {
        _ = try node.object()
        let modes = IntroductoryOffer.PaymentMode.allCases.map { "\"\($0.rawValue)\"" }.joined(separator: ", ")
        let modeNode = try node.requiredChild("paymentMode", remedy: "Give the offer a \"paymentMode\": one of \(modes).")
        let modeName = try modeNode.string()
        guard let mode = IntroductoryOffer.PaymentMode(rawValue: modeName) else {
            throw modeNode.error(.invalidValue, problem: "Unknown payment mode \"\(modeName)\"; expected one of \(modes).",
                                 remedy: "Use one of the listed payment modes.")
        }
        return IntroductoryOffer(
            paymentMode: mode,
            subscriptionPeriod: try node.requiredString("subscriptionPeriod", remedy: "Give the offer's period as an ISO 8601 duration, e.g. \"P1W\"."),
            numberOfPeriods: Int(clamping: try node.child("numberOfPeriods")?.integer() ?? 1),
            displayPrice: try node.optionalString("displayPrice") ?? "0",
            internalID: try node.optionalString("internalID"))
    }

    private static func hostedContent(_ node: JSONNode) throws(CatalogError) -> HostedContent {
        _ = try node.object()
        return HostedContent(
            contentIdentifier: try node.requiredString(
                "contentIdentifier", remedy: "Give each piece of hosted content a unique \"contentIdentifier\"."
            ),
            contentLength: try node.requiredChild(
                "contentLength", remedy: "Give the size of the download in bytes as \"contentLength\"."
            ).integer(),
            contentVersion: try node.requiredChild(
                "contentVersion", remedy: "Give the content version as \"contentVersion\", e.g. \"1.0\"."
            ).string()
        )
    }

    /// Applies the `"hostedContent": {"productID": [...]}` map, in identifier order so errors are deterministic.
    private static func attachHostedContent(_ node: JSONNode, to entries: inout [ProductEntry]) throws(CatalogError) {
        let members = try node.object()
        for identifier in members.keys.sorted() {
            let listNode = node.child(quoted: identifier, value: members[identifier] ?? .null)
            guard let position = entries.firstIndex(where: { $0.product.identifier == identifier }) else {
                throw listNode.error(
                    .unknownProduct,
                    problem: "Hosted content is given for product \"\(identifier)\", but the catalog has no such product.",
                    remedy: "Check the spelling of the product identifier, or add the product to the StoreKit configuration or \"products\"."
                )
            }
            for contentNode in try listNode.array() {
                entries[position].product.hostedContent.append(try hostedContent(contentNode))
                entries[position].keyPaths.hostedContent.append(contentNode.keyPath)
            }
        }
    }

    /// The `testSettings` member (the names `StoreKitTestSettings` encodes), read through Codable.
    private static func nativeTestSettings(_ node: JSONNode) throws(CatalogError) -> StoreKitTestSettings {
        func foundation(_ value: JSONValue) -> Any {
            switch value {
            case .null: NSNull()
            case .bool(let flag): flag
            case .integer(let number): number
            case .number(let number): number
            case .string(let text): text
            case .array(let items): items.map(foundation)
            case .object(let members): members.mapValues(foundation)
            }
        }
        _ = try node.object()
        let settings: StoreKitTestSettings
        do {
            let data = try JSONSerialization.data(withJSONObject: foundation(node.value))
            settings = try JSONDecoder().decode(StoreKitTestSettings.self, from: data)
        } catch {
            throw node.error(.wrongShape, problem: "The test settings cannot be read (\(error)).",
                             remedy: "Write testSettings as docs/storekit-fidelity.md shows, e.g. {\"askToBuyEnabled\": true}.")
        }
        // As in a .storekit file (F-S3): a rate SKTestSession lacks would leave subscriptions never renewing.
        if let rate = settings.timeRate, !StoreKitTestSettings.isTimeRate(rate) {
            throw node.error(.invalidValue, at: node.keyPath(appending: "timeRate"),
                             problem: "timeRate \(rate) is not an SKTestSession.TimeRate value.",
                             remedy: "Use 0 (real time), 1 to 6, 10 to 13, 15, or 1000 to 1005 (one renewal every 15 minutes to every 2 seconds).")
        }
        return settings
    }
}
