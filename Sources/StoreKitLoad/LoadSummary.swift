import Foundation

/// The live terminal view: one block, redrawn in place every interval (only on a terminal).
struct LiveView {
    private var drawnLines = 0

    mutating func draw(row: LoadCoordinator.IntervalRow, figures: LoadFigures, elapsedSeconds: Double) {
        var lines: [String] = []
        let counters = figures.counters
        lines.append(String(format: "%7.1f s   started %8.0f/s   completed %8.0f/s   in flight %6d   missed %d   errors %d   rejections %d",
                            elapsedSeconds, Double(row.counters.started), Double(row.counters.completed), row.inFlight,
                            counters.missedStarts, counters.errors, counters.rejections))
        lines.append("  stage              count      p50 (last s)    p99 (last s)    p99 (run)")
        for stage in LifecycleStage.allCases {
            guard let total = figures.summary(stage) else { continue }
            let last = row.stages[stage.rawValue]
            lines.append("  " + padded(stage.rawValue, 16) + padded(String(total.count), 8, right: true) + "   "
                         + padded(last.map { formatMicroseconds($0.p50Microseconds) } ?? "-", 13, right: true) + "   "
                         + padded(last.map { formatMicroseconds($0.p99Microseconds) } ?? "-", 13, right: true) + "   "
                         + padded(formatMicroseconds(total.p99Microseconds), 11, right: true))
        }
        // Back up over the previous block, then overwrite it line by line.
        var text = drawnLines > 0 ? "\u{1B}[\(drawnLines)A" : ""
        for line in lines { text += "\u{1B}[2K" + line + "\n" }
        try? FileHandle.standardError.write(contentsOf: Data(text.utf8))  // FileHandle.write(_:) traps on a failed write
        drawnLines = lines.count
    }

    func finish() {}
}

func padded(_ text: String, _ width: Int, right: Bool = false) -> String {
    let fill = String(repeating: " ", count: max(0, width - text.count))
    return right ? fill + text : text + fill
}

/// `12.3ms`, `850µs`, `1.20s`: three significant figures, the unit a person reads fastest.
public func formatMicroseconds(_ microseconds: UInt64) -> String {
    let value = Double(microseconds)
    if value < 1_000 { return String(format: "%.0fµs", value) }
    if value < 1_000_000 { return String(format: value < 10_000 ? "%.2fms" : value < 100_000 ? "%.1fms" : "%.0fms", value / 1_000) }
    return String(format: "%.2fs", value / 1_000_000)
}

/// What `--json`, summary.json and the HTML report hold: the fields the issue fixes
/// (`lifecycles`, `lifecyclesPerSecond`, `missedStarts`, `stages`, `thresholds`, `violations`)
/// and more figures beside them.
public struct LoadSummaryJSON: Codable, Sendable {
    public struct ThresholdResult: Codable, Sendable {
        public var expression: String
        public var passed: Bool
        public var actual: Double?
    }

    public var lifecycles: Int
    public var lifecyclesPerSecond: Double
    public var missedStarts: Int
    /// The built-in stages reached, and a team's driver's own stages (`--driver`), by name.
    public var stages: [String: StageSummary]
    /// A team's driver's own counters and checks (nil when it kept none).
    public var counters: [String: Int]?
    public var checks: [String: CheckCounts]?
    public var thresholds: [ThresholdResult]
    public var violations: Int
    public var violationMessages: [String]
    public var started: Int
    public var errors: Int
    /// errors / (errors + completed + incomplete).
    public var errorRate: Double
    /// Transactions the backend (`--backend`) refused or did not answer: not finished.
    public var backendErrors: Int
    /// `--notification-url`: notifications delivered, retried and undelivered (stage `notified` times them).
    public var notifications: NotificationCounts?
    /// Lifecycles completed in the drain, after the last start was offered (not in `lifecyclesPerSecond`).
    public var drainLifecycles: Int
    public var lostDrivers: [LoadCoordinator.LostDriver]
    /// Where `--report` wrote the report (its report.html), when it did.
    public var report: String?
    public var rejections: Int
    public var incomplete: Int
    public var pending: Int
    public var duplicates: Int
    public var model: String
    public var drivers: Int
    public var loadSeconds: Double
    public var wallSeconds: Double
    public var coordinatorCpuSeconds: Double
    public var coordinatorPeakMemoryMegabytes: Double
    public var driversCpuSeconds: Double
    public var driverPeakMemoryMegabytes: Double
    public var driverCpuMicrosecondsPerLifecycle: Double
    public var aborted: String?
    public var runDirectory: String

