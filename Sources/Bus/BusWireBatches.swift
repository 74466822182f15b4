#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import StoreKitModel
import ZeroMQ

/// Wire version 2 (docs/wire-format.md, "Version 2: batches"): many commands in one request
/// (`CMDS`), their answers in one reply (`ACKS`), and the events of one publishing round in one
/// message on the `all` topic. Version 1 stays: a queue answers each request in the version it came
/// in, so a client chooses per request, after the `HELLO` handshake told it what the queue speaks.
/// Fewer, larger messages cost fewer socket operations and libzmq frames per lifecycle.
extension BusWire {
    /// The wire versions this build speaks, ascending: what a `HELLO` reply lists.
    public static let supportedVersions: [UInt8] = [1, 2]
    /// The version of batch bodies (their first byte).
    public static let batchVersion: UInt8 = 2
    /// Topic of the version-2 event batches; its subscribers hear every event of the partition.
    public static let batchedEventsTopic: [UInt8] = Array("all".utf8)
    /// Largest `CMDS` body: a command that does not fit in an empty batch goes alone, as `CMD`.
    public static let maximumCommandBatchBytes = 65_536
    /// Most commands in one `CMDS`.
    public static let maximumCommandsPerBatch = 1_024
    /// Most answers in one `ACKS`, and about the most bytes (the entry that crosses it is the last).
    public static let maximumAcknowledgementsPerBatch = 4_096
    public static let maximumAcknowledgementBatchBytes = 256 << 10
    /// Most records in one event batch, and about the most payload bytes (at least one record).
    public static let maximumRecordsPerEventBatch = 4_096
    public static let maximumEventBatchBytes = 256 << 10

    /// The newest version the Swift clients offer: 2, or 1 when the environment sets
    /// `SKSIM_WIRE_VERSION=1` (to measure version 1 beside version 2, as `sksim bench bus --wire-version` does).
    public static var clientWireVersion: UInt8 {
        guard let value = getenv("SKSIM_WIRE_VERSION"), String(cString: value) == "1" else { return 2 }
        return 1
    }

    // MARK: HELLO

    /// The `HELLO` reply's body: the supported versions.
    static func decodeHelloVersions(_ body: UnsafeRawBufferPointer) throws(WireFailure) -> [UInt8] {
        guard !body.isEmpty, body.count <= 16, zip(body, body.dropFirst()).allSatisfy({ $0 < $1 }) else {
            throw WireFailure(.malformedBody, "HELLO lists no versions, or they do not ascend")
        }
        return Array(body)
    }

    // MARK: CMDS

    /// Appends one command payload (EventCodec bytes) to a `CMDS` body that `startBatch` began.
    static func appendBatchEntry(_ payload: [UInt8], to body: inout BinaryWriter) {
        body.write(payload)
    }

    /// The bytes a payload adds to a batch body.
    static func batchEntryByteCount(_ payload: [UInt8]) -> Int {
        varintByteCount(UInt64(payload.count)) + payload.count
    }

    /// Calls `each` with every command payload of a `CMDS` body, in order, borrowed from `body`, and
    /// what the optional report frame says of it (`SenderReport.unknown` without one). Throws before
    /// calling `each` at all when the body's or the report's framing is wrong, so a malformed batch
    /// has no effect.
    static func forEachBatchedCommand(_ body: UnsafeRawBufferPointer, report: UnsafeRawBufferPointer? = nil,
                                      _ each: (UnsafeRawBufferPointer, SenderReport) -> Void) throws(WireFailure) {
        var entries: [Range<Int>] = []
        do {
            var reader = BinaryReader(body)
            let version = try reader.readByte()
            guard version == batchVersion else {
                throw WireFailure(.unsupportedVersion, "CMDS body version \(version) is not supported (this build speaks \(batchVersion))")
            }
            let count = try reader.readVarint()
            guard count >= 1, count <= UInt64(maximumCommandsPerBatch) else {
                throw WireFailure(.malformedBody, "CMDS holds \(count) commands; 1 to \(maximumCommandsPerBatch) are allowed")
            }
            entries.reserveCapacity(Int(count))
            for _ in 0..<count {
                let bytes = try reader.readStringBytes()
                let start = reader.offset - bytes.count
                entries.append(start..<(start + bytes.count))
            }
            guard reader.isAtEnd else { throw WireFailure(.malformedBody, "CMDS body has bytes after its last command") }
        } catch let failure as WireFailure {
            throw failure
        } catch {
            throw WireFailure(.malformedBody, "CMDS body: \(error)")
        }
        guard let report else {
            for entry in entries { each(UnsafeRawBufferPointer(rebasing: body[entry]), .unknown) }
            return
        }
        let reports = try decodeSenderReport(report, commandCount: entries.count)
        var next = 0
        for run in reports.runs {
            let sent = SenderReport(heard: run.heard, lowestUnanswered: reports.lowestUnanswered)
            for _ in 0..<run.count {
                each(UnsafeRawBufferPointer(rebasing: body[entries[next]]), sent)
                next += 1
            }
        }
    }

