import ArgumentParser
import Foundation
import StoreKitModel

/// `sksim catalog show FILE [--json]`: what the simulated store sells from a catalog file, and
/// the `.storekit` test settings it will honour.
struct CatalogCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "catalog",
        abstract: "List a product catalog (an Xcode .storekit file or an sksim catalog) as the simulated store reads it.",
        subcommands: [Show.self])

    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Every product with its kind, restorability, price, period, group and hosted content, and the file's test settings.",
            discussion: "Exit status 0 when the file reads, 2 with the first problem (file, key path, what to do) otherwise. See docs/storekit-fidelity.md.")
        @Argument(help: "The catalog file: an Xcode .storekit file (format 1.0 to 6.x) or an sksim catalog; `sample` for the built-in one.") var file: String
        @Flag(help: "Print one JSON object instead of the table.") var json = false

        func run() async throws {
            let (catalog, source) = try loadCatalog(file)
            if json {
                printLine(CatalogListing.json(catalog, source: source).serialized())
            } else {
                printLine(CatalogListing.text(catalog, source: source))
            }
        }
    }
}

/// The shapes `catalog show` prints (documented in docs/storekit-fidelity.md).
enum CatalogListing {
    static func json(_ catalog: Catalog, source: String) -> JSONValue {
        let products: [JSONValue] = catalog.products.map { product in
            // `promotionalOffers` only for a product that has some (F-O4), so other listings keep their bytes.
            let promotional: [(String, JSONValue)] = product.promotionalOffers.map { offers in
                [("promotionalOffers", .array(offers.map(promotionalOffer)))]
            } ?? []
            return .object([
                ("productIdentifier", .string(product.identifier)), ("kind", .string(product.kind.rawValue)),
                ("restorable", .bool(product.isRestorable)), ("displayPrice", .string(product.displayPrice)),
                ("referenceName", .string(product.referenceName)),
                ("subscriptionPeriod", .optional(product.subscriptionPeriod)), ("subscriptionGroup", .optional(product.subscriptionGroup)),
                ("hostedContent", JSONShapes.contents(product.hostedContent)),
                ("introductoryOffer", product.introductoryOffer.map(offer) ?? .null),
            ] + promotional)
        }
        return .object([("source", .string(source)), ("products", .array(products)), ("settings", settings(catalog.testSettings))])
    }

    /// An introductory offer (F-O1), in the names a `.storekit` file uses.
    static func offer(_ offer: IntroductoryOffer) -> JSONValue {
        .object([
            ("paymentMode", .string(offer.paymentMode.rawValue)), ("subscriptionPeriod", .string(offer.subscriptionPeriod)),
            ("numberOfPeriods", .int(offer.numberOfPeriods)), ("displayPrice", .string(offer.displayPrice)),
            ("internalID", .optional(offer.internalID)),
        ])
    }

    /// A promotional offer (F-O4): its identifier and reference name, then its terms as `offer` gives them.
    static func promotionalOffer(_ offer: PromotionalOffer) -> JSONValue {
        guard case .object(let terms) = Self.offer(offer.terms) else { preconditionFailure("an offer is a JSON object") }
        return .object([("offerID", .string(offer.identifier)), ("referenceName", .optional(offer.referenceName))] + terms)
    }

    static func settings(_ settings: StoreKitTestSettings) -> JSONValue {
        func flag(_ value: Bool?) -> JSONValue { value.map(JSONValue.bool) ?? .null }
        let errors: JSONValue = settings.storeKitErrors.map { entries in
            .array(entries.map { .object([("name", .string($0.name)), ("enabled", .bool($0.enabled)), ("current", .optional($0.current))]) })
        } ?? .null
        return .object([
            ("askToBuyEnabled", flag(settings.askToBuyEnabled)), ("failTransactionsEnabled", flag(settings.failTransactionsEnabled)),
            ("storeKitErrors", errors),
            ("timeRate", settings.timeRate.map { .int($0) } ?? .null),
            ("timeRateName", settings.timeRate.map { .string(StoreKitTestSettings.timeRateName($0)) } ?? .null),
            ("storefront", .optional(settings.storefront)), ("locale", .optional(settings.locale)),
            ("billingIssuesEnabled", flag(settings.billingIssuesEnabled)),
            ("renewalBillingIssuesEnabled", flag(settings.renewalBillingIssuesEnabled)),
            ("billingGracePeriodEnabled", flag(settings.billingGracePeriodEnabled)),
            ("disableDialogs", flag(settings.disableDialogs)), ("interruptedPurchasesEnabled", flag(settings.interruptedPurchasesEnabled)),
            ("purchaseFailure", settings.purchaseFailure.map(JSONShapes.error) ?? .null),
        ])
    }

