import Foundation
import Histogram

/// The stages of a lifecycle whose latency is measured, each from the lifecycle's intended start.
///
/// A purchase: `added` (transactionAdded heard) → one of `purchased`, `failed`, `deferred` (a
/// deferred one goes on to purchased or failed) → `downloaded` (every hosted-content download
/// ended, for purchases with downloads) → `finished` (the queue acknowledged finishTransaction)
/// → `removed` (transactionFinished heard: removedTransactions, the end of the lifecycle).
/// A restore: `restored` (restoreFinished heard, every restored transaction delivered) →
/// `restoreFinished` (every restored transaction finished and removed, the end).
public enum LifecycleStage: String, Sendable, Codable, CaseIterable, Comparable {
    // New stages go last: a report names a stage by its position here.
    case added, purchased, failed, deferred, downloaded, finished, removed, restored, restoreFinished
    /// A receipt refresh's end: the receipt's last piece heard (`requestDidFinish`).
    case receiptRefreshed
    /// A refund request's end: `entitlementsRevoked` heard for the refunded purchase.
    case refunded
    /// `--backend`: from the transaction's arrival at the app (purchased or restored heard) to the
    /// backend's 2xx answer; the only stage not timed from the intended start.
    case backend
    /// `--notification-url`: an App Store Server Notification, from its event's log time to the
    /// webhook's 2xx (read from the notification sender's journal once the run is over).
    case notified
    /// An Ask to Buy lifecycle: the parent approved (the purchase heard), or declined (the end).
    case approved, declined

    public static func < (left: LifecycleStage, right: LifecycleStage) -> Bool {
        allCases.firstIndex(of: left)! < allCases.firstIndex(of: right)!
    }
}

/// One HDR histogram per stage, in microseconds, 3 significant digits, from 1 µs to 1 hour:
/// constant memory whatever the run's length (about 180 KB per stage). Histograms with this
/// same configuration add up exactly, so the coordinator's merge of many drivers' histograms
/// is the histogram of all their samples.
public struct StageHistograms: Sendable {
    /// Longer latencies are recorded as this (and counted in `clamped`).
    public static let highestMicroseconds: UInt64 = 3_600_000_000

    public private(set) var histograms: [LifecycleStage: Histogram<UInt64>] = [:]
    public private(set) var clamped = 0
    /// Per stage, the count of each bucket recorded since the last reset, by the bucket's highest
    /// equivalent value (what the histogram's own iteration names it): `encoded` then costs what was
    /// recorded, not a walk over every bucket, which a driver pays every interval whatever its load.
    private var recordedBuckets: [LifecycleStage: [UInt64: UInt64]] = [:]
    /// Every sample came through `record` (not `add`), so `recordedBuckets` holds them all.
    private var bucketsHoldEverySample = true

    public init() {}

    public static func emptyHistogram() -> Histogram<UInt64> {
        Histogram<UInt64>(lowestDiscernibleValue: 1, highestTrackableValue: highestMicroseconds, numberOfSignificantValueDigits: .three)
    }

    public mutating func record(_ stage: LifecycleStage, nanoseconds: Int64) {
        var microseconds = UInt64(max(1, (nanoseconds + 500) / 1_000))
        if microseconds > Self.highestMicroseconds {
            microseconds = Self.highestMicroseconds
            clamped += 1
        }
        if histograms[stage] == nil { histograms[stage] = Self.emptyHistogram() }
        _ = histograms[stage]!.record(microseconds)
        recordedBuckets[stage, default: [:]][histograms[stage]!.highestEquivalentForValue(microseconds), default: 0] += 1
    }

    public mutating func add(_ other: StageHistograms) {
        if !other.isEmpty { bucketsHoldEverySample = false }
        for (stage, histogram) in other.histograms {
            if histograms[stage] == nil { histograms[stage] = Self.emptyHistogram() }
            histograms[stage]!.add(histogram)
        }
        // Saturating: the sum of many reports must not trap (a driver's report once carried 2^63 - 1; found by Fuzz/FuzzLoadReport).
        clamped = clamped.addingReportingOverflow(other.clamped).overflow ? .max : clamped + other.clamped
    }

    /// The most clamped values a report's histograms may claim.
    static let maximumClampedCount: UInt64 = 1 << 40

    /// Empties every stage: new histograms, allocated zeroed, cost less than clearing every bucket.
    public mutating func reset() {
        histograms.removeAll(keepingCapacity: true)
        recordedBuckets.removeAll(keepingCapacity: true)
        bucketsHoldEverySample = true
        clamped = 0
    }

    public func count(_ stage: LifecycleStage) -> UInt64 { histograms[stage]?.totalCount ?? 0 }

    public var isEmpty: Bool { histograms.values.allSatisfy { $0.totalCount == 0 } }

    // MARK: Wire form

