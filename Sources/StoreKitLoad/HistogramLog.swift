import CZlib
import Foundation
import Histogram

/// HdrHistogram's interval log format (version 1.3, as `HistogramLogWriter` writes it), so the
/// merged histograms can be read by HdrHistogram's own tools (HistogramLogProcessor, the
/// plotters): one line per interval and stage, `Tag=STAGE,start,length,max,histogram`, the
/// histogram in the V2 compressed encoding (zlib over ZigZag LEB128 counts), base64.
/// Values are microseconds; the max column is in milliseconds (values ÷ 1000).
public struct HistogramLogWriter {
    private var text: String

    public init(startUnixNanoseconds: Int64) {
        let seconds = Double(startUnixNanoseconds) / 1e9
        text = "#[Histogram log format version 1.3]\n"
            + String(format: "#[StartTime: %.3f (seconds since epoch)]\n", seconds)
            + "#[Values in microseconds; Interval_Max in milliseconds]\n"
            + "\"StartTimestamp\",\"Interval_Length\",\"Interval_Max\",\"Interval_Compressed_Histogram\"\n"
    }

    /// The lines written so far (and taken by `take()`).
    public var pending: String { text }

    public mutating func append(tag: String, startSeconds: Double, lengthSeconds: Double, histogram: Histogram<UInt64>) {
        text += String(format: "Tag=%@,%.3f,%.3f,%.3f,", tag, startSeconds, lengthSeconds, Double(histogram.max) / 1_000)
        text += Self.compressedEncoding(histogram).base64EncodedString() + "\n"
    }

    /// Returns the lines written so far and forgets them, so a long run's log goes to disk as it grows.
    public mutating func take() -> String {
        defer { text = "" }
        return text
    }

    // MARK: The V2 encoding

    /// HdrHistogram's counts index of `value` for this project's configuration (lowest 1, 3
    /// significant digits: 2,048 sub-buckets), as `countsArrayIndex` computes it.
    static func countsIndex(_ value: UInt64) -> Int {
        let subBucketHalfCountMagnitude = 10
        let subBucketHalfCount = 1 << subBucketHalfCountMagnitude
        let subBucketMask: UInt64 = 2_047
        let bucketIndex = 53 - (value | subBucketMask).leadingZeroBitCount
        let subBucketIndex = Int(value >> UInt64(bucketIndex))
        return ((bucketIndex + 1) << subBucketHalfCountMagnitude) + (subBucketIndex - subBucketHalfCount)
    }

    static func encoding(_ histogram: Histogram<UInt64>) -> [UInt8] {
        var payload: [UInt8] = []
        func put(_ signed: Int64) {
            var value = UInt64(bitPattern: (signed << 1) ^ (signed >> 63))
            while value >= 0x80 {
                payload.append(UInt8(value & 0x7F) | 0x80)
                value >>= 7
            }
            payload.append(UInt8(value))
        }
        var nextIndex = 0
        for bucket in histogram.recordedValues() {
            let index = countsIndex(bucket.value)
            let zeros = index - nextIndex
            if zeros == 1 { put(0) } else if zeros > 1 { put(-Int64(zeros)) }
            put(Int64(bucket.count))
            nextIndex = index + 1
        }
        var bytes: [UInt8] = []
        func put32(_ value: UInt32) { withUnsafeBytes(of: value.bigEndian) { bytes.append(contentsOf: $0) } }
        func put64(_ value: UInt64) { withUnsafeBytes(of: value.bigEndian) { bytes.append(contentsOf: $0) } }
        put32(0x1C84_9313)  // V2 encoding cookie, word-size nibble 0x10 as Java writes it.
        put32(UInt32(payload.count))
        put32(0)  // normalizing index offset
        put32(3)  // significant digits
        put64(1)  // lowest discernible value
        put64(StageHistograms.highestMicroseconds)
        put64((1.0).bitPattern)  // integer-to-double conversion ratio
        return bytes + payload
    }

    static func compressedEncoding(_ histogram: Histogram<UInt64>) -> Data {
        let plain = encoding(histogram)
        var compressedLength = compressBound(uLong(plain.count))
        var compressed = [UInt8](repeating: 0, count: Int(compressedLength))
        let status = plain.withUnsafeBufferPointer { source in
            compress2(&compressed, &compressedLength, source.baseAddress, uLong(plain.count), Z_DEFAULT_COMPRESSION)
        }
        precondition(status == Z_OK, "zlib compress2 failed with \(status) on a buffer sized by compressBound")
        var bytes: [UInt8] = []
        withUnsafeBytes(of: UInt32(0x1C84_9314).bigEndian) { bytes.append(contentsOf: $0) }
        withUnsafeBytes(of: UInt32(compressedLength).bigEndian) { bytes.append(contentsOf: $0) }
        return Data(bytes + compressed[0..<Int(compressedLength)])
    }
}
