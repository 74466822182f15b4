import Foundation
import StoreKitModel

extension Bundle {
    /// The app receipt of the simulated device whose app code is running, as on iOS: a file the
    /// app reads with `Data(contentsOf:)`. Declared here, in a module that re-exports Foundation,
    /// this shadows Foundation's `appStoreReceiptURL` (nil on Linux) in every file that imports
    /// StoreKitSim. Outside a simulated device's code it is Foundation's.
    public var appStoreReceiptURL: URL? {
        // Foundation on Linux has no receipt for any bundle.
        guard self === Bundle.main, let device = SimulatedDevice.current else { return nil }
        return device.storage.writtenReceiptURL()
    }
}

/// The bytes of a device's app receipt.
public enum AppReceipt {
    /// The receipt file's bytes for `entries`, the one place receipts are encoded: point it at the
    /// App Store's PKCS#7 encoder to give apps a receipt they validate as Apple's. Until then, a
    /// JSON object `{"in_app": [...]}` with Apple's field names for each entry.
    public static func encode(_ entries: [OriginalTransaction]) -> Data {
        let inApp: [[String: Any]] = entries.map { entry in
            var fields: [String: Any] = [
                "product_id": entry.payment.productIdentifier,
                "quantity": entry.payment.quantity,
                "transaction_id": entry.transactionIdentifier,
                "original_transaction_id": entry.transactionIdentifier,
                "purchase_date_ms": entry.transactionDate / 1_000_000,
                "is_trial_period": entry.isTrialPeriod,
                "is_in_intro_offer_period": entry.isInIntroductoryOfferPeriod,
            ]
            if let offer = entry.promotionalOfferIdentifier { fields["promotional_offer_id"] = offer }
            return fields
        }
        return (try? JSONSerialization.data(withJSONObject: ["in_app": inApp], options: [.sortedKeys])) ?? Data()
    }
}
