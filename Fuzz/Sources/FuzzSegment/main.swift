import EventLog
import FuzzSupport
import Foundation
import StoreKitModel
import StoreKitRuntime

/// A log segment file as `sksim log verify` (`LogMaintenance.verify` with the event check), readers
/// (`PartitionReader`, `LogProjection.decode`) and recovery (`PartitionWriter` opening the partition,
/// which truncates a torn tail) read it. The input is the first segment of partition `queue`.
///
/// Every header and record carries a CRC32C, which random mutation almost never gets right, so
/// most inputs would stop at the first checksum. For half the inputs (odd length) the harness
/// first recomputes every checksum along the record chain (docs/log-format.md), so lengths, flags,
/// sequences, seals and payloads are fuzzed behind valid checksums.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzSegment(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    var bytes = Array(UnsafeBufferPointer(start: data, count: size))
    if size % 2 == 1 { fixChecksums(&bytes) }
    let directory = FuzzInput.freshDirectory("log")
    let partition = directory.appendingPathComponent("queue", isDirectory: true)
    try! FileManager.default.createDirectory(at: partition, withIntermediateDirectories: true)
    try! Data(bytes).write(to: partition.appendingPathComponent("00000000000000000001.segment"))
    _ = try? LogMaintenance.verify(directory: directory) { payload in
        (try? EventCodec.decodeEvent(payload)) == nil ? "not an event" : nil
    }
    if let reader = try? PartitionReader(directory: directory, partition: "queue") {
        _ = try? reader.forEachRecord { record in
            _ = try? LogProjection.decode(sequence: record.sequence, timestamp: record.timestampNanoseconds, payload: record.payload)
        }
    }
    if let writer = try? PartitionWriter(directory: directory, partition: "queue") {
        try? writer.close()
    }
    return 0
}

@_cdecl("FuzzSegment_main")
func entryPoint(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> CInt {
    runFuzzer(argc, argv) { data, size in fuzzSegment(data!, size) }
}

/// Rewrites the header's and each record's CRC32C (little-endian) to match their bytes.
func fixChecksums(_ bytes: inout [UInt8]) {
    func load32(_ offset: Int) -> UInt32 { (0..<4).reduce(0) { $0 | UInt32(bytes[offset + $1]) << (8 * $1) } }
    func store32(_ value: UInt32, _ offset: Int) { for index in 0..<4 { bytes[offset + index] = UInt8(truncatingIfNeeded: value >> (8 * index)) } }
    guard bytes.count >= 12 else { return }
    let nameLength = Int(bytes[10]) | Int(bytes[11]) << 8
    var offset = 24 + nameLength
    guard offset + 4 <= bytes.count else { return }
    store32(CRC32C.checksum(bytes[0..<offset]), offset)
    offset += 4
    while offset + 24 <= bytes.count {
        let length = Int(load32(offset + 4) & ((1 << 29) - 1))
        guard offset + 24 + length <= bytes.count else { return }
        store32(CRC32C.checksum(bytes[(offset + 4)..<(offset + 24 + length)]), offset)
        offset += 24 + length
    }
}
