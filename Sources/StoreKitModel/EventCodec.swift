/// The versioned binary encoding of events (log payloads and bus frames) and commands
/// (bus frames). Layout is documented in docs/log-format.md; tags and field order
/// are part of the format: append new cases with new tags, never renumber.
public enum EventCodec {
    /// The first byte of every encoded event or command. Version 2: the run header, whole
    /// bodies of rejected commands, restores in pieces.
    public static let formatVersion: UInt8 = 2

    // MARK: Events

    public static func encode(_ event: Event, commandID: CommandID?, into writer: inout BinaryWriter) {
        writer.write(formatVersion)
        writeCommandID(commandID, into: &writer)
        switch event {
        case .runStarted(let header):
            writer.write(tag: 1); writer.write(varint: header.seed); writer.write(header.sksimVersion)
            writer.write(header.runtime); writer.write(signed: header.startedAtUnixNanoseconds)
            writer.write(header.scenario); writer.write(header.catalogSource); writer.write(header.catalogDigest)
            writer.write(header.catalog)
        case .deviceRegistered(let device, let account):
            writer.write(tag: 2); writer.write(device); writer.write(account)
        case .appLaunched(let device):
            writer.write(tag: 3); writer.write(device)
        case .appTerminated(let device):
            writer.write(tag: 4); writer.write(device)
        case .observerAttached(let device, let observer):
            writer.write(tag: 5); writer.write(device); writer.write(observer)
        case .observerDetached(let device, let observer):
            writer.write(tag: 6); writer.write(device); writer.write(observer)
        case .paymentsAllowedChanged(let device, let allowed):
            writer.write(tag: 7); writer.write(device); writer.write(allowed)
        case .transactionAdded(let key, let payment):
            // Tag 36 only for a payment with a discount (F-O5): every other log keeps its bytes.
            writer.write(tag: payment.discount == nil ? 8 : 36); writeKey(key, into: &writer); writePaymentWithDiscount(payment, into: &writer)
        case .transactionDeferred(let key):
            writer.write(tag: 9); writeKey(key, into: &writer)
        case .transactionPurchased(let key, let identifier, let downloads, let charged):
            writer.write(tag: 10); writeKey(key, into: &writer); writer.write(identifier)
            writeContents(downloads, into: &writer); writer.write(charged)
        case .transactionFailed(let key, let error):
            writer.write(tag: 11); writeKey(key, into: &writer); writeError(error, into: &writer)
        case .restoreStarted(let device, let restore, let applicationUsername):
            writer.write(tag: 12); writer.write(device); writer.write(varint: restore); writer.write(optional: applicationUsername)
        case .transactionRestored(let key, let restore, let identifier, let original, let downloads):
            writer.write(tag: 13); writeKey(key, into: &writer); writer.write(varint: restore); writer.write(identifier)
            writeOriginal(original, into: &writer); writeContents(downloads, into: &writer)
        case .restoreFinished(let device, let restore):
            writer.write(tag: 14); writer.write(device); writer.write(varint: restore)
        case .restoreFailed(let device, let restore, let error):
            writer.write(tag: 15); writer.write(device); writer.write(varint: restore); writeError(error, into: &writer)
        case .transactionFinished(let key):
            writer.write(tag: 16); writeKey(key, into: &writer)
        case .downloadStarted(let key):
            writer.write(tag: 17); writeDownloadKey(key, into: &writer)
        case .downloadProgressed(let key, let progress, let timeRemaining):
            writer.write(tag: 18); writeDownloadKey(key, into: &writer); writer.write(progress); writer.write(timeRemaining)
        case .downloadPaused(let key):
            writer.write(tag: 19); writeDownloadKey(key, into: &writer)
        case .downloadResumed(let key):
            writer.write(tag: 20); writeDownloadKey(key, into: &writer)
        case .downloadFinished(let key, let contentURL):
            writer.write(tag: 21); writeDownloadKey(key, into: &writer); writer.write(contentURL)
        case .downloadFailed(let key, let error):
            writer.write(tag: 22); writeDownloadKey(key, into: &writer); writeError(error, into: &writer)
        case .downloadCancelled(let key):
            writer.write(tag: 23); writeDownloadKey(key, into: &writer)
        case .commandRejected(let command, let rejection):
            writer.write(tag: 24); writeCommandBody(command, into: &writer)
            writer.write(rejection.code.rawValue); writer.write(rejection.message)
        case .appActionRecorded(let action):
            writer.write(tag: 25); writeAppAction(action, into: &writer)
        case .askToBuyDeclined(let key):
            writer.write(tag: 26); writeKey(key, into: &writer)
        case .subscriptionRenewed(let key, let identifier, let original, let contents):
            writer.write(tag: 27); writeKey(key, into: &writer); writer.write(identifier)
            writeOriginal(original, into: &writer); writeContents(contents, into: &writer)
        case .subscriptionExpired(let device, let original):
            writer.write(tag: 28); writer.write(device); writeOriginal(original, into: &writer)
        case .entitlementsRevoked(let device, let original):
            writer.write(tag: 29); writer.write(device); writeOriginal(original, into: &writer)
        case .interruptedPurchaseResumed(let key, let interrupted):
            writer.write(tag: 30); writeKey(key, into: &writer); writeKey(interrupted, into: &writer)
        case .subscriptionBillingRetry(let device, let original, let grace):
            writer.write(tag: 31); writer.write(device); writeOriginal(original, into: &writer); writer.write(signed: grace)
        case .transactionsCleared(let device):
            writer.write(tag: 32); writer.write(device)
        case .receiptRefreshStarted(let device, let request):
            writer.write(tag: 33); writer.write(device); writer.write(varint: request)
        case .receiptDelivered(let device, let request, let firstIndex, let entries, let isLast):
            // Tag 35 only when an entry was at an introductory offer (F-O3), 37 when one was at a
            // promotional offer (F-O7): a log without offers keeps its bytes.
            let offers = receiptOffers(entries)
            writer.write(tag: [34, 35, 37][offers.rawValue])
            writeReceiptPiece(device, request, firstIndex, entries, isLast, offers: offers, into: &writer)
        }
    }