    /// A compact, exact form for the bus: per stage, its non-empty buckets as (value, count)
    /// pairs in LEB128 varints. Each value is its bucket's representative, so recording it
    /// into a histogram of the same configuration lands in the same bucket.
    public func encoded() -> Data {
        var bytes: [UInt8] = []
        Self.putVarint(UInt64(clamped), into: &bytes)
        for stage in LifecycleStage.allCases {
            guard let histogram = histograms[stage], histogram.totalCount > 0 else { continue }
            bytes.append(UInt8(LifecycleStage.allCases.firstIndex(of: stage)!))
            if bucketsHoldEverySample, let buckets = recordedBuckets[stage] {
                Self.append(buckets.sorted { $0.key < $1.key }.map { ($0.key, $0.value) }, of: histogram, to: &bytes)
            } else {
                Self.append(histogram, to: &bytes)
            }
        }
        return Data(bytes)
    }

    static func putVarint(_ value: UInt64, into bytes: inout [UInt8]) {
        var value = value
        while value >= 0x80 {
            bytes.append(UInt8(value & 0x7F) | 0x80)
            value >>= 7
        }
        bytes.append(UInt8(value))
    }

    /// One non-empty histogram's buckets as (value, count) pairs, each value a delta from the previous.
    static func append(_ histogram: Histogram<UInt64>, to bytes: inout [UInt8]) {
        append(histogram.recordedValues().map { ($0.value, UInt64($0.count)) }, of: histogram, to: &bytes)
    }

    /// `histogram`'s non-empty buckets, ascending, as (highest equivalent value, count).
    static func append(_ buckets: [(UInt64, UInt64)], of histogram: Histogram<UInt64>, to bytes: inout [UInt8]) {
        // Each bucket goes as one value of it: its representative, except that the lowest
        // bucket goes as the exact minimum and the highest as the exact maximum, which the
        // histogram keeps beside its buckets and clamps percentiles to.
        var pairs = buckets
        pairs[pairs.count - 1].0 = histogram.maxRecorded
        if pairs.count > 1 {
            pairs[0].0 = histogram.min
        } else if pairs[0].1 > 1, histogram.min != histogram.maxRecorded {
            pairs = [(histogram.min, 1), (histogram.maxRecorded, pairs[0].1 - 1)]
        }
        putVarint(UInt64(pairs.count), into: &bytes)
        var previous: UInt64 = 0
        for (value, count) in pairs {
            putVarint(value - previous, into: &bytes)
            putVarint(count, into: &bytes)
            previous = value
        }
    }

    /// One histogram as `append` wrote it, alone (a custom stage's in a report).
    static func encodedHistogram(_ histogram: Histogram<UInt64>) -> Data {
        var bytes: [UInt8] = []
        append(histogram, to: &bytes)
        return Data(bytes)
    }

    /// Reads `encodedHistogram`; refuses anything malformed or left over.
    static func histogram(encoded data: Data) throws(LoadProtocolError) -> Histogram<UInt64> {
        var reader = VarintReader(bytes: [UInt8](data))
        let histogram = try reader.histogram()
        guard reader.position == reader.bytes.count else { throw LoadProtocolError("a custom stage's histogram in a driver's report has bytes left over", code: .malformedReport) }
        return histogram
    }

    /// Reads `encoded()`; refuses anything malformed (it comes from another process).
    public init(encoded data: Data) throws(LoadProtocolError) {
        var reader = VarintReader(bytes: [UInt8](data))
        // A count of recorded values: one beyond 2^40 is no real driver's (and the coordinator adds them up).
        let clampedCount = try reader.take()
        guard clampedCount <= Self.maximumClampedCount else {
            throw LoadProtocolError("a histogram in a driver's report claims \(clampedCount) clamped values", code: .limitExceeded)
        }
        clamped = Int(clampedCount)
        while reader.position < reader.bytes.count {
            let index = Int(reader.bytes[reader.position])
            reader.position += 1
            guard index < LifecycleStage.allCases.count else { throw LoadProtocolError("a driver's report names stage number \(index), which this build does not know", code: .malformedReport) }
            histograms[LifecycleStage.allCases[index]] = try reader.histogram()
        }
    }
}

/// Reads LEB128 varints from another process's bytes, refusing truncation and overflow.
struct VarintReader {
    let bytes: [UInt8]
    var position = 0

    mutating func take() throws(LoadProtocolError) -> UInt64 {
        var value: UInt64 = 0
        var shift: UInt64 = 0
        while true {
            guard position < bytes.count, shift < 64 else { throw LoadProtocolError("a histogram in a driver's report is truncated", code: .malformedReport) }
            let byte = bytes[position]
            position += 1
            value |= UInt64(byte & 0x7F) << shift
            if byte < 0x80 { return value }
            shift += 7
        }
    }

    /// One histogram as `StageHistograms.append` wrote it.
    mutating func histogram() throws(LoadProtocolError) -> Histogram<UInt64> {
        let bucketCount = try take()
        guard bucketCount <= 1 << 20 else { throw LoadProtocolError("a histogram in a driver's report claims \(bucketCount) buckets", code: .limitExceeded) }
        var histogram = StageHistograms.emptyHistogram()
        var value: UInt64 = 0
        for _ in 0..<bucketCount {
            let (sum, overflow) = value.addingReportingOverflow(try take())
            value = sum
            let count = try take()
            guard !overflow, value <= StageHistograms.highestMicroseconds, count > 0,
                  histogram.record(value, count: count) else {
                throw LoadProtocolError("a histogram in a driver's report holds a value out of range", code: .malformedReport)
            }
        }
        return histogram
    }
}
