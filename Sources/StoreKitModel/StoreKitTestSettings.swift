import Foundation

/// The test settings of an Xcode `.storekit` file (its `settings` object, Xcode's Editor menu),
/// which Xcode's test environment and `SKTestSession` honour. nil means "not in the file".
public struct StoreKitTestSettings: Sendable, Hashable, Codable {
    /// `_askToBuyEnabled`: every purchase waits for a parent's approval (deferred, F-S1).
    public var askToBuyEnabled: Bool?
    /// `_failTransactionsEnabled`: every purchase fails (F-S2), with `failureError`.
    public var failTransactionsEnabled: Bool?
    /// `_storeKitErrors` (format 3.0 on): errors injected per API; only the "Purchase" entry
    /// concerns the payment queue (F-S2).
    public var storeKitErrors: [InjectedError]?
    /// `_timeRate`: how fast subscription time runs (`SKTestSession.TimeRate`'s raw value, F-S3).
    public var timeRate: Int?
    /// `_storefront`: ISO 3166-1 alpha-3 country code, e.g. "USA".
    public var storefront: String?
    /// `_locale`, e.g. "en_US".
    public var locale: String?
    /// `_billingIssuesEnabled`, `_renewalBillingIssuesEnabled`, `_billingGracePeriodEnabled`:
    /// renewals that fail to bill (F-S4).
    public var billingIssuesEnabled: Bool?
    public var renewalBillingIssuesEnabled: Bool?
    public var billingGracePeriodEnabled: Bool?
    /// `_disableDialogs`: no purchase sheets (the simulator shows none anyway).
    public var disableDialogs: Bool?
    /// `_interruptedPurchasesEnabled` (SKTestSession's interruptedPurchasesEnabled).
    public var interruptedPurchasesEnabled: Bool?

    /// One entry of `_storeKitErrors`: the API it applies to, whether it is on, and the error chosen.
    public struct InjectedError: Sendable, Hashable, Codable {
        public var name: String
        public var enabled: Bool
        /// The error Xcode's menu chose (`current`), as the file writes it; nil when none.
        public var current: String?

        public init(name: String, enabled: Bool, current: String?) {
            self.name = name
            self.enabled = enabled
            self.current = current
        }
    }

    public init() {}

    /// True when the file set nothing.
    public var isEmpty: Bool { self == StoreKitTestSettings() }

    /// The error every purchase fails with, when the settings fail purchases (F-S2): Xcode's
    /// "Fail Transactions" (SKTestSession's `failureError`, default SKError.unknown) or an enabled
    /// "Purchase" entry of `_storeKitErrors` (a StoreKit 2 error, which StoreKit 1 reports as unknown).
    public var purchaseFailure: StoreError? {
        if failTransactionsEnabled == true {
            return StoreError(.unknown, "the .storekit file fails every transaction (_failTransactionsEnabled)")
        }
        if let injected = storeKitErrors?.first(where: { $0.enabled && $0.name == "Purchase" }) {
            return StoreError(.unknown, "the .storekit file injects an error into purchases (_storeKitErrors Purchase: \(injected.current ?? "default"))")
        }
        return nil
    }

    /// Simulated seconds per second of the test clock for `timeRate` (`SKTestSession.TimeRate`):
    /// 0 real time; 1…6 one day in an hour, 30, 5 or 1 minutes, 30 or 1 seconds; 10…15 a monthly
    /// renewal every hour, 30, 15 or 5 minutes, or 30 seconds (a month taken as 30 days). nil for
    /// a value SKTestTimeRate does not have.
    public static func speedFactor(timeRate: Int) -> Double? {
        let day = 86_400.0
        let month = 30 * day
        return switch timeRate {
        case 0: 1
        case 1: day / 3_600
        case 2: day / 1_800
        case 3: day / 300
        case 4: day / 60
        case 5: day / 30
        case 6: day
        case 10: month / 3_600
        case 11: month / 1_800
        case 12: month / 900
        case 13: month / 300
        case 15: month / 30
        default: nil
        }
    }

    /// Seconds between renewals at the fixed rates (`SKTestTimeRateOneRenewalEvery…`, raw values
    /// 1000 to 1005 in `SKTestSession.h`, iOS 16.4 and Xcode 14.3 on): every subscription renews this
    /// often whatever its period. nil for the other rates.
    public static func fixedRenewalSeconds(timeRate: Int) -> Double? {
        switch timeRate {
        case 1000: 900
        case 1001: 300
        case 1002: 60
        case 1003: 30
        case 1004: 10
        case 1005: 2
        default: nil
        }
    }

    /// Whether `timeRate` is one of `SKTestSession.TimeRate`'s raw values (a scaled or a fixed rate).
    public static func isTimeRate(_ timeRate: Int) -> Bool {
        speedFactor(timeRate: timeRate) != nil || fixedRenewalSeconds(timeRate: timeRate) != nil
    }