    public init(_ result: LoadCoordinator.Result) {
        let figures = result.figures
        lifecycles = figures.counters.completed
        lifecyclesPerSecond = (figures.lifecyclesPerSecond * 10).rounded() / 10
        missedStarts = figures.counters.missedStarts
        var stages: [String: StageSummary] = [:]
        for stage in LifecycleStage.allCases { if let summary = figures.summary(stage) { stages[stage.rawValue] = summary } }
        for name in figures.custom.stages.keys { if let summary = figures.custom.summary(stage: name) { stages[name] = summary } }
        self.stages = stages
        counters = figures.custom.counters.isEmpty ? nil : figures.custom.counters
        checks = figures.custom.checks.isEmpty ? nil : figures.custom.checks
        thresholds = result.thresholds.map { ThresholdResult(expression: $0.threshold.expression, passed: $0.passed, actual: $0.actual) }
        violations = figures.violations ?? 0
        violationMessages = figures.violationMessages
        started = figures.counters.started
        errors = figures.counters.errors
        errorRate = (figures.errorRate * 1e6).rounded() / 1e6
        backendErrors = figures.counters.backendErrors
        notifications = figures.notifications
        drainLifecycles = figures.counters.completed - figures.counters.completedDuringLoad
        lostDrivers = result.lostDrivers
        report = result.reportDirectory.map { $0.appendingPathComponent("report.html").path }
        rejections = Int(figures.value(of: "rejections") ?? 0)
        incomplete = figures.counters.incomplete
        pending = figures.pending ?? 0
        duplicates = figures.duplicates ?? 0
        model = result.plan.model.rawValue
        drivers = result.drivers
        loadSeconds = (figures.loadSeconds * 1000).rounded() / 1000
        wallSeconds = (result.wallSeconds * 1000).rounded() / 1000
        coordinatorCpuSeconds = (result.coordinatorCPUSeconds * 1000).rounded() / 1000
        coordinatorPeakMemoryMegabytes = (Double(result.coordinatorPeakMemoryBytes) / 1_048_576 * 10).rounded() / 10
        driversCpuSeconds = (result.driversCPUSeconds * 1000).rounded() / 1000
        driverPeakMemoryMegabytes = (Double(result.driverPeakMemoryBytes) / 1_048_576 * 10).rounded() / 10
        driverCpuMicrosecondsPerLifecycle = figures.counters.started > 0
            ? (result.driversCPUSeconds * 1e6 / Double(figures.counters.started) * 10).rounded() / 10 : 0
        aborted = result.aborted
        runDirectory = result.runDirectory.path
    }

    public func serialized(pretty: Bool = false) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = pretty ? [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes] : [.sortedKeys, .withoutEscapingSlashes]
        return String(decoding: (try? encoder.encode(self)) ?? Data(), as: UTF8.self)
    }
}

