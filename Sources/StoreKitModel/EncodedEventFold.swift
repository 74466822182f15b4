/// Folds encoded events (log payloads) into a `QueueProjection` without building `Event` values:
/// the rebuild of a log's state (`LogProjection.build`), where decoding every event whole and
/// copying it into `apply(_:)` cost most of the time.
///
/// The result is that of `EventCodec.decodeEvent` then `QueueProjection.apply` on every payload,
/// always: the events of a purchase's lifecycle (the most of any log) are read field by field into
/// the projection's own fold steps, their device found by its encoded name and their repeated
/// long strings (product and content identifiers) made once; every other event, and any payload
/// this path does not take whole (an unknown device, anything malformed), is decoded and applied
/// the plain way, which also throws the plain way's error. The direct path reads a whole payload
/// before it changes anything, so falling back is always possible.
public struct EncodedEventFold: Sendable {
    public private(set) var projection: QueueProjection
    private var devices = EncodedDeviceIndex()
    private var strings = StringInterner()
    /// The last command origin read, with its bytes: a log's events come from a few senders.
    private var originBytes: [UInt8] = []
    private var origin = ""

    public init(projection: QueueProjection = QueueProjection()) {
        self.projection = projection
    }

    /// Applies one event payload, as `projection.apply(RecordedEvent(sequence:timestamp:…))` of
    /// its decoding would; throws what `EventCodec.decodeEvent` throws for it.
    public mutating func apply(sequence: UInt64, timestamp: Int64, payload: UnsafeRawBufferPointer) throws(DecodingFailure) {
        if applyDirectly(sequence: sequence, timestamp: timestamp, payload: payload) { return }
        let decoded = try EventCodec.decodeEvent(payload)
        projection.apply(RecordedEvent(sequence: sequence, timestamp: timestamp, commandID: decoded.commandID, event: decoded.event))
    }

