import AppStoreSigning
import Foundation
import Hummingbird
import JWTKit
import Logging
import NIOCore
import StoreKitModel

/// The App Store Server API and the legacy `/verifyReceipt`, over HTTP with Hummingbird, answering from
/// the run's log with Apple's paths, JSON and error bodies (docs/app-store-server.md).
public struct AppStoreHTTPServer: Sendable {
    public struct Configuration: Sendable {
        public var host: String
        public var port: Int
        public var settings: AppStoreSettings
        /// API keys by key id (`kid`), PEM (a public key, or the private key Apple hands out as a .p8):
        /// with none, any well-formed ES256 token for the bundle id is accepted.
        public var apiKeys: [String: String]
        /// Bounds of what a client may send: a request body, and a connection idle (a slow client).
        public var maximumBodyBytes: Int
        public var idleTimeoutSeconds: Int64
        /// Transactions per page of `/inApps/v2/history` (Apple's is 20).
        public var historyPageSize: Int

        public init(host: String, port: Int, settings: AppStoreSettings = AppStoreSettings(), apiKeys: [String: String] = [:],
                    maximumBodyBytes: Int = 1 << 20, idleTimeoutSeconds: Int64 = 30, historyPageSize: Int = 20) {
            self.host = host
            self.port = port
            self.settings = settings
            self.apiKeys = apiKeys
            self.maximumBodyBytes = maximumBodyBytes
            self.idleTimeoutSeconds = idleTimeoutSeconds
            self.historyPageSize = historyPageSize
        }
    }

    public let configuration: Configuration
    public let documents: AppStoreDocuments
    public let follower: LedgerFollower
    /// Sends `TEST` for `POST /inApps/v1/notifications/test`; nil when no notification URL is set.
    public let notifier: NotificationSender?
    private let keys: JWTKeyCollection?
    private let logger: Logger

    public init(configuration: Configuration, documents: AppStoreDocuments, follower: LedgerFollower, notifier: NotificationSender?,
                logger: Logger) async throws {
        self.configuration = configuration
        self.documents = documents
        self.follower = follower
        self.notifier = notifier
        self.logger = logger
        if configuration.apiKeys.isEmpty {
            keys = nil
        } else {
            let collection = JWTKeyCollection()
            for (kid, pem) in configuration.apiKeys.sorted(by: { $0.key < $1.key }) {
                let publicKey: ES256PublicKey
                do {
                    publicKey = try (try? ES256PrivateKey(pem: pem))?.publicKey ?? ES256PublicKey(pem: pem)
                } catch {
                    throw AppStoreServerError("API key \(kid) is not a P-256 key in PEM (a public key, or the private key of a .p8 file)", code: .invalidAPIKey)
                }
                await collection.add(ecdsa: publicKey, kid: JWKIdentifier(string: kid))
            }
            keys = collection
        }
    }

    /// Serves until the task is cancelled; `onListening` gets the bound port (useful with port 0).
    public func run(onListening: @escaping @Sendable (Int) async -> Void = { _ in }) async throws {
        let router = Router()
        router.get("/inApps/v1/transactions/:transactionId") { request, context in
            try await self.authorized(request) { try await self.transactionInfo(context.parameters.get("transactionId") ?? "") }
        }
        router.get("/inApps/v2/history/:transactionId") { request, context in
            try await self.authorized(request) {
                try await self.history(context.parameters.get("transactionId") ?? "", revision: request.uri.queryParameters.get("revision"),
                                       sort: request.uri.queryParameters.get("sort"))
            }
        }
        router.get("/inApps/v1/subscriptions/:transactionId") { request, context in
            try await self.authorized(request) { try await self.subscriptionStatuses(context.parameters.get("transactionId") ?? "") }
        }
        router.post("/inApps/v1/notifications/test") { request, _ in
            try await self.authorized(request) { try await self.testNotification() }
        }
        router.post("/verifyReceipt") { request, _ in
            var request = request
            return try await self.verifyReceipt(&request)
        }
        let application = Application(
            router: router,
            server: .http1(configuration: .init(idleTimeout: .seconds(configuration.idleTimeoutSeconds))),
            configuration: ApplicationConfiguration(address: .hostname(configuration.host, port: configuration.port), serverName: "sksim-app-store"),
            onServerRunning: { channel in await onListening(channel.localAddress?.port ?? 0) },
            logger: logger)
        try await application.runService(gracefulShutdownSignals: [])
    }