    public static func encode(_ event: Event, commandID: CommandID?) -> [UInt8] {
        var writer = BinaryWriter()
        encode(event, commandID: commandID, into: &writer)
        return writer.bytes
    }

    /// Decodes one event payload; throws on anything malformed, never traps.
    public static func decodeEvent(_ buffer: UnsafeRawBufferPointer) throws(DecodingFailure) -> (commandID: CommandID?, event: Event) {
        var reader = BinaryReader(buffer)
        try readVersion(&reader)
        let commandID = try readCommandID(&reader)
        let tag = try reader.readByte()
        let event: Event
        switch tag {
        case 1:
            event = .runStarted(RunHeader(
                seed: try reader.readVarint(), sksimVersion: try reader.readString(), runtime: try reader.readString(),
                startedAtUnixNanoseconds: try reader.readSigned(), scenario: try reader.readString(),
                catalogSource: try reader.readString(), catalogDigest: try reader.readString(), catalog: try reader.readString()))
        case 2: event = .deviceRegistered(device: try reader.readString(), account: try reader.readString())
        case 3: event = .appLaunched(device: try reader.readString())
        case 4: event = .appTerminated(device: try reader.readString())
        case 5: event = .observerAttached(device: try reader.readString(), observer: try reader.readString())
        case 6: event = .observerDetached(device: try reader.readString(), observer: try reader.readString())
        case 7: event = .paymentsAllowedChanged(device: try reader.readString(), allowed: try reader.readBool())
        case 8: event = .transactionAdded(try readKey(&reader), try readPayment(&reader))
        case 36: event = .transactionAdded(try readKey(&reader), try readPaymentWithDiscount(&reader))
        case 9: event = .transactionDeferred(try readKey(&reader))
        case 10:
            event = .transactionPurchased(try readKey(&reader), identifier: try reader.readString(),
                                          downloads: try readContents(&reader), charged: try reader.readBool())
        case 11: event = .transactionFailed(try readKey(&reader), try readError(&reader))
        case 12:
            event = .restoreStarted(device: try reader.readString(), restore: try reader.readVarint(),
                                    applicationUsername: try reader.readOptionalString())
        case 13:
            event = .transactionRestored(try readKey(&reader), restore: try reader.readVarint(), identifier: try reader.readString(),
                                         original: try readOriginal(&reader), downloads: try readContents(&reader))
        case 14: event = .restoreFinished(device: try reader.readString(), restore: try reader.readVarint())
        case 15: event = .restoreFailed(device: try reader.readString(), restore: try reader.readVarint(), error: try readError(&reader))
        case 16: event = .transactionFinished(try readKey(&reader))
        case 17: event = .downloadStarted(try readDownloadKey(&reader))
        case 18:
            event = .downloadProgressed(try readDownloadKey(&reader), progress: try reader.readDouble(), timeRemaining: try reader.readDouble())
        case 19: event = .downloadPaused(try readDownloadKey(&reader))
        case 20: event = .downloadResumed(try readDownloadKey(&reader))
        case 21: event = .downloadFinished(try readDownloadKey(&reader), contentURL: try reader.readString())
        case 22: event = .downloadFailed(try readDownloadKey(&reader), error: try readError(&reader))
        case 23: event = .downloadCancelled(try readDownloadKey(&reader))
        case 24:
            let command = try readCommandBody(&reader)
            let rawCode = try reader.readByte()
            guard let code = Rejection.Code(rawValue: rawCode) else { throw reader.failure("unknown rejection code \(rawCode)") }
            event = .commandRejected(command, Rejection(code, try reader.readString()))
        case 25: event = .appActionRecorded(try readAppAction(&reader))
        case 26: event = .askToBuyDeclined(try readKey(&reader))
        case 27:
            event = .subscriptionRenewed(try readKey(&reader), identifier: try reader.readString(),
                                         original: try readOriginal(&reader), downloads: try readContents(&reader))
        case 28: event = .subscriptionExpired(device: try reader.readString(), original: try readOriginal(&reader))
        case 29: event = .entitlementsRevoked(device: try reader.readString(), original: try readOriginal(&reader))
        case 30: event = .interruptedPurchaseResumed(try readKey(&reader), interrupted: try readKey(&reader))
        case 31:
            event = .subscriptionBillingRetry(device: try reader.readString(), original: try readOriginal(&reader),
                                              gracePeriodNanoseconds: try reader.readSigned())
        case 32: event = .transactionsCleared(device: try reader.readString())
        case 33: event = .receiptRefreshStarted(device: try reader.readString(), request: try reader.readVarint())
        case 34, 35, 37:
            let piece = try readReceiptPiece(&reader, offers: tag == 34 ? .none : tag == 35 ? .introductory : .promotional)
            event = .receiptDelivered(device: piece.device, request: piece.request, firstIndex: piece.firstIndex, entries: piece.entries, isLast: piece.isLast)
        default:
            throw reader.failure("unknown event tag \(tag)")
        }
        guard reader.isAtEnd else { throw reader.failure("trailing bytes after a \(event.name) event") }
        return (commandID, event)
    }

