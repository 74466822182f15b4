/// What a sender had heard when it sent a command: per queue partition (in the topology's order,
/// as `PartitionRouting` numbers them), the last sequence delivered to it, 0 when nothing was.
/// Empty when the runtime cannot tell (a sender that does not report it).
public struct HeardSequences: Sendable, Hashable {
    public var lastDelivered: [UInt64]

    public init(_ lastDelivered: [UInt64] = []) {
        self.lastDelivered = lastDelivered
    }

    public static let unknown = HeardSequences()

    /// At most this many partitions are recorded (a topology has far fewer).
    public static let maximumPartitions = 1_024
}

/// A log unit's input record (log format 3, docs/log-format.md "Input records"): the command the
/// queue handled, as accepted, and what its sender had heard when it sent it. A command that
/// changed nothing leaves its input alone in its unit; a duplicate, and a command refused before its
/// decision, leave only their id.
public struct RecordedInput: Sendable, Hashable {
    public enum Handled: Sendable, Hashable {
        /// Decided: its unit's events (none for a no-op) answer it; a rejection's one event holds it too.
        case command(Command)
        /// Applied before under this id: nothing changed, and the body is not repeated.
        case duplicate(CommandID)
        /// Refused before its decision (a live queue's bounds or its sender's roles): nothing changed. The
        /// mark tells a restarted queue that the number is used, so the sender's next command waits for nothing.
        case refused(CommandID)
    }

    public var handled: Handled
    public var heard: HeardSequences

    public init(_ handled: Handled, heard: HeardSequences) {
        self.handled = handled
        self.heard = heard
    }

    public var commandID: CommandID {
        switch handled {
        case .command(let command): command.id
        case .duplicate(let id), .refused(let id): id
        }
    }

    /// The first byte of every input payload: lets a reader tell an input format from a newer one.
    public static let formatVersion: UInt8 = 1
    private static let commandKind: UInt8 = 1
    private static let duplicateKind: UInt8 = 2
    private static let refusedKind: UInt8 = 3

    /// Appends the input's bytes to `writer`: version, kind, the heard sequences (a count, then one
    /// varint each), then the whole command as on the wire (`EventCodec.encode(_:)`) or, for a
    /// duplicate or a refused command, its origin and number.
    public static func encode(_ handled: Handled, heard: HeardSequences, into writer: inout BinaryWriter) {
        writer.write(formatVersion)
        switch handled {
        case .command: writer.write(commandKind)
        case .duplicate: writer.write(duplicateKind)
        case .refused: writer.write(refusedKind)
        }
        let partitions = heard.lastDelivered.prefix(HeardSequences.maximumPartitions)
        writer.write(varint: UInt64(partitions.count))
        for sequence in partitions { writer.write(varint: sequence) }
        switch handled {
        case .command(let command):
            EventCodec.encode(command, into: &writer)
        case .duplicate(let id), .refused(let id):
            writer.write(id.origin)
            writer.write(varint: id.number)
        }
    }

    public func encoded() -> [UInt8] {
        var writer = BinaryWriter()
        Self.encode(handled, heard: heard, into: &writer)
        return writer.bytes
    }

    public static func decode(_ buffer: UnsafeRawBufferPointer) throws(DecodingFailure) -> RecordedInput {
        var reader = BinaryReader(buffer)
        let version = try reader.readByte()
        guard version == formatVersion else {
            throw reader.failure("input format \(version) is not supported (this build reads input format \(formatVersion)); use a matching sksim")
        }
        let kind = try reader.readByte()
        let count = try EventCodec.readCount(&reader, maximum: HeardSequences.maximumPartitions)
        var heard: [UInt64] = []
        heard.reserveCapacity(count)
        for _ in 0..<count { heard.append(try reader.readVarint()) }
        switch kind {
        case commandKind:
            let start = reader.offset
            let command: Command
            do {
                command = try EventCodec.decodeCommand(UnsafeRawBufferPointer(rebasing: buffer[start...]))
            } catch {
                throw DecodingFailure(offset: start + error.offset, reason: error.reason)
            }
            return RecordedInput(.command(command), heard: HeardSequences(heard))
        case duplicateKind, refusedKind:
            let id = CommandID(origin: try reader.readString(), number: try reader.readVarint())
            guard reader.isAtEnd else { throw reader.failure("trailing bytes after a duplicate's or refused command's input") }
            return RecordedInput(kind == duplicateKind ? .duplicate(id) : .refused(id), heard: HeardSequences(heard))
        default:
            throw reader.failure("unknown input kind \(kind)")
        }
    }

    public static func decode(_ bytes: [UInt8]) throws(DecodingFailure) -> RecordedInput {
        do {
            return try bytes.withUnsafeBytes { buffer in try decode(buffer) }
        } catch let failure as DecodingFailure {
            throw failure
        } catch {
            preconditionFailure("decode throws only DecodingFailure")
        }
    }
}
