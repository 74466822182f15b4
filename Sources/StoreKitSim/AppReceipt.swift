import AppStoreSigning
import Foundation
import StoreKitModel
import StoreKitRoles

extension Bundle {
    /// The app receipt of the simulated device whose app code is running, as on iOS: a file the
    /// app reads with `Data(contentsOf:)`. Declared here, in a module that re-exports Foundation,
    /// this shadows Foundation's `appStoreReceiptURL` (nil on Linux) in every file that imports
    /// StoreKitSim. Outside a simulated device's code it is Foundation's.
    public var appStoreReceiptURL: URL? {
        // Foundation on Linux has no receipt for any bundle.
        guard self === Bundle.main, let device = SimulatedDevice.current else { return nil }
        return device.storage.writtenReceiptURL(queue: device.queue)
    }
}

/// A device's app receipt as Apple's: PKCS #7 (CMS SignedData, DER) with Apple's receipt fields,
/// made by the App Store server's own receipt code (`AppReceipt`, module AppStoreSigning: the same as
/// `sksim log receipt` and what `/verifyReceipt` reads), so the app and its server read what they
/// would on iOS (docs/explore.md, "The receipt").
public enum SimulatedReceipt {
    /// The chain and bundle id receipts are signed for: a chain of this process's own until
    /// `useCertificates` names a folder (`--certificates`, whose `root.cer` a team's server trusts).
    private final class Signing: @unchecked Sendable {
        let lock = NSLock()
        var chain: SigningChain?
        var bundleIdentifier = AppStoreSettings.defaultBundleIdentifier
    }
    private static let signing = Signing()

    /// Signs receipts with the chain in `directory` (made there when it holds none, as `sksim
    /// app-store-server --certificates` makes it) for `bundleIdentifier`.
    public static func useCertificates(in directory: URL, bundleIdentifier: String = AppStoreSettings.defaultBundleIdentifier) throws {
        let chain = try SigningChain.loadOrCreate(directory: directory)
        signing.lock.withLock {
            signing.chain = chain
            signing.bundleIdentifier = bundleIdentifier
        }
    }

    /// The chain receipts are signed with now, made once per process when none was given.
    static func chain() throws -> (SigningChain, String) {
        try signing.lock.withLock {
            if let chain = signing.chain { return (chain, signing.bundleIdentifier) }
            let chain = try SigningChain.generate().chain
            signing.chain = chain
            return (chain, signing.bundleIdentifier)
        }
    }

    /// The receipt file's bytes for a device's `entries` (in the order the device learned of them),
    /// the one place a device's receipt is made. `originals` names the purchase a restored or renewed
    /// entry stands for (its `original_transaction_id`); dates are `startDate` plus the log's time.
    public static func encode(_ entries: [OriginalTransaction], originals: [String: String] = [:], catalog: Catalog?,
                              startDate: Date) throws -> Data {
        let start = Scenario.dateMilliseconds(logTime: 0, start: startDate)
        let inApp = entries.map { entry in
            let isSubscription = catalog?.product(entry.payment.productIdentifier)?.kind == .autoRenewableSubscription
            let date = start &+ entry.transactionDate / 1_000_000
            return AppReceipt.Entry(
                quantity: entry.payment.quantity, productIdentifier: entry.payment.productIdentifier,
                transactionId: AppStoreIdentifier.transactionIdentifier(entry.transactionIdentifier),
                originalTransactionId: AppStoreIdentifier.transactionIdentifier(originals[entry.transactionIdentifier] ?? entry.transactionIdentifier),
                purchaseDate: date, originalPurchaseDate: date, expiresDate: nil, cancellationDate: nil,
                webOrderLineItemId: isSubscription ? AppStoreIdentifier.webOrderLineItemIdentifier(entry.transactionIdentifier) : nil,
                isTrialPeriod: entry.isTrialPeriod, isInIntroductoryOfferPeriod: entry.isInIntroductoryOfferPeriod,
                promotionalOfferIdentifier: entry.promotionalOfferIdentifier)
        }
        let (chain, bundleIdentifier) = try chain()
        return Data(try AppReceipt.signed(entries: inApp, bundleIdentifier: bundleIdentifier, chain: chain, now: Date()))
    }

    /// What a receipt holds, as `/verifyReceipt` answers it (`bundle_id`, `receipt_creation_date`,
    /// `in_app` with Apple's JSON names), read without checking its signature; nil when the bytes are
    /// no receipt. For a simulated server that reads what the app sent.
    public static func contents(_ receipt: Data) -> [String: Any]? {
        guard let payload = try? AppReceipt.content(ofSignedData: Array(receipt)) else { return nil }
        return try? AppReceipt.fields(ofPayload: payload)
    }

    /// True when the receipt is signed by the chain devices sign with (what a server checks first).
    public static func isSigned(_ receipt: Data) async -> Bool {
        guard let (chain, _) = try? chain() else { return false }
        return await AppReceipt.verifiedPayload(Array(receipt), chain: chain) != nil
    }
}

extension DeviceStorage {
    /// Writes the receipt file (`SimulatedReceipt`) if it changed since last written; nil when it cannot be written.
    func writtenReceiptURL(queue: PaymentQueue) -> URL? {
        if receiptWritten { return receiptURL }
        do {
            madeFolder = true
            try FileManager.default.createDirectory(at: receiptURL.deletingLastPathComponent(), withIntermediateDirectories: true)
            try SimulatedReceipt.encode(receiptEntries, originals: originalIdentifiers, catalog: queue.catalog, startDate: queue.startDate)
                .write(to: receiptURL, options: .atomic)
            receiptWritten = true
            return receiptURL
        } catch {
            return nil
        }
    }
}