    /// True when the payload was read and applied here; false (the projection unchanged) for the plain path.
    private mutating func applyDirectly(sequence: UInt64, timestamp: Int64, payload: UnsafeRawBufferPointer) -> Bool {
        var reader = BinaryReader(payload)
        do {
            guard try reader.readByte() == EventCodec.formatVersion else { return false }
            var commandID: CommandID?
            if try reader.readBool() {
                let bytes = try reader.readStringBytes()
                let number = try reader.readVarint()
                guard let origin = commandOrigin(bytes) else { return false }
                commandID = CommandID(origin: origin, number: number)
            }
            guard let tag = EventTag(rawValue: try reader.readByte()) else { return false }
            switch tag {
            case .appLaunched:
                let device = try reader.readStringBytes()
                guard reader.isAtEnd, let slot = deviceSlot(device) else { return false }
                projection.noteEvent(sequence: sequence, commandID: commandID)
                projection.launchApp(device: slot)
            case .observerAttached:
                let device = try reader.readStringBytes()
                let observer = try readString(&reader)
                guard reader.isAtEnd, let slot = deviceSlot(device) else { return false }
                projection.noteEvent(sequence: sequence, commandID: commandID)
                projection.attachObserver(device: slot, observer)
            case .transactionAdded:
                let device = try reader.readStringBytes()
                let number = try reader.readVarint()
                let payment = try readPayment(&reader)
                guard reader.isAtEnd, let slot = deviceSlot(device) else { return false }
                projection.noteEvent(sequence: sequence, commandID: commandID)
                projection.addTransaction(device: slot, TransactionKey(device: projection.deviceName(at: slot), number: number), payment)
            case .transactionDeferred:
                let device = try reader.readStringBytes()
                let number = try reader.readVarint()
                guard reader.isAtEnd, let slot = deviceSlot(device) else { return false }
                projection.noteEvent(sequence: sequence, commandID: commandID)
                projection.deferTransaction(device: slot, number: number)
            case .transactionPurchased:
                let device = try reader.readStringBytes()
                let number = try reader.readVarint()
                let identifier = try readUniqueString(&reader)
                let contents = try readContents(&reader)
                let charged = try reader.readBool()
                guard reader.isAtEnd, let slot = deviceSlot(device) else { return false }
                projection.noteEvent(sequence: sequence, commandID: commandID)
                projection.purchaseTransaction(device: slot, TransactionKey(device: projection.deviceName(at: slot), number: number),
                                               identifier: identifier, date: timestamp, contents: contents, charged: charged)
            case .transactionFailed:
                let device = try reader.readStringBytes()
                let number = try reader.readVarint()
                let error = try EventCodec.readError(&reader)
                guard reader.isAtEnd, let slot = deviceSlot(device) else { return false }
                projection.noteEvent(sequence: sequence, commandID: commandID)
                projection.failTransaction(device: slot, number: number, error: error)
            case .transactionFinished:
                let device = try reader.readStringBytes()
                let number = try reader.readVarint()
                guard reader.isAtEnd, let slot = deviceSlot(device) else { return false }
                projection.noteEvent(sequence: sequence, commandID: commandID)
                projection.finishTransaction(device: slot, number: number)
            case .downloadStarted, .downloadProgressed, .downloadPaused, .downloadResumed, .downloadFinished, .downloadFailed, .downloadCancelled:
                let device = try reader.readStringBytes()
                let number = try reader.readVarint()
                let index = try EventCodec.readDownloadIndex(&reader)
                let change: QueueProjection.DownloadChange
                switch tag {
                case .downloadStarted: change = .started
                case .downloadProgressed: change = .progressed(progress: try reader.readDouble(), timeRemaining: try reader.readDouble())
                case .downloadPaused: change = .paused
                case .downloadResumed: change = .resumed
                case .downloadFinished: change = .finished(contentURL: try readUniqueString(&reader))
                case .downloadFailed: change = .failed(try EventCodec.readError(&reader))
                default: change = .cancelled
                }
                guard reader.isAtEnd, let slot = deviceSlot(device) else { return false }
                projection.noteEvent(sequence: sequence, commandID: commandID)
                let key = DownloadKey(transaction: TransactionKey(device: projection.deviceName(at: slot), number: number), index: index)
                projection.changeDownload(device: slot, key, change)
            case .appActionRecorded:  // the queue's fold only counts it
                guard try skipAppAction(&reader), reader.isAtEnd else { return false }
                projection.noteEvent(sequence: sequence, commandID: commandID)
            default:
                return false
            }
            return true
        } catch {
            return false
        }
    }

    // MARK: Parts, read as `EventCodec` reads them (the same checks), strings made once where they repeat

    /// The registered device with this encoded name; nil (the plain path) for an unknown one.
    private mutating func deviceSlot(_ bytes: UnsafeBufferPointer<UInt8>) -> Int? {
        if let slot = devices.slot(of: bytes) { return slot }
        guard let name = BinaryReader.string(bytes), let slot = projection.slot(of: name) else { return nil }
        devices.insert(bytes, slot: slot)
        return slot
    }

    private mutating func commandOrigin(_ bytes: UnsafeBufferPointer<UInt8>) -> String? {
        if originBytes.withUnsafeBufferPointer({ StringInterner.equal($0, bytes) }) { return origin }
        guard let string = BinaryReader.string(bytes) else { return nil }
        originBytes = Array(bytes)
        origin = string
        return string
    }

    private mutating func readString(_ reader: inout BinaryReader) throws(DecodingFailure) -> String {
        let bytes = try reader.readStringBytes()
        guard let string = strings.string(bytes) else { throw reader.failure("string is not valid UTF-8") }
        return string
    }

    /// A string that rarely repeats (a transaction identifier, a content URL): made, not looked up.
    private func readUniqueString(_ reader: inout BinaryReader) throws(DecodingFailure) -> String {
        let bytes = try reader.readStringBytes()
        guard let string = BinaryReader.string(bytes) else { throw reader.failure("string is not valid UTF-8") }
        return string
    }

