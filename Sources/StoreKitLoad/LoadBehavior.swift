import Foundation
import StoreKitModel
import StoreKitRoles

/// One product the drivers buy, with its weight among the others and what the store's catalog
/// says of it that decides who may buy it.
public struct LoadProduct: Sendable, Codable, Equatable {
    public var identifier: String
    public var weight: Double
    public var kind: ProductKind
    /// An auto-renewable subscription's group: an account with one subscription of a group buys no other of it.
    public var subscriptionGroup: String?

    public init(identifier: String, weight: Double, kind: ProductKind, subscriptionGroup: String? = nil) {
        self.identifier = identifier
        self.weight = weight
        self.kind = kind
        self.subscriptionGroup = subscriptionGroup
    }

    /// What an account holds once it bought this product and may not buy again: a non-consumable
    /// by its identifier, an auto-renewable subscription by its group. nil: bought again and again.
    var ownershipKey: String? {
        switch kind {
        case .consumable, .nonRenewingSubscription: nil
        case .nonConsumable: identifier
        case .autoRenewableSubscription: "group:" + (subscriptionGroup ?? identifier)
        }
    }

    /// The products of `catalog` the drivers buy: those `weights` names, weighted (`--products
    /// ID=WEIGHT,…`), or every product equally when `weights` is empty.
    public static func choose(from catalog: Catalog, weights: [String: Double], source: String) throws(LoadSpecificationError) -> [LoadProduct] {
        if let unknown = weights.keys.sorted().first(where: { catalog.product($0) == nil }) {
            let known = catalog.products.map(\.identifier)
            throw LoadSpecificationError("--products names '\(unknown)', which \(source) does not sell; its products are \(known.prefix(20).joined(separator: ", "))\(known.count > 20 ? ", …" : "")")
        }
        let products = catalog.products.compactMap { product -> LoadProduct? in
            let weight = weights.isEmpty ? 1 : (weights[product.identifier] ?? 0)
            guard weight > 0 else { return nil }
            return LoadProduct(identifier: product.identifier, weight: weight, kind: product.kind, subscriptionGroup: product.subscriptionGroup)
        }
        guard !products.isEmpty else { throw LoadSpecificationError("\(source) has no product to buy; give a catalog with products, or weights above 0 in --products") }
        return products
    }

    /// `ID=WEIGHT,…` (a bare `ID` weighs 1).
    public static func parseWeights(_ text: String) throws(LoadSpecificationError) -> [String: Double] {
        var weights: [String: Double] = [:]
        for part in text.split(separator: ",").map({ $0.trimmingCharacters(in: .whitespaces) }) where !part.isEmpty {
            let pieces = part.split(separator: "=", maxSplits: 1).map(String.init)
            let weight = pieces.count == 2 ? Double(pieces[1]) : 1
            guard let weight, weight.isFinite, weight >= 0, !pieces[0].isEmpty else {
                throw LoadSpecificationError("--products: '\(part)' is not ID=WEIGHT with a weight of 0 or more, e.g. com.example.coins=3")
            }
            guard weights[pieces[0]] == nil else { throw LoadSpecificationError("--products names '\(pieces[0])' twice") }
            weights[pieces[0]] = weight
        }
        guard !weights.isEmpty else { throw LoadSpecificationError("--products is empty; write ID=WEIGHT,… e.g. com.example.coins=3,com.example.pro=1") }
        return weights
    }
}

/// The kinds of lifecycle a driver starts, each a user's action in an app.
public enum LifecycleKind: String, Sendable, Codable, CaseIterable {
    /// `addPayment` to `removedTransactions` (or the store's failure, or a declined Ask to Buy).
    case purchase
    /// `restoreCompletedTransactions` to every restored transaction finished.
    case restore
    /// `SKReceiptRefreshRequest` to `requestDidFinish` (the receipt's last piece).
    case receiptRefresh
    /// A refund of one of the device's earlier purchases, granted (`didRevokeEntitlements`).
    case refundRequest
    /// A purchase whose payment asks for a parent's approval (`simulatesAskToBuyInSandbox`): deferred,
    /// then approved (bought, finished and removed like a purchase) or declined (its end, F-A1).
    case askToBuy
}

/// How often each kind of lifecycle starts: weights, `purchase=90,restore=5,receiptRefresh=3,refundRequest=2`.
public struct LifecycleMix: Sendable, Codable, Equatable {
    public var weights: [LifecycleKind: Double]

    public init(weights: [LifecycleKind: Double]) { self.weights = weights }

    public static func parse(_ text: String) throws(LoadSpecificationError) -> LifecycleMix {
        var weights: [LifecycleKind: Double] = [:]
        for part in text.split(separator: ",").map({ $0.trimmingCharacters(in: .whitespaces) }) where !part.isEmpty {
            let pieces = part.split(separator: "=", maxSplits: 1).map(String.init)
            guard pieces.count == 2, let kind = LifecycleKind(rawValue: pieces[0]) else {
                throw LoadSpecificationError("--mix: '\(part)' is not KIND=WEIGHT; the kinds are \(LifecycleKind.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            guard let weight = Double(pieces[1]), weight.isFinite, weight >= 0 else {
                throw LoadSpecificationError("--mix: the weight of \(kind.rawValue) is '\(pieces[1])'; write a number of 0 or more")
            }
            weights[kind] = weight
        }
        guard weights.values.contains(where: { $0 > 0 }) else {
            throw LoadSpecificationError("--mix gives no lifecycle a weight above 0; write e.g. purchase=95,restore=5")
        }
        return LifecycleMix(weights: weights)
    }

    /// One kind, drawn by weight.
    func draw(_ choices: ChoiceSource) -> LifecycleKind {
        let total = LifecycleKind.allCases.reduce(0) { $0 + (weights[$1] ?? 0) }
        var point = choices.unit(.userRestore) * total
        for kind in LifecycleKind.allCases {
            let weight = weights[kind] ?? 0
            guard weight > 0 else { continue }
            if point < weight { return kind }
            point -= weight
        }
        return LifecycleKind.allCases.last { (weights[$0] ?? 0) > 0 } ?? .purchase
    }
}

extension Array where Element == LoadProduct {
    /// A product drawn by weight among those `allowed` admits; nil when it admits none.
    func draw(_ choices: ChoiceSource, allowed: (LoadProduct) -> Bool) -> LoadProduct? {
        let candidates = filter(allowed)
        let total = candidates.reduce(0) { $0 + $1.weight }
        guard total > 0 else { return nil }
        var point = choices.unit(.product) * total
        for product in candidates {
            if point < product.weight { return product }
            point -= product.weight
        }
        return candidates.last
    }
}