    public static func decodeEvent(_ bytes: [UInt8]) throws(DecodingFailure) -> (commandID: CommandID?, event: Event) {
        do {
            return try bytes.withUnsafeBytes { buffer in try decodeEvent(buffer) }
        } catch let failure as DecodingFailure {
            throw failure
        } catch {
            preconditionFailure("decodeEvent throws only DecodingFailure")
        }
    }

    // MARK: Commands

    public static func encode(_ command: Command) -> [UInt8] {
        var writer = BinaryWriter()
        writer.write(formatVersion)
        writeCommandID(command.id, into: &writer)
        writeCommandBody(command.body, into: &writer)
        return writer.bytes
    }

    private static func writeCommandBody(_ body: CommandBody, into writer: inout BinaryWriter) {
        switch body {
        case .registerDevice(let device, let account):
            writer.write(tag: 1); writer.write(device); writer.write(account)
        case .launchApp(let device):
            writer.write(tag: 2); writer.write(device)
        case .terminateApp(let device):
            writer.write(tag: 3); writer.write(device)
        case .attachObserver(let device, let observer):
            writer.write(tag: 4); writer.write(device); writer.write(observer)
        case .detachObserver(let device, let observer):
            writer.write(tag: 5); writer.write(device); writer.write(observer)
        case .setPaymentsAllowed(let device, let allowed):
            writer.write(tag: 6); writer.write(device); writer.write(allowed)
        case .addPayment(let device, let payment):
            // Tag 30 only for a payment with a discount (F-O5).
            writer.write(tag: payment.discount == nil ? 7 : 30); writer.write(device); writePaymentWithDiscount(payment, into: &writer)
        case .finishTransaction(let key):
            writer.write(tag: 8); writeKey(key, into: &writer)
        case .restoreCompletedTransactions(let device, let applicationUsername):
            writer.write(tag: 9); writer.write(device); writer.write(optional: applicationUsername)
        case .startDownloads(let keys):
            writer.write(tag: 10); writeDownloadKeys(keys, into: &writer)
        case .pauseDownloads(let keys):
            writer.write(tag: 11); writeDownloadKeys(keys, into: &writer)
        case .resumeDownloads(let keys):
            writer.write(tag: 12); writeDownloadKeys(keys, into: &writer)
        case .cancelDownloads(let keys):
            writer.write(tag: 13); writeDownloadKeys(keys, into: &writer)
        case .decidePurchase(let key, let decision):
            writer.write(tag: 14); writeKey(key, into: &writer)
            switch decision {
            case .purchased(let charged): writer.write(tag: 0); writer.write(charged)
            case .failed(let error): writer.write(tag: 1); writeError(error, into: &writer)
            case .deferred: writer.write(tag: 2)
            case .declined: writer.write(tag: 3)
            }
        case .completeRestore(let device, let restore, let firstIndex, let originals, let isLast):
            writer.write(tag: 15); writer.write(device); writer.write(varint: restore)
            writer.write(varint: UInt64(firstIndex)); writer.write(isLast)
            writer.write(varint: UInt64(originals.count))
            for original in originals { writeOriginal(original, into: &writer) }
        case .failRestore(let device, let restore, let error):
            writer.write(tag: 16); writer.write(device); writer.write(varint: restore); writeError(error, into: &writer)
        case .reportDownloadProgress(let key, let progress, let timeRemaining):
            writer.write(tag: 17); writeDownloadKey(key, into: &writer); writer.write(progress); writer.write(timeRemaining)
        case .completeDownload(let key, let contentURL):
            writer.write(tag: 18); writeDownloadKey(key, into: &writer); writer.write(contentURL)
        case .failDownload(let key, let error):
            writer.write(tag: 19); writeDownloadKey(key, into: &writer); writeError(error, into: &writer)
        case .recordAppAction(let action):
            writer.write(tag: 20); writeAppAction(action, into: &writer)
        case .renewSubscription(let device, let original):
            writer.write(tag: 21); writer.write(device); writeOriginal(original, into: &writer)
        case .expireSubscription(let device, let original):
            writer.write(tag: 22); writer.write(device); writeOriginal(original, into: &writer)
        case .refundPurchase(let device, let original):
            writer.write(tag: 23); writer.write(device); writeOriginal(original, into: &writer)
        case .resumeInterruptedPurchase(let device, let interrupted, let payment, let charged):
            writer.write(tag: 24); writer.write(device); writeKey(interrupted, into: &writer)
            writePayment(payment, into: &writer); writer.write(charged)
        case .beginBillingRetry(let device, let original, let grace):
            writer.write(tag: 25); writer.write(device); writeOriginal(original, into: &writer); writer.write(signed: grace)
        case .clearTransactions(let device):
            writer.write(tag: 26); writer.write(device)
        case .refreshReceipt(let device):
            writer.write(tag: 27); writer.write(device)
        case .deliverReceipt(let device, let request, let firstIndex, let entries, let isLast):
            let offers = receiptOffers(entries)
            writer.write(tag: [28, 29, 31][offers.rawValue])
            writeReceiptPiece(device, request, firstIndex, entries, isLast, offers: offers, into: &writer)
        }
    }