    // MARK: Authorization

    /// The claims Apple's client libraries send (App Store Server API, "Generating JSON Web Tokens for API
    /// requests"): no `iat` is required, since some send none.
    struct APIClaims: JWTPayload {
        var iss: String?
        var aud: String?
        var bid: String?
        var exp: Double?
        func verify(using algorithm: some JWTAlgorithm) async throws {}
    }

    /// Why a bearer token is refused, or nil when it is accepted.
    func refusal(authorization: String?) async -> String? {
        guard let authorization, authorization.hasPrefix("Bearer ") else { return "missing Authorization: Bearer token" }
        let token = String(authorization.dropFirst("Bearer ".count)).trimmingCharacters(in: .whitespaces)
        guard token.utf8.count <= 8_192 else { return "token too long" }
        let parsed: (header: JWTHeader, payload: APIClaims, signature: Data)
        do {
            parsed = try DefaultJWTParser().parse(Array(token.utf8), as: APIClaims.self)
        } catch {
            return "malformed token"
        }
        guard parsed.header.alg == "ES256" else { return "token not signed with ES256" }
        guard parsed.header.kid?.isEmpty == false else { return "token without a kid header" }
        guard parsed.payload.bid == configuration.settings.bundleIdentifier else { return "token for another app (bid)" }
        guard let expires = parsed.payload.exp, expires > Date().timeIntervalSince1970 else { return "token expired or without exp" }
        if let keys {
            // jwt-kit would fall back to its default key for an unknown kid: the kid must name a configured key.
            guard let kid = parsed.header.kid, configuration.apiKeys[kid] != nil else { return "token kid names no configured API key" }
            do {
                _ = try await keys.verify(token, as: APIClaims.self)
            } catch {
                return "token signature not valid for any configured API key"
            }
        }
        return nil
    }

    private func authorized(_ request: Request, _ body: () async throws -> Response) async throws -> Response {
        if let reason = await refusal(authorization: request.headers[.authorization]) {
            logger.info("app store request refused", metadata: ["reason": "\(reason)", "path": "\(request.uri.path)"])
            return Self.json(.unauthorized, ["errorCode": 401, "errorMessage": "Unauthenticated: \(reason)."])
        }
        return try await body()
    }

    // MARK: Endpoints

    private func ledger() async throws -> AppStoreLedger { try await follower.refresh() }

    static func transactionNotFound() -> Response {
        json(.notFound, ["errorCode": 4_040_010, "errorMessage": "Transaction id not found."])
    }

    static func invalidTransactionId() -> Response {
        json(.badRequest, ["errorCode": 4_000_006, "errorMessage": "Invalid transaction id."])
    }

    static func isTransactionId(_ text: String) -> Bool { !text.isEmpty && text.utf8.count <= 32 && text.allSatisfy(\.isASCII) && text.allSatisfy(\.isNumber) }

    private func transactionInfo(_ id: String) async throws -> Response {
        guard Self.isTransactionId(id) else { return Self.invalidTransactionId() }
        let ledger = try await ledger()
        guard let signed = try await documents.signedTransaction(id: id, in: ledger) else { return Self.transactionNotFound() }
        return Self.json(.ok, ["signedTransactionInfo": signed])
    }

    private func history(_ id: String, revision: String?, sort: String?) async throws -> Response {
        guard Self.isTransactionId(id) else { return Self.invalidTransactionId() }
        let ledger = try await ledger()
        guard let transaction = ledger.transaction(id: id) else { return Self.transactionNotFound() }
        var all = ledger.history(account: transaction.account)
        if sort == "DESCENDING" { all.reverse() }
        // The revision is where the next page starts; a team's server passes back what it got.
        let start: Int
        if let revision {
            guard let value = Int(revision), value >= 0, value <= all.count else {
                return Self.json(.badRequest, ["errorCode": 4_000_005, "errorMessage": "Invalid revision."])
            }
            start = value
        } else {
            start = 0
        }
        let end = min(all.count, start + configuration.historyPageSize)
        var signed: [String] = []
        for entry in all[start..<end] { signed.append(try await documents.signedTransaction(entry, in: ledger)) }
        return Self.json(.ok, ["revision": String(end), "hasMore": end < all.count, "bundleId": configuration.settings.bundleIdentifier,
                               "environment": configuration.settings.environment, "signedTransactions": signed])
    }