    // MARK: Sender reports

    /// Largest report frame a queue takes (and a sender writes): a sender that heard from more
    /// partitions than fit reports no heard sequences.
    public static let maximumSenderReportBytes = 4_096

    /// A `CMDS` report frame: the lowest unanswered number (0: not said), the partition count P, then,
    /// when P > 0, runs that cover the batch's commands in order, each a count and P heard sequences.
    struct SenderReportFrame: Equatable {
        struct Run: Equatable {
            var count: Int
            var heard: HeardSequences
        }

        var lowestUnanswered: UInt64?
        var runs: [Run]
    }

    static func decodeSenderReport(_ frame: UnsafeRawBufferPointer, commandCount: Int) throws(WireFailure) -> SenderReportFrame {
        guard frame.count <= maximumSenderReportBytes else {
            throw WireFailure(.malformedBody, "CMDS report of \(frame.count) bytes exceeds \(maximumSenderReportBytes) bytes")
        }
        do {
            var reader = BinaryReader(frame)
            let lowest = try reader.readVarint()
            let partitionCount = try reader.readVarint()
            guard partitionCount <= UInt64(HeardSequences.maximumPartitions) else {
                throw WireFailure(.malformedBody, "CMDS report names \(partitionCount) partitions; at most \(HeardSequences.maximumPartitions) are allowed")
            }
            let partitions = Int(partitionCount)
            var runs: [SenderReportFrame.Run] = []
            if partitions == 0 {
                runs.append(.init(count: commandCount, heard: .unknown))
            } else {
                var covered = 0
                while covered < commandCount {
                    let count = try reader.readVarint()
                    guard count >= 1, count <= UInt64(commandCount - covered) else {
                        throw WireFailure(.malformedBody, "CMDS report covers commands past the batch's \(commandCount) (a run of \(count) after \(covered))")
                    }
                    var heard: [UInt64] = []
                    heard.reserveCapacity(partitions)
                    for _ in 0..<partitions { heard.append(try reader.readVarint()) }
                    runs.append(.init(count: Int(count), heard: HeardSequences(heard)))
                    covered += Int(count)
                }
            }
            guard reader.isAtEnd else { throw WireFailure(.malformedBody, "CMDS report has bytes after its last run") }
            return SenderReportFrame(lowestUnanswered: lowest == 0 ? nil : lowest, runs: runs)
        } catch let failure as WireFailure {
            throw failure
        } catch {
            throw WireFailure(.malformedBody, "CMDS report: \(error)")
        }
    }

    // MARK: ACKS

    /// Appends one answer to an `ACKS` body: status byte, commandID?, last sequence varint, message string.
    static func appendAcknowledgementEntry(_ acknowledgement: CommandAcknowledgement, to body: inout BinaryWriter) {
        body.write(acknowledgement.status.rawValue)
        if let commandID = acknowledgement.commandID {
            body.write(true)
            body.write(commandID.origin)
            body.write(varint: commandID.number)
        } else {
            body.write(false)
        }
        body.write(varint: acknowledgement.lastSequence)
        body.write(acknowledgement.message)
    }

    /// The answers of an `ACKS` body, in order.
    public static func decodeAcknowledgements(_ body: UnsafeRawBufferPointer) throws(WireFailure) -> [CommandAcknowledgement] {
        do {
            var reader = BinaryReader(body)
            let version = try reader.readByte()
            guard version == batchVersion else {
                throw WireFailure(.unsupportedVersion, "ACKS body version \(version) is not supported (this build speaks \(batchVersion))")
            }
            let count = try reader.readVarint()
            guard count >= 1, count <= UInt64(maximumAcknowledgementsPerBatch) else {
                throw WireFailure(.malformedBody, "ACKS holds \(count) answers; 1 to \(maximumAcknowledgementsPerBatch) are allowed")
            }
            var acknowledgements: [CommandAcknowledgement] = []
            acknowledgements.reserveCapacity(Int(count))
            for _ in 0..<count {
                let statusByte = try reader.readByte()
                guard let status = AcknowledgementStatus(rawValue: statusByte) else {
                    throw WireFailure(.malformedBody, "ACKS status \(statusByte) is unknown")
                }
                let commandID = try reader.readBool() ? CommandID(origin: try reader.readString(), number: try reader.readVarint()) : nil
                let lastSequence = try reader.readVarint()
                let message = try reader.readString()
                acknowledgements.append(CommandAcknowledgement(status: status, commandID: commandID, lastSequence: lastSequence, message: message))
            }
            guard reader.isAtEnd else { throw WireFailure(.malformedBody, "ACKS body has bytes after its last answer") }
            return acknowledgements
        } catch let failure as WireFailure {
            throw failure
        } catch {
            throw WireFailure(.malformedBody, "ACKS body: \(error)")
        }
    }

    // MARK: Event batches