    public static func decodeCommand(_ buffer: UnsafeRawBufferPointer) throws(DecodingFailure) -> Command {
        var reader = BinaryReader(buffer)
        try readVersion(&reader)
        guard let id = try readCommandID(&reader) else { throw reader.failure("a command needs an id (origin and number)") }
        let body = try readCommandBody(&reader)
        guard reader.isAtEnd else { throw reader.failure("trailing bytes after a \(body.name) command") }
        return Command(id: id, body: body)
    }

    private static func readCommandBody(_ reader: inout BinaryReader) throws(DecodingFailure) -> CommandBody {
        let tag = try reader.readByte()
        let body: CommandBody
        switch tag {
        case 1: body = .registerDevice(device: try reader.readString(), account: try reader.readString())
        case 2: body = .launchApp(device: try reader.readString())
        case 3: body = .terminateApp(device: try reader.readString())
        case 4: body = .attachObserver(device: try reader.readString(), observer: try reader.readString())
        case 5: body = .detachObserver(device: try reader.readString(), observer: try reader.readString())
        case 6: body = .setPaymentsAllowed(device: try reader.readString(), allowed: try reader.readBool())
        case 7: body = .addPayment(device: try reader.readString(), payment: try readPayment(&reader))
        case 30: body = .addPayment(device: try reader.readString(), payment: try readPaymentWithDiscount(&reader))
        case 8: body = .finishTransaction(try readKey(&reader))
        case 9: body = .restoreCompletedTransactions(device: try reader.readString(), applicationUsername: try reader.readOptionalString())
        case 10: body = .startDownloads(try readDownloadKeys(&reader))
        case 11: body = .pauseDownloads(try readDownloadKeys(&reader))
        case 12: body = .resumeDownloads(try readDownloadKeys(&reader))
        case 13: body = .cancelDownloads(try readDownloadKeys(&reader))
        case 14:
            let key = try readKey(&reader)
            let decision: StoreDecision
            switch try reader.readByte() {
            case 0: decision = .purchased(charged: try reader.readBool())
            case 1: decision = .failed(try readError(&reader))
            case 2: decision = .deferred
            case 3: decision = .declined
            case let other: throw reader.failure("unknown store decision \(other)")
            }
            body = .decidePurchase(key, decision)
        case 15:
            let device = try reader.readString()
            let restore = try reader.readVarint()
            let firstIndex = try readCount(&reader, maximum: Int(Int32.max))
            let isLast = try reader.readBool()
            let count = try readCount(&reader, maximum: QueueProjection.maximumRestorePiece)
            var originals: [OriginalTransaction] = []
            originals.reserveCapacity(count)
            for _ in 0..<count { originals.append(try readOriginal(&reader)) }
            body = .completeRestore(device: device, restore: restore, firstIndex: firstIndex, originals: originals, isLast: isLast)
        case 16: body = .failRestore(device: try reader.readString(), restore: try reader.readVarint(), error: try readError(&reader))
        case 17:
            body = .reportDownloadProgress(try readDownloadKey(&reader), progress: try reader.readDouble(), timeRemaining: try reader.readDouble())
        case 18: body = .completeDownload(try readDownloadKey(&reader), contentURL: try reader.readString())
        case 19: body = .failDownload(try readDownloadKey(&reader), error: try readError(&reader))
        case 20: body = .recordAppAction(try readAppAction(&reader))
        case 21: body = .renewSubscription(device: try reader.readString(), original: try readOriginal(&reader))
        case 22: body = .expireSubscription(device: try reader.readString(), original: try readOriginal(&reader))
        case 23: body = .refundPurchase(device: try reader.readString(), original: try readOriginal(&reader))
        case 24:
            body = .resumeInterruptedPurchase(device: try reader.readString(), interrupted: try readKey(&reader),
                                              payment: try readPayment(&reader), charged: try reader.readBool())
        case 25:
            body = .beginBillingRetry(device: try reader.readString(), original: try readOriginal(&reader),
                                      gracePeriodNanoseconds: try reader.readSigned())
        case 26: body = .clearTransactions(device: try reader.readString())
        case 27: body = .refreshReceipt(device: try reader.readString())
        case 28, 29, 31:
            let piece = try readReceiptPiece(&reader, offers: tag == 28 ? .none : tag == 29 ? .introductory : .promotional)
            body = .deliverReceipt(device: piece.device, request: piece.request, firstIndex: piece.firstIndex, entries: piece.entries, isLast: piece.isLast)
        default: throw reader.failure("unknown command tag \(tag)")
        }
        return body
    }