    private func subscriptionStatuses(_ id: String) async throws -> Response {
        guard Self.isTransactionId(id) else { return Self.invalidTransactionId() }
        let ledger = try await ledger()
        guard let transaction = ledger.transaction(id: id) else { return Self.transactionNotFound() }
        var groups: [[String: Any]] = []
        for (group, subscriptions) in ledger.subscriptions(account: transaction.account).sorted(by: { $0.key < $1.key }) {
            var last: [[String: Any]] = []
            for subscription in subscriptions {
                let latest = ledger.transactions[subscription.latestIndex]
                last.append(["originalTransactionId": ledger.transactions[subscription.originalIndex].transactionId,
                             "status": ledger.status(subscription),
                             "signedTransactionInfo": try await documents.signedTransaction(latest, in: ledger),
                             "signedRenewalInfo": try await documents.signedRenewalInfo(subscription, in: ledger)])
            }
            groups.append(["subscriptionGroupIdentifier": group, "lastTransactions": last])
        }
        return Self.json(.ok, ["environment": configuration.settings.environment, "bundleId": configuration.settings.bundleIdentifier,
                               "data": groups])
    }

    private func testNotification() async throws -> Response {
        guard let notifier else {
            return Self.json(.badRequest, ["errorCode": 4_000_000, "errorMessage": "No notification URL is set (--notification-url)."])
        }
        guard let token = await notifier.sendTest() else {
            return Self.json(.tooManyRequests, ["errorCode": 4_290_000, "errorMessage": "Rate limit exceeded: \(NotificationSender.maximumWaitingTests) test notifications already wait."])
        }
        return Self.json(.ok, ["testNotificationToken": token])
    }

    /// Legacy receipt validation (`verifyReceipt`): status 0 with the receipt's in-app entries, or
    /// Apple's status codes: 21000 not a POST of JSON, 21002 malformed receipt data, 21003 not authenticated.
    private func verifyReceipt(_ request: inout Request) async throws -> Response {
        let body: ByteBuffer
        do {
            body = try await request.collectBody(upTo: configuration.maximumBodyBytes)
        } catch is NIOTooManyBytesError {
            return Self.json(.contentTooLarge, ["status": 21_002, "errorMessage": "Request body larger than \(configuration.maximumBodyBytes) bytes."])
        }
        guard let object = try? JSONSerialization.jsonObject(with: Data(buffer: body)) as? [String: Any] else {
            return Self.json(.ok, ["status": 21_000])
        }
        guard let text = object["receipt-data"] as? String, let receipt = Data(base64Encoded: text, options: .ignoreUnknownCharacters) else {
            return Self.json(.ok, ["status": 21_002])
        }
        guard let payload = await AppReceipt.verifiedPayload(Array(receipt), chain: documents.chain) else {
            return Self.json(.ok, ["status": 21_003])
        }
        guard let receiptInfo = try? AppReceipt.fields(ofPayload: payload) else {
            return Self.json(.ok, ["status": 21_002])
        }
        return Self.json(.ok, ["status": 0, "environment": configuration.settings.environment, "receipt": receiptInfo])
    }

    static func json(_ status: HTTPResponse.Status, _ object: [String: Any]) -> Response {
        let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data("{}".utf8)
        return Response(status: status, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(bytes: data)))
    }
}

/// A configuration the App Store server cannot start with; the message says what to change.
public struct AppStoreServerError: Error, CustomStringConvertible {
    /// What kind of problem, for code (and tests) that tell problems apart; the description is for people.
    public enum Code: String, Sendable, Hashable, CaseIterable {
        /// An API key that is not a P-256 key in PEM.
        case invalidAPIKey
        /// The notification journal cannot be opened.
        case journalUnavailable
    }

    public var code: Code
    public var description: String
    public init(_ description: String, code: Code) {
        self.description = description
        self.code = code
    }
}