    private mutating func readPayment(_ reader: inout BinaryReader) throws(DecodingFailure) -> Payment {
        let product = try readString(&reader)
        let quantity = try reader.readInt()
        let username = try reader.readBool() ? try readString(&reader) : nil
        return try EventCodec.readPayment(&reader, product: product, quantity: quantity, username: username)
    }

    private mutating func readContents(_ reader: inout BinaryReader) throws(DecodingFailure) -> [HostedContent] {
        let count = try EventCodec.readCount(&reader, maximum: EventCodec.maximumContents)
        guard count > 0 else { return [] }
        var contents: [HostedContent] = []
        contents.reserveCapacity(count)
        for _ in 0..<count {
            contents.append(HostedContent(contentIdentifier: try readString(&reader), contentLength: try reader.readSigned(),
                                          contentVersion: try readString(&reader)))
        }
        return contents
    }

    /// Reads an app action without keeping it (the queue's fold ignores it), with every check
    /// `EventCodec` makes: its strings must be UTF-8 all the same.
    private func skipAppAction(_ reader: inout BinaryReader) throws(DecodingFailure) -> Bool {
        func skipString() throws(DecodingFailure) -> Bool { BinaryReader.isValidUTF8(try reader.readStringBytes()) }
        switch AppActionTag(rawValue: try reader.readByte()) {
        case .contentGranted:  // key, observer, product
            guard try skipString() else { return false }
            _ = try reader.readVarint()
            guard try skipString() else { return false }
            return try skipString()
        case .contentKept:  // download key, observer
            guard try skipString() else { return false }
            _ = try reader.readVarint()
            _ = try EventCodec.readDownloadIndex(&reader)
            return try skipString()
        case .restoreShownDone:  // device, restore, observer
            guard try skipString() else { return false }
            _ = try reader.readVarint()
            return try skipString()
        case .failureShown:  // key, observer
            guard try skipString() else { return false }
            _ = try reader.readVarint()
            return try skipString()
        case .transactionReported:  // key, observer, report
            guard try skipString() else { return false }
            _ = try reader.readVarint()
            guard try skipString() else { return false }
            _ = try reader.readByte()
            return true
        case nil:
            return false
        }
    }
}

/// Registered devices found by their encoded names: the bytes are compared, never made into a
/// string or hashed as one. Holds one entry per device the fold met (as many as the projection holds).
struct EncodedDeviceIndex: Sendable {
    /// Every name's bytes, one after another.
    private var names: [UInt8] = []
    private var entries: [(start: Int, count: Int, slot: Int)] = []
    /// Open addressing: entry index + 1 (0 is empty), at most half full.
    private var table = [Int32](repeating: 0, count: 64)
    /// The entry found last: a purchase's events follow one another on one device.
    private var last = -1

    mutating func slot(of bytes: UnsafeBufferPointer<UInt8>) -> Int? {
        if last >= 0, matches(last, bytes) { return entries[last].slot }
        let mask = table.count - 1
        var position = Int(truncatingIfNeeded: StringInterner.hash(bytes)) & mask
        while true {
            let entry = Int(table[position]) - 1
            if entry < 0 { return nil }
            if matches(entry, bytes) {
                last = entry
                return entries[entry].slot
            }
            position = (position + 1) & mask
        }
    }

    mutating func insert(_ bytes: UnsafeBufferPointer<UInt8>, slot: Int) {
        if (entries.count + 1) * 2 > table.count { grow() }
        entries.append((names.count, bytes.count, slot))
        names.append(contentsOf: bytes)
        place(entries.count - 1, hash: StringInterner.hash(bytes))
    }

    private mutating func place(_ entry: Int, hash: UInt64) {
        let mask = table.count - 1
        var position = Int(truncatingIfNeeded: hash) & mask
        while table[position] != 0 { position = (position + 1) & mask }
        table[position] = Int32(entry + 1)
    }