    public static func decodeCommand(_ bytes: [UInt8]) throws(DecodingFailure) -> Command {
        do {
            return try bytes.withUnsafeBytes { buffer in try decodeCommand(buffer) }
        } catch let failure as DecodingFailure {
            throw failure
        } catch {
            preconditionFailure("decodeCommand throws only DecodingFailure")
        }
    }

    // MARK: Parts

    /// Which form a receipt piece needs: plain (event tag 34, command tag 28), with introductory
    /// offers (35, 29, F-O3), or with promotional offers too (37, 31, F-O7).
    private enum ReceiptOffers: Int { case none = 0, introductory = 1, promotional = 2 }

    private static func receiptOffers(_ entries: [OriginalTransaction]) -> ReceiptOffers {
        if entries.contains(where: { $0.promotionalOfferIdentifier != nil }) { return .promotional }
        return entries.contains { $0.introductoryOfferPeriod != nil } ? .introductory : .none
    }

    /// A receipt piece (R-R2), the same in its command and its event: laid out like a restore piece;
    /// with offers, each entry is followed by its offer byte (0 none, else `IntroductoryOfferPeriod`),
    /// and with promotional offers, then by its promotional offer identifier (an optional string).
    private static func writeReceiptPiece(_ device: String, _ request: UInt64, _ firstIndex: Int, _ entries: [OriginalTransaction],
                                          _ isLast: Bool, offers: ReceiptOffers, into writer: inout BinaryWriter) {
        writer.write(device); writer.write(varint: request); writer.write(varint: UInt64(firstIndex)); writer.write(isLast)
        writer.write(varint: UInt64(entries.count))
        for entry in entries {
            writeOriginal(entry, into: &writer)
            if offers != .none { writer.write(entry.introductoryOfferPeriod?.rawValue ?? 0) }
            if offers == .promotional { writer.write(optional: entry.promotionalOfferIdentifier) }
        }
    }

