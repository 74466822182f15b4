extension Catalog {
    /// The built-in catalog used when the user gives none.
    ///
    /// Covers every product kind: three consumables, three non-consumables (two with hosted
    /// content between 24 KB and 320 KB, small enough that simulated downloads write real files
    /// quickly), one non-renewing subscription and two auto-renewable subscriptions in one group.
    public static let sample: Catalog = {
        let products = [
            Product(identifier: "com.example.sksim.coins.small", kind: .consumable,
                    referenceName: "100 Coins", displayPrice: "0.99"),
            Product(identifier: "com.example.sksim.coins.large", kind: .consumable,
                    referenceName: "1000 Coins", displayPrice: "7.99"),
            Product(identifier: "com.example.sksim.hints", kind: .consumable,
                    referenceName: "5 Hints", displayPrice: "1.99"),
            Product(identifier: "com.example.sksim.removeads", kind: .nonConsumable,
                    referenceName: "Remove Ads", displayPrice: "2.99"),
            Product(identifier: "com.example.sksim.levelpack.forest", kind: .nonConsumable,
                    referenceName: "Forest Level Pack", displayPrice: "1.99",
                    hostedContent: [
                        HostedContent(contentIdentifier: "com.example.sksim.levelpack.forest.levels",
                                      contentLength: 24_576, contentVersion: "1.0"),
                    ]),
            Product(identifier: "com.example.sksim.levelpack.desert", kind: .nonConsumable,
                    referenceName: "Desert Level Pack", displayPrice: "3.99",
                    hostedContent: [
                        HostedContent(contentIdentifier: "com.example.sksim.levelpack.desert.levels",
                                      contentLength: 65_536, contentVersion: "1.2"),
                        HostedContent(contentIdentifier: "com.example.sksim.levelpack.desert.music",
                                      contentLength: 327_680, contentVersion: "1.0.3"),
                    ]),
            Product(identifier: "com.example.sksim.seasonpass", kind: .nonRenewingSubscription,
                    referenceName: "Season Pass", displayPrice: "4.99"),
            Product(identifier: "com.example.sksim.premium.monthly", kind: .autoRenewableSubscription,
                    referenceName: "Premium Monthly", displayPrice: "2.99",
                    subscriptionGroup: "Premium", subscriptionPeriod: "P1M"),
            Product(identifier: "com.example.sksim.premium.yearly", kind: .autoRenewableSubscription,
                    referenceName: "Premium Yearly", displayPrice: "24.99",
                    subscriptionGroup: "Premium", subscriptionPeriod: "P1Y"),
        ]
        do {
            return try Catalog(products: products)
        } catch {
            // The list above is fixed; the test suite proves it valid.
            preconditionFailure("The built-in sample catalog is invalid: \(error)")
        }
    }()
}
