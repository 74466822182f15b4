import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import StoreKitLive

/// The HTTP calls a team's behaviour makes (`LoadContext.http`), sent through a `BoundedHTTPSender`
/// from the driver's one thread without blocking it.
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

    private let sender = BoundedHTTPSender<Answer>(maximumOutstanding: LoadHTTPCaller.maximumOutstanding)

    var outstanding: Int { sender.outstanding }

    /// Sends `request`; false (nothing sent) when `maximumOutstanding` calls are in flight.
    func call(token: Int, _ request: LoadHTTPRequest) -> Bool {
        guard sender.admit() else { return false }
        var headers = HTTPHeaders()
        for (name, value) in request.headers.sorted(by: { $0.key < $1.key }) { headers.add(name: name, value: value) }
        let built: HTTPClient.Request
        do {
            built = try HTTPClient.Request(url: request.url, method: HTTPMethod(rawValue: request.method.uppercased()), headers: headers,
                                           body: request.body.map { .data($0) })
        } catch {
            sender.finish(Answer(token: token, status: nil, body: Data(), failure: "cannot call \(request.url): \(error)", monotonicNanoseconds: LiveClock.monotonicNanoseconds()))
            return true
        }
        sender.execute(built, timeoutNanoseconds: request.timeoutNanoseconds) { result, now in
            switch result {
            case .success(let response):
                var body = response.body ?? ByteBuffer()
                let kept = Data(body.readBytes(length: min(body.readableBytes, Self.maximumBodyBytes)) ?? [])
                return Answer(token: token, status: Int(response.status.code), body: kept, failure: nil, monotonicNanoseconds: now)
            case .failure(let error):
                return Answer(token: token, status: nil, body: Data(), failure: "\(error)", monotonicNanoseconds: now)
            }
        }
        return true
    }

    /// The answers that came since the last call.
    func take() -> [Answer] { sender.take() }

    func shutdown() { sender.shutdown() }
}