    private static func readReceiptPiece(_ reader: inout BinaryReader, offers: ReceiptOffers) throws(DecodingFailure)
        -> (device: String, request: UInt64, firstIndex: Int, entries: [OriginalTransaction], isLast: Bool) {
        let device = try reader.readString()
        let request = try reader.readVarint()
        let firstIndex = try readCount(&reader, maximum: Int(Int32.max))
        let isLast = try reader.readBool()
        let count = try readCount(&reader, maximum: QueueProjection.maximumRestorePiece)
        var entries: [OriginalTransaction] = []
        entries.reserveCapacity(count)
        for _ in 0..<count {
            var entry = try readOriginal(&reader)
            if offers != .none {
                let raw = try reader.readByte()
                if raw != 0 {
                    guard let offer = IntroductoryOfferPeriod(rawValue: raw) else { throw reader.failure("unknown introductory offer period \(raw)") }
                    entry.introductoryOfferPeriod = offer
                }
            }
            if offers == .promotional { entry.promotionalOfferIdentifier = try reader.readOptionalString() }
            entries.append(entry)
        }
        return (device, request, firstIndex, entries, isLast)
    }

    private static func writeAppAction(_ action: AppAction, into writer: inout BinaryWriter) {
        switch action {
        case .contentGranted(let key, let observer, let product):
            writer.write(tag: 1); writeKey(key, into: &writer); writer.write(observer); writer.write(product)
        case .contentKept(let key, let observer):
            writer.write(tag: 2); writeDownloadKey(key, into: &writer); writer.write(observer)
        case .restoreShownDone(let device, let restore, let observer):
            writer.write(tag: 3); writer.write(device); writer.write(varint: restore); writer.write(observer)
        case .failureShown(let key, let observer):
            writer.write(tag: 4); writeKey(key, into: &writer); writer.write(observer)
        }
    }