/// The end-of-run summary in k6's manner: checks (thresholds) first, then one line per figure.
public func summaryText(_ result: LoadCoordinator.Result) -> String {
    let figures = result.figures
    var lines: [String] = []
    if !result.thresholds.isEmpty {
        lines.append("  thresholds")
        for judged in result.thresholds {
            let actual = judged.actual.map { value -> String in
                switch judged.threshold.metric {
                case .stageLatency, .customStageLatency: return formatMicroseconds(UInt64(value))
                default: break
                }
                return value == value.rounded() ? String(Int(value)) : String(format: "%.1f", value)
            } ?? "no data"
            lines.append("    \(judged.passed ? "✓" : "✗") \(judged.threshold.expression)   (actual \(actual))")
        }
        lines.append("")
    }
    func dotted(_ name: String, _ value: String) -> String {
        "  " + name + " " + String(repeating: ".", count: max(2, 26 - name.count)) + ": " + value
    }
    lines.append(dotted("lifecycles", String(format: "%d   %.1f/s over %.1f s", figures.counters.completed, figures.lifecyclesPerSecond, figures.loadSeconds)
                        + " (\(result.plan.model.rawValue) model, \(result.drivers) driver\(result.drivers == 1 ? "" : "s"))"
                        + "   drain \(figures.counters.completed - figures.counters.completedDuringLoad)"))
    lines.append(dotted("started", "\(figures.counters.started)   missed starts \(figures.counters.missedStarts)   incomplete \(figures.counters.incomplete)"))
    let stageSummaries = LifecycleStage.allCases.compactMap { stage in figures.summary(stage).map { (stage.rawValue, $0) } }
        + figures.custom.stages.keys.sorted().compactMap { name in figures.custom.summary(stage: name).map { (name, $0) } }
    for (name, summary) in stageSummaries {
        lines.append(dotted(name, "count=\(summary.count) mean=\(formatMicroseconds(UInt64(summary.meanMicroseconds))) p50=\(formatMicroseconds(summary.p50Microseconds)) p90=\(formatMicroseconds(summary.p90Microseconds)) p95=\(formatMicroseconds(summary.p95Microseconds)) p99=\(formatMicroseconds(summary.p99Microseconds)) p99.9=\(formatMicroseconds(summary.p999Microseconds)) max=\(formatMicroseconds(summary.maxMicroseconds))"))
    }
    lines.append(dotted("errors", "\(figures.counters.errors) (rate \(String(format: "%.4f", figures.errorRate)))   backend errors \(figures.counters.backendErrors)   rejections \(Int(figures.value(of: "rejections") ?? 0))   duplicates \(figures.duplicates ?? 0)   pending \(figures.pending ?? 0)"))
    if !figures.custom.counters.isEmpty {
        lines.append(dotted("counters", figures.custom.counters.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: "   ")))
    }
    for (name, counts) in figures.custom.checks.sorted(by: { $0.key < $1.key }) {
        lines.append(dotted("check", "\(counts.failed == 0 ? "✓" : "✗") \(name)   passed \(counts.passed)   failed \(counts.failed)"))
    }
    if let notifications = figures.notifications {
        lines.append(dotted("notifications", "delivered \(notifications.delivered)   retried \(notifications.retried)   undelivered \(notifications.undelivered)"))
    }
    lines.append(dotted("violations", figures.violations.map { $0 == 0 ? "none" : "\($0): " + figures.violationMessages.prefix(3).joined(separator: "; ") } ?? "unknown"))
    lines.append(dotted("coordinator", String(format: "%.2f s CPU over %.1f s, peak memory %.1f MB", result.coordinatorCPUSeconds, result.wallSeconds,
                                              Double(result.coordinatorPeakMemoryBytes) / 1_048_576)))
    lines.append(dotted("drivers", String(format: "%.2f s CPU, %.1f µs per lifecycle started, peak memory %.1f MB", result.driversCPUSeconds,
                                          figures.counters.started > 0 ? result.driversCPUSeconds * 1e6 / Double(figures.counters.started) : 0,
                                          Double(result.driverPeakMemoryBytes) / 1_048_576)))
    if let aborted = result.aborted { lines.append(dotted("aborted", aborted)) }
    for lost in result.lostDrivers { lines.append(dotted("lost driver", lost.reason)) }
    lines.append(dotted("run", result.runDirectory.path))
    if let report = result.reportDirectory { lines.append(dotted("report", report.appendingPathComponent("report.html").path)) }
    return lines.joined(separator: "\n")
}