    /// `SKTestSession.TimeRate`'s case name for a raw value, for listings.
    public static func timeRateName(_ timeRate: Int) -> String {
        switch timeRate {
        case 0: "realTime"
        case 1: "oneHourIsOneDay"
        case 2: "thirtyMinutesIsOneDay"
        case 3: "fiveMinutesIsOneDay"
        case 4: "oneMinuteIsOneDay"
        case 5: "thirtySecondsIsOneDay"
        case 6: "oneSecondIsOneDay"
        case 10: "monthlyRenewalEveryHour"
        case 11: "monthlyRenewalEveryThirtyMinutes"
        case 12: "monthlyRenewalEveryFifteenMinutes"
        case 13: "monthlyRenewalEveryFiveMinutes"
        case 15: "monthlyRenewalEveryThirtySeconds"
        case 1000: "oneRenewalEveryFifteenMinutes"
        case 1001: "oneRenewalEveryFiveMinutes"
        case 1002: "oneRenewalEveryMinute"
        case 1003: "oneRenewalEveryThirtySeconds"
        case 1004: "oneRenewalEveryTenSeconds"
        case 1005: "oneRenewalEveryTwoSeconds"
        default: "unknown(\(timeRate))"
        }
    }
}

extension Catalog {
    /// Reads a `.storekit` file's `settings` object; unknown keys are ignored, a known key of
    /// the wrong type is an error that names it.
    static func storeKitTestSettings(root: JSONNode) throws(CatalogError) -> StoreKitTestSettings {
        var settings = StoreKitTestSettings()
        guard let node = try root.child("settings") else { return settings }
        _ = try node.object()
        func flag(_ key: String) throws(CatalogError) -> Bool? {
            guard let child = try node.child(key) else { return nil }
            guard case .bool(let value) = child.value else {
                throw child.error(.wrongShape, problem: "Expected true or false, found \(child.value.summary).",
                                  remedy: "Write \(key) as true or false, or re-save the file in Xcode.")
            }
            return value
        }
        settings.askToBuyEnabled = try flag("_askToBuyEnabled")
        settings.failTransactionsEnabled = try flag("_failTransactionsEnabled")
        settings.billingIssuesEnabled = try flag("_billingIssuesEnabled")
        settings.renewalBillingIssuesEnabled = try flag("_renewalBillingIssuesEnabled")
        settings.billingGracePeriodEnabled = try flag("_billingGracePeriodEnabled")
        settings.disableDialogs = try flag("_disableDialogs")
        settings.interruptedPurchasesEnabled = try flag("_interruptedPurchasesEnabled")
        settings.storefront = try node.optionalString("_storefront")
        settings.locale = try node.optionalString("_locale")
        if let rateNode = try node.child("_timeRate") {
            let rate = try rateNode.integer()
            guard StoreKitTestSettings.isTimeRate(Int(clamping: rate)) else {
                throw rateNode.error(.invalidValue, problem: "_timeRate \(rate) is not an SKTestSession.TimeRate value.",
                                     remedy: "Use 0 (real time), 1 to 6, 10 to 13, 15, or 1000 to 1005 (one renewal every 15 minutes to every 2 seconds), or choose the renewal rate again in Xcode.")
            }
            settings.timeRate = Int(rate)
        }
        if let errorsNode = try node.child("_storeKitErrors") {
            settings.storeKitErrors = try errorsNode.array().map { entry throws(CatalogError) in
                _ = try entry.object()
                let enabledNode = try entry.child("enabled")
                var enabled = false
                if let enabledNode {
                    guard case .bool(let value) = enabledNode.value else {
                        throw enabledNode.error(.wrongShape, problem: "Expected true or false, found \(enabledNode.value.summary).",
                                                remedy: "Write enabled as true or false.")
                    }
                    enabled = value
                }
                return StoreKitTestSettings.InjectedError(name: try entry.optionalString("name") ?? "", enabled: enabled,
                                                          current: try entry.child("current").map { Self.compactText($0.value) })
            }
        }
        return settings
    }

    /// A JSON value as short text (`{"index":1,"type":"generic"}` style), for an injected error's choice.
    private static func compactText(_ value: JSONValue) -> String {
        switch value {
        case .null: "null"
        case .bool(let flag): String(flag)
        case .integer(let number): String(number)
        case .number(let number): String(number)
        case .string(let text): text
        case .array(let items): "[" + items.map(compactText).joined(separator: ",") + "]"
        case .object(let members): "{" + members.keys.sorted().map { "\($0):\(compactText(members[$0]!))" }.joined(separator: ",") + "}"
        }
    }
}
