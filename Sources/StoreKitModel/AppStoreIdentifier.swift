/// The App Store's decimal identifiers of a log transaction (docs/log-format.md, "App Store
/// identifiers"): Apple's `transactionId` and `webOrderLineItemId` are decimal digit strings, while
/// the log names a transaction `device.number`. Each is derived from the log's identifier alone, so
/// every reader (the App Store server, `log cat`, the StoreKit API) finds the same one, and nothing
/// new enters the log.
public enum AppStoreIdentifier {
    /// Apple's `transactionId` of the log transaction `logIdentifier`: "2" and 18 digits of
    /// FNV-1a 64 over "transaction:" and the identifier (19 digits in all, as long as Apple's).
    public static func transactionIdentifier(_ logIdentifier: String) -> String {
        decimal(prefix: "transaction:", logIdentifier)
    }

    /// Apple's `webOrderLineItemId` of a subscription's purchase or renewal: the same, over "webOrderLineItem:".
    public static func webOrderLineItemIdentifier(_ logIdentifier: String) -> String {
        decimal(prefix: "webOrderLineItem:", logIdentifier)
    }

    private static func decimal(prefix: String, _ logIdentifier: String) -> String {
        let hash = fnv1a64(Array(prefix.utf8) + Array(logIdentifier.utf8))
        return String(2_000_000_000_000_000_000 as UInt64 + hash % 1_000_000_000_000_000_000)
    }
}