    private mutating func grow() {
        table = [Int32](repeating: 0, count: table.count * 2)
        for entry in entries.indices {
            let hash = names.withUnsafeBufferPointer { all in
                StringInterner.hash(UnsafeBufferPointer(rebasing: all[entries[entry].start..<(entries[entry].start + entries[entry].count)]))
            }
            place(entry, hash: hash)
        }
    }

    @inline(__always)
    private func matches(_ entry: Int, _ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        let (start, count, _) = entries[entry]
        guard count == bytes.count else { return false }
        return names.withUnsafeBufferPointer { all in
            StringInterner.equal(UnsafeBufferPointer(rebasing: all[start..<(start + count)]), bytes)
        }
    }
}

/// Strings made once for the bytes they repeat: a product or content identifier, an account or a
/// version appears in many events. A string of 16 bytes or more is allocated each time it is made,
/// and a shorter one is checked and copied; a string found here is neither. A direct-mapped table
/// of fixed size, so memory is bounded whatever the log holds; longer strings are made every time.
struct StringInterner: Sendable {
    private static let slots = 4_096
    private static let longestKept = 64
    private var hashes = [UInt64](repeating: 0, count: StringInterner.slots)
    private var kept = [String](repeating: "", count: StringInterner.slots)

    /// The string of these bytes, or nil when they are not valid UTF-8.
    @inline(__always)
    mutating func string(_ bytes: UnsafeBufferPointer<UInt8>) -> String? {
        guard bytes.count <= Self.longestKept else { return BinaryReader.string(bytes) }
        let hash = Self.hash(bytes)
        let slot = Int(truncatingIfNeeded: hash) & (Self.slots - 1)
        if hashes[slot] == hash, Self.equals(kept[slot], bytes) { return kept[slot] }
        guard let string = BinaryReader.string(bytes) else { return nil }
        hashes[slot] = hash
        kept[slot] = string
        return string
    }

    @inline(__always)
    private static func equals(_ string: String, _ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        var string = string
        return string.withUTF8 { stored in equal(stored, bytes) }
    }

    /// Byte-wise equality, eight bytes at a time: names and identifiers are short, and a call to
    /// `memcmp` for each costs more than comparing them here.
    @inline(__always)
    static func equal(_ first: UnsafeBufferPointer<UInt8>, _ second: UnsafeBufferPointer<UInt8>) -> Bool {
        guard first.count == second.count else { return false }
        guard let left = first.baseAddress, let right = second.baseAddress else { return true }
        let count = first.count
        var index = 0
        while index + 8 <= count {
            if UnsafeRawPointer(left + index).loadUnaligned(as: UInt64.self) != UnsafeRawPointer(right + index).loadUnaligned(as: UInt64.self) {
                return false
            }
            index += 8
        }
        while index < count {
            if left[index] != right[index] { return false }
            index += 1
        }
        return true
    }

    /// A fast, well-mixing hash of a short byte string. Not keyed: names that collide on purpose
    /// only make the lookups of their own log slower.
    @inline(__always)
    static func hash(_ bytes: UnsafeBufferPointer<UInt8>) -> UInt64 {
        var hash: UInt64 = 0x9E37_79B9_7F4A_7C15 ^ UInt64(bytes.count)
        guard let base = bytes.baseAddress else { return hash }
        let raw = UnsafeRawPointer(base)
        var index = 0
        while index + 8 <= bytes.count {
            hash = (hash ^ raw.loadUnaligned(fromByteOffset: index, as: UInt64.self)) &* 0xFF51_AFD7_ED55_8CCD
            hash ^= hash >> 32
            index += 8
        }
        var tail: UInt64 = 0
        var shift: UInt64 = 0
        while index < bytes.count {
            tail |= UInt64(base[index]) << shift
            shift += 8
            index += 1
        }
        hash = (hash ^ tail) &* 0xC4CE_B9FE_1A85_EC53
        return hash ^ (hash >> 29)
    }
}
