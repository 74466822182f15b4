import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import StoreKitLive
import Synchronization

/// The HTTP calls a team's behaviour makes (`LoadContext.http`), sent from the driver's one thread
/// without blocking it, as `BackendPoster` sends its POSTs: each runs on AsyncHTTPClient's event loop,
/// and its answer (with the instant it came) waits in a list the driver's loop takes every round.
final class LoadHTTPCaller: Sendable {
    struct Answer: Sendable {
        var token: Int
        /// The HTTP status, or nil when no answer came (refused, timed out, not a URL).
        var status: Int?
        var body: Data
        var failure: String?
        var monotonicNanoseconds: Int64
    }

    /// Calls in flight at most; one beyond is not sent and fails its check.
    static let maximumOutstanding = 10_000
    /// The most of an answer's body kept for the behaviour's `onAnswer`.
    static let maximumBodyBytes = 1 << 20

    private let client: HTTPClient
    private let answers = Mutex<[Answer]>([])
    private let outstandingCount = Mutex(0)

    init() {
        var configuration = HTTPClient.Configuration()
        configuration.connectionPool.concurrentHTTP1ConnectionsPerHostSoftLimit = 64
        client = HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: configuration)
    }

    var outstanding: Int { outstandingCount.withLock { $0 } }

    /// Sends `request`; false (nothing sent) when `maximumOutstanding` calls are in flight.
    func call(token: Int, _ request: LoadHTTPRequest) -> Bool {
        let admitted = outstandingCount.withLock { count -> Bool in
            guard count < Self.maximumOutstanding else { return false }
            count += 1
            return true
        }
        guard admitted else { return false }
        var headers = HTTPHeaders()
        for (name, value) in request.headers.sorted(by: { $0.key < $1.key }) { headers.add(name: name, value: value) }
        let built: HTTPClient.Request
        do {
            built = try HTTPClient.Request(url: request.url, method: HTTPMethod(rawValue: request.method.uppercased()), headers: headers,
                                           body: request.body.map { .data($0) })
        } catch {
            finish(Answer(token: token, status: nil, body: Data(), failure: "cannot call \(request.url): \(error)", monotonicNanoseconds: LiveClock.monotonicNanoseconds()))
            return true
        }
        // NIODeadline counts the monotonic clock's nanoseconds, as DispatchTime's uptime does.
        let deadline = DispatchTime.now().uptimeNanoseconds + UInt64(max(0, request.timeoutNanoseconds))
        client.execute(request: built, deadline: .uptimeNanoseconds(deadline)).whenComplete { [self] result in
            let now = LiveClock.monotonicNanoseconds()
            switch result {
            case .success(let response):
                var body = response.body ?? ByteBuffer()
                let kept = Data(body.readBytes(length: min(body.readableBytes, Self.maximumBodyBytes)) ?? [])
                finish(Answer(token: token, status: Int(response.status.code), body: kept, failure: nil, monotonicNanoseconds: now))
            case .failure(let error):
                finish(Answer(token: token, status: nil, body: Data(), failure: "\(error)", monotonicNanoseconds: now))
            }
        }
        return true
    }

    private func finish(_ answer: Answer) {
        answers.withLock { $0.append(answer) }
        outstandingCount.withLock { $0 -= 1 }
    }

    /// The answers that came since the last call.
    func take() -> [Answer] {
        answers.withLock { list in
            defer { list.removeAll(keepingCapacity: true) }
            return list
        }
    }

    func shutdown() {
        try? client.syncShutdown()
    }
}
