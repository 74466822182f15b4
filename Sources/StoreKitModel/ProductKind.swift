/// The four kinds of in-app purchase the App Store sells.
public enum ProductKind: String, Sendable, Hashable, Codable, CaseIterable {
    case consumable
    case nonConsumable
    case nonRenewingSubscription
    case autoRenewableSubscription

    /// Whether `restoreCompletedTransactions` brings purchases of this kind back.
    ///
    /// Consumables cannot be restored (R-Q9): once finished, the store forgets them.
    /// Non-renewing subscriptions are not restored either: the app restores them itself
    /// (seed 003, F-R1). Non-consumables and auto-renewable subscriptions are.
    public var isRestorable: Bool {
        self == .nonConsumable || self == .autoRenewableSubscription
    }
}
