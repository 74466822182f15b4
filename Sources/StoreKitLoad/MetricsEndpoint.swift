import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import Prometheus

/// `sksim load --metrics HOST:PORT`: the run's figures in Prometheus's text format at
/// `http://HOST:PORT/metrics` while the load runs, updated once per interval as the coordinator
/// merges the drivers' reports (swift-prometheus's registry, served by SwiftNIO's HTTP/1 server).
public final class MetricsEndpoint: Sendable {
    private let registry = PrometheusCollectorRegistry()
    private let group: MultiThreadedEventLoopGroup
    private let channel: Channel
    private let started: Counter
    private let completed: Counter
    private let errors: Counter
    private let missedStarts: Counter
    private let backendErrors: Counter
    private let inFlight: Gauge
    /// The port bound (useful with port 0).
    public let port: Int

    /// Binds `HOST:PORT`; a port in use or a host that is no address of this machine is one clear error.
    public init(listen: String) throws(LoadSpecificationError) {
        guard let colon = listen.lastIndex(of: ":"), let port = Int(listen[listen.index(after: colon)...]), (0...65_535).contains(port) else {
            throw LoadSpecificationError("--metrics '\(listen)' is not HOST:PORT, e.g. 127.0.0.1:9464")
        }
        let host = String(listen[..<colon])
        started = registry.makeCounter(descriptor: Self.name("started", "total", "Lifecycles started."))
        completed = registry.makeCounter(descriptor: Self.name("completed", "total", "Lifecycles that reached their end."))
        errors = registry.makeCounter(descriptor: Self.name("errors", "total", "Lifecycles that ended in an error."))
        missedStarts = registry.makeCounter(descriptor: Self.name("missed_starts", "total", "Starts not made (late beyond the bound, or beyond the in-flight bound)."))
        backendErrors = registry.makeCounter(descriptor: Self.name("backend_errors", "total", "Transactions the backend refused or did not answer."))
        inFlight = registry.makeGauge(descriptor: Self.name("in_flight", "", "Lifecycles in flight at the end of the last interval."))
        group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let registry = self.registry
        do {
            channel = try ServerBootstrap(group: group)
                .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
                .childChannelInitializer { channel in
                    channel.pipeline.configureHTTPServerPipeline().flatMap {
                        channel.pipeline.addHandler(MetricsHandler(registry: registry))
                    }
                }
                .bind(host: host, port: port).wait()
        } catch {
            try? group.syncShutdownGracefully()
            throw LoadSpecificationError("--metrics: cannot listen on \(listen) (\(error)); choose a free port on an address of this machine")
        }
        self.port = channel.localAddress?.port ?? port
    }

    /// One interval of the whole run, all drivers merged.
    func record(_ row: LoadCoordinator.IntervalRow) {
        started.increment(by: Int64(row.counters.started))
        completed.increment(by: Int64(row.counters.completed))
        errors.increment(by: Int64(row.counters.errors))
        missedStarts.increment(by: Int64(row.counters.missedStarts))
        backendErrors.increment(by: Int64(row.counters.backendErrors))
        inFlight.set(Double(row.inFlight))
        for (stage, summary) in row.stages {
            registry.makeGauge(descriptor: Self.name("stage_p99", "seconds", "A stage's p99 latency over the last interval, from the intended start."),
                               labels: [("stage", stage)])
                .set(Double(summary.p99Microseconds) / 1e6)
            registry.makeCounter(descriptor: Self.name("stage", "total", "Lifecycles that reached a stage."), labels: [("stage", stage)])
                .increment(by: Int64(summary.count))
        }
    }

    /// `sksim_load_NAME_UNIT` (an empty unit adds nothing), with its help text.
    private static func name(_ metricName: String, _ unitName: String, _ helpText: String) -> MetricNameDescriptor {
        MetricNameDescriptor(namespace: "sksim", subsystem: "load", metricName: metricName, unitName: unitName, helpText: helpText)
    }

    public func close() {
        try? channel.close().wait()
        try? group.syncShutdownGracefully()
    }
}

/// Answers `GET /metrics` with the registry's text; anything else with 404.
private final class MetricsHandler: ChannelInboundHandler, Sendable {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart
    let registry: PrometheusCollectorRegistry

    init(registry: PrometheusCollectorRegistry) { self.registry = registry }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard case .head(let request) = unwrapInboundIn(data) else { return }
        var bytes: [UInt8] = []
        let found = request.uri == "/metrics" || request.uri.hasPrefix("/metrics?")
        if found { registry.emit(into: &bytes) } else { bytes = Array("not found: the metrics are at /metrics\n".utf8) }
        var headers = HTTPHeaders()
        headers.add(name: "Content-Type", value: found ? "text/plain; version=0.0.4" : "text/plain")
        headers.add(name: "Content-Length", value: String(bytes.count))
        context.write(wrapOutboundOut(.head(HTTPResponseHead(version: request.version, status: found ? .ok : .notFound, headers: headers))), promise: nil)
        context.write(wrapOutboundOut(.body(.byteBuffer(context.channel.allocator.buffer(bytes: bytes)))), promise: nil)
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
    }
}
