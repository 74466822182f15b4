import AsyncHTTPClient
import Foundation
import StoreKitLive
import Synchronization

/// HTTP requests sent from a driver's one thread without blocking it: each runs on AsyncHTTPClient's
/// event loop, and its answer (with the instant it came) waits in a list the driver's loop takes every
/// round. At most `maximumOutstanding` requests are in flight, so that list stays bounded too.
/// `BackendPoster` (the `--backend` POSTs) and `LoadHTTPCaller` (a behaviour's calls) send through one.
final class BoundedHTTPSender<Answer: Sendable>: Sendable {
    let maximumOutstanding: Int
    private let client: HTTPClient
    private let answers = Mutex<[Answer]>([])
    private let outstandingCount = Mutex(0)

    /// `timeoutNanoseconds` bounds connecting and reading too, besides each request's deadline.
    init(maximumOutstanding: Int, timeoutNanoseconds: Int64? = nil) {
        var configuration = HTTPClient.Configuration()
        configuration.connectionPool.concurrentHTTP1ConnectionsPerHostSoftLimit = 64
        if let timeoutNanoseconds {
            configuration.timeout = .init(connect: .nanoseconds(timeoutNanoseconds), read: .nanoseconds(timeoutNanoseconds))
        }
        client = HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: configuration)
        self.maximumOutstanding = maximumOutstanding
    }

    var outstanding: Int { outstandingCount.withLock { $0 } }

    /// Counts one more request in flight; false (nothing counted) when `maximumOutstanding` are.
    func admit() -> Bool {
        outstandingCount.withLock { count in
            guard count < maximumOutstanding else { return false }
            count += 1
            return true
        }
    }

    /// Sends an admitted request, to be answered by `deadline` at the latest; `answer` makes the answer
    /// from the response or the failure, and the monotonic instant it came.
    func execute(
        _ request: HTTPClient.Request, timeoutNanoseconds: Int64,
        answer: @escaping @Sendable (Result<HTTPClient.Response, any Error>, Int64) -> Answer
    ) {
        // NIODeadline counts the monotonic clock's nanoseconds, as DispatchTime's uptime does.
        let deadline = DispatchTime.now().uptimeNanoseconds + UInt64(max(0, timeoutNanoseconds))
        client.execute(request: request, deadline: .uptimeNanoseconds(deadline)).whenComplete { [self] result in
            finish(answer(result, LiveClock.monotonicNanoseconds()))
        }
    }

    /// Ends an admitted request with its answer (also one that failed before it could be sent).
    func finish(_ answer: Answer) {
        answers.withLock { $0.append(answer) }
        outstandingCount.withLock { $0 -= 1 }
    }

    /// The answer of a request that was not admitted: it still reaches the driver, never the network.
    func refuse(_ answer: Answer) {
        answers.withLock { $0.append(answer) }
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