    /// Appends one record to an event batch body: sequence varint, timestamp signed, device string
    /// (empty for a device-less event), payload bytes.
    static func appendBatchedRecord(_ record: BusRecord, to body: inout BinaryWriter) {
        body.write(varint: record.sequence)
        body.write(signed: record.timestamp)
        body.write(record.device ?? "")
        body.write(record.payload)
    }

    /// The records of an event batch body, ascending by sequence.
    public static func decodeEventBatch(_ body: UnsafeRawBufferPointer) throws(WireFailure) -> [BusRecord] {
        do {
            var reader = BinaryReader(body)
            let version = try reader.readByte()
            guard version == batchVersion else {
                throw WireFailure(.unsupportedVersion, "event batch version \(version) is not supported (this build speaks \(batchVersion))")
            }
            let count = try reader.readVarint()
            guard count >= 1, count <= UInt64(maximumRecordsPerEventBatch) else {
                throw WireFailure(.malformedBody, "event batch holds \(count) records; 1 to \(maximumRecordsPerEventBatch) are allowed")
            }
            var records: [BusRecord] = []
            records.reserveCapacity(Int(count))
            for _ in 0..<count {
                let sequence = try reader.readVarint()
                let timestamp = try reader.readSigned()
                let device = try reader.readString()
                let payload = try reader.readBytes()
                if let previous = records.last, sequence <= previous.sequence {
                    throw WireFailure(.malformedBody, "event batch sequences do not ascend (\(sequence) after \(previous.sequence))")
                }
                records.append(BusRecord(sequence: sequence, timestamp: timestamp, payload: payload, device: device.isEmpty ? nil : device))
            }
            guard reader.isAtEnd else { throw WireFailure(.malformedBody, "event batch has bytes after its last record") }
            return records
        } catch let failure as WireFailure {
            throw failure
        } catch {
            throw WireFailure(.malformedBody, "event batch: \(error)")
        }
    }

    static func varintByteCount(_ value: UInt64) -> Int {
        var count = 1
        var remaining = value >> 7
        while remaining > 0 {
            count += 1
            remaining >>= 7
        }
        return count
    }
}

/// A `CMDS` report frame being composed beside its batch: one run per change of what the sender had
/// heard, so a batch sent between two deliveries costs one run.
struct SenderReportComposer {
    private(set) var runs: [(count: Int, heard: [UInt64])] = []
    /// The bytes the runs take, for the frame's bound.
    private(set) var byteCount = 0

    /// The bytes `heard` would add as a new run (0 when it extends the last one).
    func addedBytes(_ heard: [UInt64]) -> Int {
        if let last = runs.last, last.heard == heard { return 0 }
        return 10 + heard.reduce(0) { $0 + BusWire.varintByteCount($1) }
    }

    mutating func add(_ heard: [UInt64]) {
        if let last = runs.last, last.heard == heard {
            runs[runs.count - 1].count += 1
            return
        }
        byteCount += addedBytes(heard)
        runs.append((1, heard))
    }

    /// Appends the finished frame to `message` and empties the composer. Runs of differing partition
    /// counts cannot share a frame: the sender's heard sequences are then reported as unknown.
    mutating func finish(lowestUnanswered: UInt64, into message: inout OutgoingMessage) {
        var writer = BinaryWriter(capacity: 16 + byteCount)
        writer.write(varint: lowestUnanswered)
        let partitions = runs.first?.heard.count ?? 0
        if partitions > 0, runs.allSatisfy({ $0.heard.count == partitions }) {
            writer.write(varint: UInt64(partitions))
            for run in runs {
                writer.write(varint: UInt64(run.count))
                for sequence in run.heard { writer.write(varint: sequence) }
            }
        } else {
            writer.write(varint: 0)
        }
        message.appendFrame(writer.bytes)
        runs.removeAll(keepingCapacity: true)
        byteCount = 0
    }
}

/// A batch body being composed: a version byte and count in front of the entries, written once
/// the entries are known (the count is a varint, so its size is known only then).
struct BatchComposer {
    private(set) var entries = BinaryWriter(capacity: 4_096)
    private(set) var count = 0

    var isEmpty: Bool { count == 0 }
    var byteCount: Int { entries.bytes.count }

    mutating func add(_ write: (inout BinaryWriter) -> Void) {
        write(&entries)
        count += 1
    }

    /// Appends the finished body (version, count, entries) as one frame of `message`, and empties the composer.
    mutating func finish(into message: inout OutgoingMessage) {
        let count = count
        message.appendFrame { bytes in
            bytes.append(BusWire.batchVersion)
            var remaining = UInt64(count)
            while remaining >= 0x80 {
                bytes.append(UInt8(truncatingIfNeeded: remaining) | 0x80)
                remaining >>= 7
            }
            bytes.append(UInt8(remaining))
            bytes.append(contentsOf: entries.bytes)
        }
        entries.removeAll()
        self.count = 0
    }
}
