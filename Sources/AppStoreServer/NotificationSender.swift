import AppStoreSigning
import AsyncHTTPClient
import Foundation
import Logging
import NIOCore

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// App Store Server Notifications V2 (docs/app-store-server.md): POSTs `{"signedPayload": JWS}` to the
/// team's URL for every notification the log produces (`AppStoreLedger.notifications`), with AsyncHTTPClient.
///
/// - A non-2xx answer or a timeout is retried with the same `notificationUUID`, after each of
///   `retryDelaysSeconds` (Apple retries five times; here 1, 2, 4, 8 and 16 s by default), then given up.
/// - What was delivered (or given up) is appended to `journal` and synced before the next notification is
///   counted done, and the notifications themselves derive from the log: a sender killed at any point
///   sends on restart everything not in the journal, so none is lost (at least once).
/// - At most `maximumConcurrentDeliveries` are in flight; the rest wait as a position in the ledger, so a
///   webhook that is down holds no more than that, and never touches the queue or the store.
public actor NotificationSender {
    public struct Configuration: Sendable {
        public var url: String
        public var retryDelaysSeconds: [Double]
        public var timeoutSeconds: Int64
        public var maximumConcurrentDeliveries: Int
        /// The durable record of delivered notifications (one UUID a line, with its outcome).
        public var journal: URL

        public init(url: String, journal: URL, retryDelaysSeconds: [Double] = [1, 2, 4, 8, 16], timeoutSeconds: Int64 = 10,
                    maximumConcurrentDeliveries: Int = 8) {
            self.url = url
            self.journal = journal
            self.retryDelaysSeconds = retryDelaysSeconds
            self.timeoutSeconds = timeoutSeconds
            self.maximumConcurrentDeliveries = max(1, maximumConcurrentDeliveries)
        }
    }

    public let configuration: Configuration
    private let documents: AppStoreDocuments
    private let follower: LedgerFollower
    private let client: HTTPClient
    private let logger: Logger
    /// UUIDs the journal holds: delivered, or given up after the last retry.
    private var settled: Set<String> = []
    /// The ledger's notifications as of the last `catchUp`, and the next one not yet started: what waits
    /// is a position in the ledger, not a copy per notification, so a webhook that is down holds no more.
    private var notifications: [AppStoreLedger.Notification] = []
    private var next = 0
    /// `TEST` notifications asked for and not yet started, at most `maximumWaitingTests`.
    private var tests: [String] = []
    public static let maximumWaitingTests = 64
    private var inFlight = 0
    public private(set) var delivered = 0
    public private(set) var givenUp = 0
    private var journalDescriptor: Int32 = -1

    public init(configuration: Configuration, documents: AppStoreDocuments, follower: LedgerFollower, logger: Logger) throws {
        self.configuration = configuration
        self.documents = documents
        self.follower = follower
        self.logger = logger
        client = HTTPClient(eventLoopGroupProvider: .singleton)
        let path = configuration.journal.path
        settled = Set(NotificationJournal.read(configuration.journal).map(\.notificationUUID))
        journalDescriptor = open(path, O_CREAT | O_WRONLY | O_APPEND | O_CLOEXEC, 0o644)
        guard journalDescriptor >= 0 else {
            throw AppStoreServerError("cannot open the notification journal \(path): \(String(cString: strerror(errno)))", code: .journalUnavailable)
        }
    }

    deinit {
        if journalDescriptor >= 0 { close(journalDescriptor) }
        try? client.syncShutdown()
    }

    /// Notifications queued or in flight.
    public var outstanding: Int { waitingInLedger + tests.count + inFlight }
    /// Notifications of `notifications` from `next` on that are not settled.
    private var waitingInLedger = 0

    /// Takes in the notifications the log holds by now and starts deliveries up to the bound.
    public func catchUp() async throws {
        let known = notifications.count
        // The ledger only grows: the notifications known already keep their places.
        notifications = try await follower.refresh().notifications
        for index in known..<notifications.count where !settled.contains(notifications[index].notificationUUID) { waitingInLedger += 1 }
        startDeliveries()
    }

    /// Sends `TEST` (POST /inApps/v1/notifications/test), returning its token (the notification's UUID),
    /// or nil when `maximumWaitingTests` already wait.
    public func sendTest() -> String? {
        guard tests.count < Self.maximumWaitingTests else { return nil }
        let uuid = UUID().uuidString.lowercased()
        tests.append(uuid)
        startDeliveries()
        return uuid
    }

    /// Follows the log, sending as notifications appear, until cancelled.
    public func follow(pollMilliseconds: Int64 = 200) async {
        while !Task.isCancelled {
            do {
                try await catchUp()
            } catch {
                logger.error("cannot read the log for notifications", metadata: ["error": "\(error)"])
            }
            try? await Task.sleep(for: .milliseconds(pollMilliseconds))
        }
    }

    /// Waits until nothing is outstanding or `seconds` have passed; returns how many are left.
    public func drain(seconds: Double) async -> Int {
        let deadline = ContinuousClock.now + .milliseconds(Int64(seconds * 1000))
        while outstanding > 0, ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(20))
        }
        return outstanding
    }

    private func startDeliveries() {
        while inFlight < configuration.maximumConcurrentDeliveries {
            if !tests.isEmpty {
                let uuid = tests.removeFirst()
                inFlight += 1
                Task { await self.deliver(uuid: uuid, type: "TEST", subtype: nil, transactionIndex: nil) }
                continue
            }
            guard next < notifications.count else { return }
            let notification = notifications[next]
            next += 1
            guard !settled.contains(notification.notificationUUID) else { continue }
            waitingInLedger -= 1
            inFlight += 1
            Task {
                await self.deliver(uuid: notification.notificationUUID, type: notification.notificationType, subtype: notification.subtype,
                                   transactionIndex: notification.transactionIndex)
            }
        }
    }

    private func deliver(uuid: String, type: String, subtype: String?, transactionIndex: Int?) async {
        var succeeded = false
        var attempts = 0
        do {
            let ledger = await follower.current
            let signed = try await documents.signedNotification(type: type, subtype: subtype, uuid: uuid, transactionIndex: transactionIndex, in: ledger)
            let body = try JSONSerialization.data(withJSONObject: ["signedPayload": signed])
            for attempt in 0...configuration.retryDelaysSeconds.count {
                if attempt > 0 {
                    try await Task.sleep(for: .milliseconds(Int64(configuration.retryDelaysSeconds[attempt - 1] * 1000)))
                }
                attempts = attempt + 1
                if await post(body, uuid: uuid, attempt: attempt) {
                    succeeded = true
                    break
                }
            }
        } catch {
            logger.error("notification not sent", metadata: ["notificationUUID": "\(uuid)", "error": "\(error)"])
        }
        record(uuid: uuid, delivered: succeeded, attempts: attempts)
        inFlight -= 1
        startDeliveries()
    }

    private func post(_ body: Data, uuid: String, attempt: Int) async -> Bool {
        var request = HTTPClientRequest(url: configuration.url)
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/json")
        request.body = .bytes(ByteBuffer(bytes: body))
        do {
            let response = try await client.execute(request, timeout: .seconds(configuration.timeoutSeconds))
            // The answer's body is not needed; reading a bounded part of it lets the connection be reused.
            _ = try? await response.body.collect(upTo: 64 * 1024)
            if (200..<300).contains(response.status.code) { return true }
            logger.info("notification refused", metadata: ["notificationUUID": "\(uuid)", "attempt": "\(attempt)", "status": "\(response.status.code)"])
        } catch {
            logger.info("notification not delivered", metadata: ["notificationUUID": "\(uuid)", "attempt": "\(attempt)", "error": "\(error)"])
        }
        return false
    }

    /// Appends the outcome and syncs it: only then is the notification settled.
    private func record(uuid: String, delivered wasDelivered: Bool, attempts: Int) {
        let entry = NotificationJournal.Entry(delivered: wasDelivered, notificationUUID: uuid,
                                              unixNanoseconds: Int64(Date().timeIntervalSince1970 * 1e9), attempts: attempts)
        let line = Array(entry.line.utf8)
        let written = line.withUnsafeBytes { write(journalDescriptor, $0.baseAddress, $0.count) }
        if written != line.count || fsync(journalDescriptor) != 0 {
            logger.error("cannot record a notification in the journal; it may be sent again", metadata: ["notificationUUID": "\(uuid)"])
        }
        settled.insert(uuid)
        if wasDelivered { delivered += 1 } else { givenUp += 1 }
    }
}

