import AppStoreServer
import Foundation
import StoreKitLive
import StoreKitLoad
import StoreKitModel

/// The evidence a load's app sends `--backend`: the App Store's signed transaction and the device's
/// app receipt, signed with the run's chain (`--certificates`) from the run's log, as the App Store
/// server role makes them (docs/app-store-server.md).
enum SignedPurchaseEvidence {
    struct Missing: Error, CustomStringConvertible {
        var description: String
    }

    /// A producer reading the log at `logDirectory`. A transaction reaches the driver only after its
    /// record is durable in the log, so a transaction the ledger has not read yet is found by reading
    /// the log's new records then. The chain is loaded (or made) at the first purchase, so a load
    /// without `--backend` leaves no certificates behind.
    static func producer(logDirectory: URL, certificates: URL, settings: AppStoreSettings) -> PurchaseEvidence.Producer {
        let signer = Signer(certificates: certificates, settings: settings)
        let follower = LedgerFollower(logDirectory: logDirectory)
        return { request in
            let documents = try await signer.documents()
            let transactionId = AppStoreIdentifier.transactionIdentifier(request.logIdentifier)
            var ledger = await follower.current
            if ledger.transaction(id: transactionId) == nil {
                ledger = try await follower.refresh()
            }
            // A restored transaction or an uncharged re-purchase stands for the purchase it restores:
            // Apple signs that one, and the POST names the identifiers it carries.
            guard let transaction = ledger.transaction(id: transactionId) else {
                throw Missing(description: "the log at \(logDirectory.path) has no charged purchase for transaction \(request.logIdentifier)")
            }
            let signed = try await documents.signedTransaction(transaction, in: ledger)
            guard let receipt = try documents.appReceipt(device: request.device, in: ledger) else {
                throw Missing(description: "the log at \(logDirectory.path) has no device \(request.device)")
            }
            return PurchaseEvidence(transactionId: transaction.transactionId, originalTransactionId: transaction.originalTransactionId,
                                    signedTransaction: signed, appReceipt: Data(receipt).base64EncodedString())
        }
    }

    /// The run's documents, made once.
    actor Signer {
        let certificates: URL
        let settings: AppStoreSettings
        private var made: AppStoreDocuments?

        init(certificates: URL, settings: AppStoreSettings) {
            self.certificates = certificates
            self.settings = settings
        }

        func documents() async throws -> AppStoreDocuments {
            if let made { return made }
            let documents = try await AppStoreDocuments(chain: try SigningChain.loadOrCreate(directory: certificates), settings: settings)
            made = documents
            return documents
        }
    }
}