    static func text(_ catalog: Catalog, source: String) -> String {
        let rows = catalog.products.map { product in
            [product.identifier, product.kind.rawValue, product.isRestorable ? "yes" : "no", product.displayPrice,
             product.subscriptionPeriod ?? "-", product.subscriptionGroup ?? "-",
             product.hostedContent.isEmpty ? "-" : product.hostedContent.map(\.description).joined(separator: "; ")]
        }
        let header = ["product", "kind", "restorable", "price", "period", "group", "hosted content"]
        let widths = header.indices.map { column in ([header] + rows).map { $0[column].count }.max() ?? 0 }
        func line(_ cells: [String]) -> String {
            cells.enumerated().map { index, cell in
                index == cells.count - 1 ? cell : cell.padding(toLength: widths[index], withPad: " ", startingAt: 0)
            }.joined(separator: "  ")
        }
        var lines = ["\(source): \(catalog.products.count) products"] + [line(header)] + rows.map(line)
        // Listed below the table, so catalogs without offers print as before (F-O1).
        let offered = catalog.products.compactMap { product in product.introductoryOffer.map { (product, $0) } }
        if !offered.isEmpty {
            let width = offered.map(\.0.identifier.count).max() ?? 0
            lines.append("introductory offers (for accounts new to the subscription group)")
            lines += offered.map { product, offer in
                "  " + product.identifier.padding(toLength: width, withPad: " ", startingAt: 0)
                    + "  \(offer.summary), then \(product.displayPrice) per \(product.subscriptionPeriod ?? "-")"
            }
        }
        let promoted = catalog.products.compactMap { product in product.promotionalOffers.map { (product, $0) } }
        if !promoted.isEmpty {
            let width = promoted.map(\.0.identifier.count).max() ?? 0
            lines.append("promotional offers (for accounts that have subscribed in the group, with a signed discount)")
            for (product, offers) in promoted {
                lines += offers.map { "  " + product.identifier.padding(toLength: width, withPad: " ", startingAt: 0) + "  \($0.summary)" }
            }
        }
        let settings = catalog.testSettings
        lines.append("settings")
        if settings.isEmpty {
            lines.append("  none (the store behaves as the scenario says)")
        } else {
            func describe(_ value: Bool?) -> String { value.map { $0 ? "on" : "off" } ?? "not set" }
            lines += [
                "  askToBuyEnabled              \(describe(settings.askToBuyEnabled))",
                "  failTransactionsEnabled      \(describe(settings.failTransactionsEnabled))",
                "  storeKitErrors               " + (settings.storeKitErrors.map { entries in
                    let enabled = entries.filter(\.enabled).map { "\($0.name) (\($0.current ?? "default"))" }
                    return enabled.isEmpty ? "\(entries.count) listed, none enabled" : "enabled: " + enabled.joined(separator: ", ")
                } ?? "not set"),
                "  timeRate                     " + (settings.timeRate.map { "\($0) (\(StoreKitTestSettings.timeRateName($0)))" } ?? "not set"),
                "  storefront                   \(settings.storefront ?? "not set")",
                "  locale                       \(settings.locale ?? "not set")",
                "  billingIssuesEnabled         \(describe(settings.billingIssuesEnabled))",
                "  renewalBillingIssuesEnabled  \(describe(settings.renewalBillingIssuesEnabled))",
                "  billingGracePeriodEnabled    \(describe(settings.billingGracePeriodEnabled))",
                "  disableDialogs               \(describe(settings.disableDialogs))",
                "  interruptedPurchasesEnabled  \(describe(settings.interruptedPurchasesEnabled))",
                "  purchases                    " + (settings.purchaseFailure.map { "fail with \($0.code) (SKError \($0.code.rawValue))" }
                    ?? (settings.askToBuyEnabled == true ? "deferred for Ask to Buy" : "decided as the scenario says")),
            ]
        }
        return lines.joined(separator: "\n")
    }
}
