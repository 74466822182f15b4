@testable import Bus
import Testing

/// `RecentRecords`, the queue's ring of recent payloads for FETCH: what it keeps is what was appended,
/// byte for byte, and it ages records out by count, by bytes written over, and at a discontinuity.
struct RecentRecordsTests {
    static func record(_ sequence: UInt64, bytes count: Int, device: String? = "device-1") -> BusRecord {
        BusRecord(sequence: sequence, timestamp: Int64(sequence) * 10,
                  payload: (0..<count).map { UInt8(truncatingIfNeeded: Int(sequence) &* 31 &+ $0) }, device: device)
    }

    /// The kept record, as (timestamp, device, payload).
    static func kept(_ recent: RecentRecords, _ sequence: UInt64) -> (Int64, String?, [UInt8])? {
        recent.withRecord(sequence) { timestamp, device, payload in (timestamp, device, Array(payload)) }
    }

    static func expectKept(_ recent: RecentRecords, _ record: BusRecord) {
        let kept = Self.kept(recent, record.sequence)
        #expect(kept?.0 == record.timestamp && kept?.1 == record.device && kept?.2 == record.payload, "record \(record.sequence)")
    }

    @Test("by count: the last `capacity` records are kept, each as appended; older ones are not")
    func agesOutByCount() {
        var recent = RecentRecords(capacity: 4)
        let records = (1...10).map { Self.record($0, bytes: 5 + Int($0)) }
        for record in records { recent.append(record) }
        #expect(recent.oldestSequence == 7)
        for record in records[6...] { Self.expectKept(recent, record) }
        #expect(Self.kept(recent, 6) == nil && Self.kept(recent, 11) == nil)
    }

    @Test("by bytes: a payload never wraps around the ring's end, and a record whose bytes were written over is not kept")
    func agesOutByBytes() {
        // 20-byte payloads in a 64-byte ring: three fit in a lap, the fourth starts the next lap.
        var recent = RecentRecords(capacity: 100, byteCapacity: 64)
        let records = (1...10).map { Self.record($0, bytes: 20) }
        for record in records.prefix(4) { recent.append(record) }
        // The fourth wrote over the first's bytes only.
        #expect(recent.oldestSequence == 2)
        for record in records[1..<4] { Self.expectKept(recent, record) }
        for record in records[4...] { recent.append(record) }
        // Starts 128, 148, 168 and 192 (the 4 bytes before the end of a lap are skipped): 8, 9 and 10 are intact.
        #expect(recent.oldestSequence == 8)
        for record in records[7...] { Self.expectKept(recent, record) }
        #expect(Self.kept(recent, 7) == nil)
    }

    @Test("a record larger than the ring is not kept, and the next one starts a new run; so does a sequence that skips")
    func restartsAfterTooLargeOrSkipped() {
        var recent = RecentRecords(capacity: 16, byteCapacity: 32)
        recent.append(Self.record(1, bytes: 8))
        recent.append(Self.record(2, bytes: 33))
        #expect(recent.oldestSequence == nil && Self.kept(recent, 1) == nil && Self.kept(recent, 2) == nil)
        recent.append(Self.record(3, bytes: 8, device: nil))
        #expect(recent.oldestSequence == 3)
        Self.expectKept(recent, Self.record(3, bytes: 8, device: nil))
        recent.append(Self.record(9, bytes: 4))
        #expect(recent.oldestSequence == 9 && Self.kept(recent, 3) == nil)
        Self.expectKept(recent, Self.record(9, bytes: 4))
    }

    @Test("varied sizes against a model: every kept record is intact, the newest is always kept, and at most `capacity` are")
    func variedSizesAgainstModel() throws {
        var recent = RecentRecords(capacity: 50, byteCapacity: 700)
        var appended: [UInt64: BusRecord] = [:]
        for sequence in UInt64(1)...3_000 {
            // Sizes 0 to 89 in an irregular order, so laps end at every offset.
            let record = Self.record(sequence, bytes: Int((sequence &* 37 &+ sequence / 7 &* 13) % 90))
            recent.append(record)
            appended[sequence] = record
            let oldest = try #require(recent.oldestSequence)
            #expect(sequence - oldest < 50)
            Self.expectKept(recent, record)
            if sequence % 97 == 0 {
                for kept in oldest...sequence { Self.expectKept(recent, appended[kept]!) }
                #expect(Self.kept(recent, oldest - 1) == nil)
            }
        }
    }
}