    private static func readAppAction(_ reader: inout BinaryReader) throws(DecodingFailure) -> AppAction {
        switch try reader.readByte() {
        case 1: return .contentGranted(try readKey(&reader), observer: try reader.readString(), productIdentifier: try reader.readString())
        case 2: return .contentKept(try readDownloadKey(&reader), observer: try reader.readString())
        case 3: return .restoreShownDone(device: try reader.readString(), restore: try reader.readVarint(), observer: try reader.readString())
        case 4: return .failureShown(try readKey(&reader), observer: try reader.readString())
        case let other: throw reader.failure("unknown app action \(other)")
        }
    }

    private static func readVersion(_ reader: inout BinaryReader) throws(DecodingFailure) {
        let version = try reader.readByte()
        guard version == formatVersion else {
            throw reader.failure("format version \(version) is not supported (this build reads version \(formatVersion)); use a matching sksim")
        }
    }

    private static func writeCommandID(_ id: CommandID?, into writer: inout BinaryWriter) {
        if let id {
            writer.write(true); writer.write(id.origin); writer.write(varint: id.number)
        } else {
            writer.write(false)
        }
    }

    private static func readCommandID(_ reader: inout BinaryReader) throws(DecodingFailure) -> CommandID? {
        guard try reader.readBool() else { return nil }
        return CommandID(origin: try reader.readString(), number: try reader.readVarint())
    }

    private static func writeKey(_ key: TransactionKey, into writer: inout BinaryWriter) {
        writer.write(key.device); writer.write(varint: key.number)
    }

    private static func readKey(_ reader: inout BinaryReader) throws(DecodingFailure) -> TransactionKey {
        TransactionKey(device: try reader.readString(), number: try reader.readVarint())
    }

    private static func writeDownloadKey(_ key: DownloadKey, into writer: inout BinaryWriter) {
        writeKey(key.transaction, into: &writer); writer.write(varint: UInt64(key.index))
    }

    private static func readDownloadKey(_ reader: inout BinaryReader) throws(DecodingFailure) -> DownloadKey {
        let transaction = try readKey(&reader)
        return DownloadKey(transaction: transaction, index: try readDownloadIndex(&reader))
    }

    static func readDownloadIndex(_ reader: inout BinaryReader) throws(DecodingFailure) -> Int {
        let index = try reader.readVarint()
        guard index < 1 << 16 else { throw reader.failure("download index \(index) is out of range") }
        return Int(index)
    }

    private static func writeDownloadKeys(_ keys: [DownloadKey], into writer: inout BinaryWriter) {
        writer.write(varint: UInt64(keys.count))
        for key in keys { writeDownloadKey(key, into: &writer) }
    }

    private static func readDownloadKeys(_ reader: inout BinaryReader) throws(DecodingFailure) -> [DownloadKey] {
        let count = try readCount(&reader, maximum: 10_000)
        var keys: [DownloadKey] = []
        keys.reserveCapacity(count)
        for _ in 0..<count { keys.append(try readDownloadKey(&reader)) }
        return keys
    }