/// The sender's durable record, one line per settled notification:
/// `delivered|gave-up UUID UNIX_NANOSECONDS ATTEMPTS` (the time of the last attempt's answer, and how
/// many POSTs were made). `sksim load` reads it to time stage `notified`.
public enum NotificationJournal {
    public struct Entry: Sendable, Equatable {
        public var delivered: Bool
        public var notificationUUID: String
        /// Wall-clock time of the outcome (nil in a line of an older form).
        public var unixNanoseconds: Int64?
        public var attempts: Int?

        var line: String {
            "\(delivered ? "delivered" : "gave-up") \(notificationUUID) \(unixNanoseconds.map(String.init) ?? "-") \(attempts.map(String.init) ?? "-")\n"
        }
    }

    /// Every whole entry of the journal at `url` (none when it is missing); a line cut short by a crash
    /// is not a whole UUID and settles nothing.
    public static func read(_ url: URL) -> [Entry] {
        guard let text = try? String(contentsOf: url, encoding: .utf8) else { return [] }
        return text.split(separator: "\n").compactMap { line in
            let parts = line.split(separator: " ")
            guard parts.count >= 2, parts[1].count == 36, ["delivered", "gave-up"].contains(parts[0]) else { return nil }
            return Entry(delivered: parts[0] == "delivered", notificationUUID: String(parts[1]),
                         unixNanoseconds: parts.count >= 4 ? Int64(parts[2]) : nil, attempts: parts.count >= 4 ? Int(parts[3]) : nil)
        }
    }
}
