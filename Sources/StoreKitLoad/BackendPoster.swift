import AsyncHTTPClient
import Foundation
import StoreKitLive
import StoreKitModel

/// What a load's app sends its team's server for one purchased or restored transaction before it
/// finishes it (`sksim load --backend URL`), as real apps send purchases to their servers. The JSON
/// names are fixed (docs/load-testing.md, "Your backend in the purchase path").
public struct BackendPurchase: Sendable, Codable, Equatable {
    public var transactionId: String
    public var originalTransactionId: String
    public var productId: String
    /// The App Store's signed transaction (a JWS) for this transaction.
    public var signedTransaction: String
    /// The app's receipt (base64) as it stands with this transaction in it.
    public var appReceipt: String
    public var device: String
    public var account: String
}

/// What the producer of a transaction's evidence is given: the transaction as the log names it.
public struct PurchaseEvidenceRequest: Sendable, Equatable {
    /// The log's identifier of the transaction that arrived (`device.number`).
    public var logIdentifier: String
    /// The log's identifier of its original purchase (itself for a purchase).
    public var originalLogIdentifier: String
    public var productId: String
    public var device: String
    public var account: String
    /// The event's log time (nanoseconds of the run), the transaction's date.
    public var transactionDateNanoseconds: Int64
    public var isRestored: Bool
}

/// The identifiers, signed transaction and app receipt a backend is sent.
public struct PurchaseEvidence: Sendable, Equatable {
    /// Apple's decimal identifiers, those the signed transaction carries.
    public var transactionId: String
    public var originalTransactionId: String
    public var signedTransaction: String
    /// The app's receipt, base64.
    public var appReceipt: String

    public init(transactionId: String, originalTransactionId: String, signedTransaction: String, appReceipt: String) {
        self.transactionId = transactionId
        self.originalTransactionId = originalTransactionId
        self.signedTransaction = signedTransaction
        self.appReceipt = appReceipt
    }

    /// Makes the evidence of one transaction, off the driver's thread; `LoadDriver.Configuration.evidence`
    /// holds the one in use (`sksim driver` sets the App Store server's signer, `SignedPurchaseEvidence`).
    /// A thrown error counts as a backend error of that transaction: nothing is POSTed.
    public typealias Producer = @Sendable (PurchaseEvidenceRequest) async throws -> PurchaseEvidence

    /// For a driver without the run's log at hand: the transaction's fields in a JWS of `alg: none`
    /// (header and payload base64url, no signature) and a receipt that is the same payload in base64.
    /// A backend that verifies signatures refuses these, as it should.
    public static let unsigned: Producer = { request in
        let transactionId = AppStoreIdentifier.transactionIdentifier(request.logIdentifier)
        let originalTransactionId = AppStoreIdentifier.transactionIdentifier(request.originalLogIdentifier)
        let payload: [String: Any] = [
            "transactionId": transactionId, "originalTransactionId": originalTransactionId,
            "productId": request.productId, "purchaseDate": request.transactionDateNanoseconds / 1_000_000,
            "type": request.isRestored ? "restored" : "purchased", "environment": "Xcode",
        ]
        let json = (try? JSONSerialization.data(withJSONObject: payload, options: [.sortedKeys])) ?? Data("{}".utf8)
        let header = base64URL(Data(#"{"alg":"none","typ":"JWT"}"#.utf8))
        return PurchaseEvidence(transactionId: transactionId, originalTransactionId: originalTransactionId,
                                signedTransaction: "\(header).\(base64URL(json)).", appReceipt: json.base64EncodedString())
    }

    static func base64URL(_ data: Data) -> String {
        data.base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }
}

/// POSTs to the backend through a `BoundedHTTPSender`, from the driver's one thread without blocking it.
final class BackendPoster: Sendable {
    struct Answer: Sendable {
        var token: Int
        /// The HTTP status, or nil when no answer came (refused, timed out).
        var status: Int?
        var failure: String?
        var monotonicNanoseconds: Int64
        var isSuccess: Bool { status.map { (200..<300).contains($0) } ?? false }
    }

    /// Requests in flight at most; the driver's lifecycles in flight are bounded anyway, this keeps the answers list bounded too.
    static let maximumOutstanding = 50_000

    private let sender: BoundedHTTPSender<Answer>
    private let url: String
    private let timeoutNanoseconds: Int64

    init(url: String, timeoutNanoseconds: Int64) {
        sender = BoundedHTTPSender(maximumOutstanding: Self.maximumOutstanding, timeoutNanoseconds: timeoutNanoseconds)
        self.url = url
        self.timeoutNanoseconds = timeoutNanoseconds
    }

    var outstanding: Int { sender.outstanding }

    /// Makes the transaction's evidence with `evidence`, then POSTs it; both off the calling thread.
    /// Beyond `maximumOutstanding` in flight the POST is not sent, and its answer is a failure.
    func post(token: Int, request evidenceRequest: PurchaseEvidenceRequest, evidence: @escaping PurchaseEvidence.Producer) {
        guard sender.admit() else {
            sender.refuse(Answer(token: token, status: nil, failure: "more than \(Self.maximumOutstanding) backend requests in flight",
                                 monotonicNanoseconds: LiveClock.monotonicNanoseconds()))
            return
        }
        Task { [self] in
            let body: BackendPurchase
            do {
                let made = try await evidence(evidenceRequest)
                body = BackendPurchase(transactionId: made.transactionId, originalTransactionId: made.originalTransactionId,
                                       productId: evidenceRequest.productId, signedTransaction: made.signedTransaction,
                                       appReceipt: made.appReceipt, device: evidenceRequest.device, account: evidenceRequest.account)
            } catch {
                sender.finish(Answer(token: token, status: nil, failure: "no evidence: \(error)", monotonicNanoseconds: LiveClock.monotonicNanoseconds()))
                return
            }
            post(token: token, body: body)
        }
    }

    private func post(token: Int, body: BackendPurchase) {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let json = String(decoding: (try? encoder.encode(body)) ?? Data("{}".utf8), as: UTF8.self)
        let request: HTTPClient.Request
        do {
            request = try HTTPClient.Request(url: url, method: .POST, headers: ["Content-Type": "application/json"], body: .string(json))
        } catch {
            sender.finish(Answer(token: token, status: nil, failure: "\(error)", monotonicNanoseconds: LiveClock.monotonicNanoseconds()))
            return
        }
        sender.execute(request, timeoutNanoseconds: timeoutNanoseconds) { result, now in
            switch result {
            case .success(let response): Answer(token: token, status: Int(response.status.code), failure: nil, monotonicNanoseconds: now)
            case .failure(let error): Answer(token: token, status: nil, failure: "\(error)", monotonicNanoseconds: now)
            }
        }
    }

    /// The answers that came since the last call.
    func take() -> [Answer] { sender.take() }

    func shutdown() { sender.shutdown() }

    /// Refuses a URL AsyncHTTPClient cannot POST to, before anything starts.
    static func check(_ url: String) throws(LoadSpecificationError) {
        guard let parsed = URL(string: url), let scheme = parsed.scheme?.lowercased(), ["http", "https"].contains(scheme), parsed.host != nil else {
            throw LoadSpecificationError("--backend '\(url)' is not an http:// or https:// URL with a host, e.g. http://127.0.0.1:8080/purchases")
        }
    }
}