    static func readCount(_ reader: inout BinaryReader, maximum: Int) throws(DecodingFailure) -> Int {
        let count = try reader.readVarint()
        guard count <= UInt64(maximum) else { throw reader.failure("count \(count) exceeds the limit of \(maximum)") }
        return Int(count)
    }

    private static func writePayment(_ payment: Payment, into writer: inout BinaryWriter) {
        writer.write(payment.productIdentifier)
        writer.write(payment.quantity)
        writer.write(optional: payment.applicationUsername)
        if let data = payment.requestData {
            writer.write(true); writer.write(data)
        } else {
            writer.write(false)
        }
    }

    /// A payment as tag 8 or 7 carries it, then, when it has a discount (tags 36 and 30, F-O5), the
    /// discount's identifier, key identifier, nonce, signature and timestamp.
    private static func writePaymentWithDiscount(_ payment: Payment, into writer: inout BinaryWriter) {
        writePayment(payment, into: &writer)
        guard let discount = payment.discount else { return }
        writer.write(discount.identifier); writer.write(discount.keyIdentifier); writer.write(discount.nonce)
        writer.write(discount.signature); writer.write(signed: discount.timestamp)
    }

    private static func readPaymentWithDiscount(_ reader: inout BinaryReader) throws(DecodingFailure) -> Payment {
        var payment = try readPayment(&reader)
        payment.discount = PaymentDiscount(identifier: try reader.readString(), keyIdentifier: try reader.readString(),
                                           nonce: try reader.readString(), signature: try reader.readString(), timestamp: try reader.readSigned())
        return payment
    }

    private static func readPayment(_ reader: inout BinaryReader) throws(DecodingFailure) -> Payment {
        let product = try reader.readString()
        let quantity = try reader.readInt()
        let username = try reader.readOptionalString()
        let data: [UInt8]? = try reader.readBool() ? try reader.readBytes() : nil
        return Payment(productIdentifier: product, quantity: quantity, applicationUsername: username, requestData: data)
    }

    private static func writeError(_ error: StoreError, into writer: inout BinaryWriter) {
        writer.write(error.code.rawValue); writer.write(error.message)
    }

    static func readError(_ reader: inout BinaryReader) throws(DecodingFailure) -> StoreError {
        let raw = try reader.readByte()
        guard let code = StoreError.Code(loggedValue: raw) else { throw reader.failure("unknown store error code \(raw)") }
        return StoreError(code, try reader.readString())
    }

    private static func writeOriginal(_ original: OriginalTransaction, into writer: inout BinaryWriter) {
        writer.write(original.transactionIdentifier)
        writePayment(original.payment, into: &writer)
        writer.write(signed: original.transactionDate)
    }

    private static func readOriginal(_ reader: inout BinaryReader) throws(DecodingFailure) -> OriginalTransaction {
        OriginalTransaction(transactionIdentifier: try reader.readString(), payment: try readPayment(&reader),
                            transactionDate: try reader.readSigned())
    }

    /// The most hosted contents one transaction's event may list.
    static let maximumContents = 1_000

    private static func writeContents(_ contents: [HostedContent], into writer: inout BinaryWriter) {
        writer.write(varint: UInt64(contents.count))
        for content in contents {
            writer.write(content.contentIdentifier)
            writer.write(signed: content.contentLength)
            writer.write(content.contentVersion)
        }
    }

    private static func readContents(_ reader: inout BinaryReader) throws(DecodingFailure) -> [HostedContent] {
        let count = try readCount(&reader, maximum: maximumContents)
        var contents: [HostedContent] = []
        contents.reserveCapacity(count)
        for _ in 0..<count {
            contents.append(HostedContent(contentIdentifier: try reader.readString(), contentLength: try reader.readSigned(),
                                          contentVersion: try reader.readString()))
        }
        return contents
    }
}
