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
            writer.write(tag: .runStarted); writer.write(varint: header.seed); writer.write(header.sksimVersion)
            writer.write(header.runtime); writer.write(signed: header.startedAtUnixNanoseconds)
            writer.write(header.scenario); writer.write(header.catalogSource); writer.write(header.catalogDigest)
            writer.write(header.catalog)
        case .deviceRegistered(let device, let account):
            writer.write(tag: .deviceRegistered); writer.write(device); writer.write(account)
        case .appLaunched(let device):
            writer.write(tag: .appLaunched); writer.write(device)
        case .appTerminated(let device):
            writer.write(tag: .appTerminated); writer.write(device)
        case .observerAttached(let device, let observer):
            writer.write(tag: .observerAttached); writer.write(device); writer.write(observer)
        case .observerDetached(let device, let observer):
            writer.write(tag: .observerDetached); writer.write(device); writer.write(observer)
        case .paymentsAllowedChanged(let device, let allowed):
            writer.write(tag: .paymentsAllowedChanged); writer.write(device); writer.write(allowed)
        case .transactionAdded(let key, let payment):
            // Tag 36 only for a payment with a discount (F-O5): every other log keeps its bytes.
            writer.write(tag: payment.discount == nil ? EventTag.transactionAdded : .transactionAddedWithDiscount); writeKey(key, into: &writer); writePaymentWithDiscount(payment, into: &writer)
        case .transactionDeferred(let key):
            writer.write(tag: .transactionDeferred); writeKey(key, into: &writer)
        case .transactionPurchased(let key, let identifier, let downloads, let charged):
            writer.write(tag: .transactionPurchased); writeKey(key, into: &writer); writer.write(identifier)
            writeContents(downloads, into: &writer); writer.write(charged)
        case .transactionFailed(let key, let error):
            writer.write(tag: .transactionFailed); writeKey(key, into: &writer); writeError(error, into: &writer)
        case .restoreStarted(let device, let restore, let applicationUsername):
            writer.write(tag: .restoreStarted); writer.write(device); writer.write(varint: restore); writer.write(optional: applicationUsername)
        case .transactionRestored(let key, let restore, let identifier, let original, let downloads):
            writer.write(tag: .transactionRestored); writeKey(key, into: &writer); writer.write(varint: restore); writer.write(identifier)
            writeOriginal(original, into: &writer); writeContents(downloads, into: &writer)
        case .restoreFinished(let device, let restore):
            writer.write(tag: .restoreFinished); writer.write(device); writer.write(varint: restore)
        case .restoreFailed(let device, let restore, let error):
            writer.write(tag: .restoreFailed); writer.write(device); writer.write(varint: restore); writeError(error, into: &writer)
        case .transactionFinished(let key):
            writer.write(tag: .transactionFinished); writeKey(key, into: &writer)
        case .downloadStarted(let key):
            writer.write(tag: .downloadStarted); writeDownloadKey(key, into: &writer)
        case .downloadProgressed(let key, let progress, let timeRemaining):
            writer.write(tag: .downloadProgressed); writeDownloadKey(key, into: &writer); writer.write(progress); writer.write(timeRemaining)
        case .downloadPaused(let key):
            writer.write(tag: .downloadPaused); writeDownloadKey(key, into: &writer)
        case .downloadResumed(let key):
            writer.write(tag: .downloadResumed); writeDownloadKey(key, into: &writer)
        case .downloadFinished(let key, let contentURL):
            writer.write(tag: .downloadFinished); writeDownloadKey(key, into: &writer); writer.write(contentURL)
        case .downloadFailed(let key, let error):
            writer.write(tag: .downloadFailed); writeDownloadKey(key, into: &writer); writeError(error, into: &writer)
        case .downloadCancelled(let key):
            writer.write(tag: .downloadCancelled); writeDownloadKey(key, into: &writer)
        case .commandRejected(let command, let rejection):
            writer.write(tag: .commandRejected); writeCommandBody(command, into: &writer)
            writer.write(rejection.code.rawValue); writer.write(rejection.message)
        case .appActionRecorded(let action):
            writer.write(tag: .appActionRecorded); writeAppAction(action, into: &writer)
        case .askToBuyDeclined(let key):
            writer.write(tag: .askToBuyDeclined); writeKey(key, into: &writer)
        case .subscriptionRenewed(let key, let identifier, let original, let contents):
            writer.write(tag: .subscriptionRenewed); writeKey(key, into: &writer); writer.write(identifier)
            writeOriginal(original, into: &writer); writeContents(contents, into: &writer)
        case .subscriptionExpired(let device, let original):
            writer.write(tag: .subscriptionExpired); writer.write(device); writeOriginal(original, into: &writer)
        case .entitlementsRevoked(let device, let original):
            writer.write(tag: .entitlementsRevoked); writer.write(device); writeOriginal(original, into: &writer)
        case .interruptedPurchaseResumed(let key, let interrupted):
            writer.write(tag: .interruptedPurchaseResumed); writeKey(key, into: &writer); writeKey(interrupted, into: &writer)
        case .subscriptionBillingRetry(let device, let original, let grace):
            writer.write(tag: .subscriptionBillingRetry); writer.write(device); writeOriginal(original, into: &writer); writer.write(signed: grace)
        case .transactionsCleared(let device):
            writer.write(tag: .transactionsCleared); writer.write(device)
        case .receiptRefreshStarted(let device, let request):
            writer.write(tag: .receiptRefreshStarted); writer.write(device); writer.write(varint: request)
        case .receiptDelivered(let device, let request, let firstIndex, let entries, let isLast):
            // Tag 35 only when an entry was at an introductory offer (F-O3), 37 when one was at a
            // promotional offer (F-O7): a log without offers keeps its bytes.
            let offers = receiptOffers(entries)
            writer.write(tag: offers.eventTag)
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
        let rawTag = try reader.readByte()
        guard let tag = EventTag(rawValue: rawTag) else { throw reader.failure("unknown event tag \(rawTag)") }
        let event: Event
        switch tag {
        case .runStarted:
            event = .runStarted(RunHeader(
                seed: try reader.readVarint(), sksimVersion: try reader.readString(), runtime: try reader.readString(),
                startedAtUnixNanoseconds: try reader.readSigned(), scenario: try reader.readString(),
                catalogSource: try reader.readString(), catalogDigest: try reader.readString(), catalog: try reader.readString()))
        case .deviceRegistered: event = .deviceRegistered(device: try reader.readString(), account: try reader.readString())
        case .appLaunched: event = .appLaunched(device: try reader.readString())
        case .appTerminated: event = .appTerminated(device: try reader.readString())
        case .observerAttached: event = .observerAttached(device: try reader.readString(), observer: try reader.readString())
        case .observerDetached: event = .observerDetached(device: try reader.readString(), observer: try reader.readString())
        case .paymentsAllowedChanged: event = .paymentsAllowedChanged(device: try reader.readString(), allowed: try reader.readBool())
        case .transactionAdded: event = .transactionAdded(try readKey(&reader), try readPayment(&reader))
        case .transactionAddedWithDiscount: event = .transactionAdded(try readKey(&reader), try readPaymentWithDiscount(&reader))
        case .transactionDeferred: event = .transactionDeferred(try readKey(&reader))
        case .transactionPurchased:
            event = .transactionPurchased(try readKey(&reader), identifier: try reader.readString(),
                                          downloads: try readContents(&reader), charged: try reader.readBool())
        case .transactionFailed: event = .transactionFailed(try readKey(&reader), try readError(&reader))
        case .restoreStarted:
            event = .restoreStarted(device: try reader.readString(), restore: try reader.readVarint(),
                                    applicationUsername: try reader.readOptionalString())
        case .transactionRestored:
            event = .transactionRestored(try readKey(&reader), restore: try reader.readVarint(), identifier: try reader.readString(),
                                         original: try readOriginal(&reader), downloads: try readContents(&reader))
        case .restoreFinished: event = .restoreFinished(device: try reader.readString(), restore: try reader.readVarint())
        case .restoreFailed: event = .restoreFailed(device: try reader.readString(), restore: try reader.readVarint(), error: try readError(&reader))
        case .transactionFinished: event = .transactionFinished(try readKey(&reader))
        case .downloadStarted: event = .downloadStarted(try readDownloadKey(&reader))
        case .downloadProgressed:
            event = .downloadProgressed(try readDownloadKey(&reader), progress: try reader.readDouble(), timeRemaining: try reader.readDouble())
        case .downloadPaused: event = .downloadPaused(try readDownloadKey(&reader))
        case .downloadResumed: event = .downloadResumed(try readDownloadKey(&reader))
        case .downloadFinished: event = .downloadFinished(try readDownloadKey(&reader), contentURL: try reader.readString())
        case .downloadFailed: event = .downloadFailed(try readDownloadKey(&reader), error: try readError(&reader))
        case .downloadCancelled: event = .downloadCancelled(try readDownloadKey(&reader))
        case .commandRejected:
            let command = try readCommandBody(&reader)
            let rawCode = try reader.readByte()
            guard let code = Rejection.Code(rawValue: rawCode) else { throw reader.failure("unknown rejection code \(rawCode)") }
            event = .commandRejected(command, Rejection(code, try reader.readString()))
        case .appActionRecorded: event = .appActionRecorded(try readAppAction(&reader))
        case .askToBuyDeclined: event = .askToBuyDeclined(try readKey(&reader))
        case .subscriptionRenewed:
            event = .subscriptionRenewed(try readKey(&reader), identifier: try reader.readString(),
                                         original: try readOriginal(&reader), downloads: try readContents(&reader))
        case .subscriptionExpired: event = .subscriptionExpired(device: try reader.readString(), original: try readOriginal(&reader))
        case .entitlementsRevoked: event = .entitlementsRevoked(device: try reader.readString(), original: try readOriginal(&reader))
        case .interruptedPurchaseResumed: event = .interruptedPurchaseResumed(try readKey(&reader), interrupted: try readKey(&reader))
        case .subscriptionBillingRetry:
            event = .subscriptionBillingRetry(device: try reader.readString(), original: try readOriginal(&reader),
                                              gracePeriodNanoseconds: try reader.readSigned())
        case .transactionsCleared: event = .transactionsCleared(device: try reader.readString())
        case .receiptRefreshStarted: event = .receiptRefreshStarted(device: try reader.readString(), request: try reader.readVarint())
        case .receiptDelivered, .receiptDeliveredWithIntroductoryOffers, .receiptDeliveredWithPromotionalOffers:
            let piece = try readReceiptPiece(&reader, offers: ReceiptOffers(tag))
            event = .receiptDelivered(device: piece.device, request: piece.request, firstIndex: piece.firstIndex, entries: piece.entries, isLast: piece.isLast)
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
        encode(command, into: &writer)
        return writer.bytes
    }

    /// Appends the command's bytes (as `encode(_:)` makes them) to `writer`.
    public static func encode(_ command: Command, into writer: inout BinaryWriter) {
        writer.write(formatVersion)
        writeCommandID(command.id, into: &writer)
        writeCommandBody(command.body, into: &writer)
    }

    private static func writeCommandBody(_ body: CommandBody, into writer: inout BinaryWriter) {
        switch body {
        case .registerDevice(let device, let account):
            writer.write(tag: .registerDevice); writer.write(device); writer.write(account)
        case .launchApp(let device):
            writer.write(tag: .launchApp); writer.write(device)
        case .terminateApp(let device):
            writer.write(tag: .terminateApp); writer.write(device)
        case .attachObserver(let device, let observer):
            writer.write(tag: .attachObserver); writer.write(device); writer.write(observer)
        case .detachObserver(let device, let observer):
            writer.write(tag: .detachObserver); writer.write(device); writer.write(observer)
        case .setPaymentsAllowed(let device, let allowed):
            writer.write(tag: .setPaymentsAllowed); writer.write(device); writer.write(allowed)
        case .addPayment(let device, let payment):
            // Tag 30 only for a payment with a discount (F-O5).
            writer.write(tag: payment.discount == nil ? CommandTag.addPayment : .addPaymentWithDiscount); writer.write(device); writePaymentWithDiscount(payment, into: &writer)
        case .finishTransaction(let key):
            writer.write(tag: .finishTransaction); writeKey(key, into: &writer)
        case .restoreCompletedTransactions(let device, let applicationUsername):
            writer.write(tag: .restoreCompletedTransactions); writer.write(device); writer.write(optional: applicationUsername)
        case .startDownloads(let keys):
            writer.write(tag: .startDownloads); writeDownloadKeys(keys, into: &writer)
        case .pauseDownloads(let keys):
            writer.write(tag: .pauseDownloads); writeDownloadKeys(keys, into: &writer)
        case .resumeDownloads(let keys):
            writer.write(tag: .resumeDownloads); writeDownloadKeys(keys, into: &writer)
        case .cancelDownloads(let keys):
            writer.write(tag: .cancelDownloads); writeDownloadKeys(keys, into: &writer)
        case .decidePurchase(let key, let decision):
            writer.write(tag: .decidePurchase); writeKey(key, into: &writer)
            switch decision {
            case .purchased(let charged): writer.write(tag: .purchased); writer.write(charged)
            case .failed(let error): writer.write(tag: .failed); writeError(error, into: &writer)
            case .deferred: writer.write(tag: .deferred)
            case .declined: writer.write(tag: .declined)
            }
        case .completeRestore(let device, let restore, let firstIndex, let originals, let isLast):
            writer.write(tag: .completeRestore); writer.write(device); writer.write(varint: restore)
            writer.write(varint: UInt64(firstIndex)); writer.write(isLast)
            writer.write(varint: UInt64(originals.count))
            for original in originals { writeOriginal(original, into: &writer) }
        case .failRestore(let device, let restore, let error):
            writer.write(tag: .failRestore); writer.write(device); writer.write(varint: restore); writeError(error, into: &writer)
        case .reportDownloadProgress(let key, let progress, let timeRemaining):
            writer.write(tag: .reportDownloadProgress); writeDownloadKey(key, into: &writer); writer.write(progress); writer.write(timeRemaining)
        case .completeDownload(let key, let contentURL):
            writer.write(tag: .completeDownload); writeDownloadKey(key, into: &writer); writer.write(contentURL)
        case .failDownload(let key, let error):
            writer.write(tag: .failDownload); writeDownloadKey(key, into: &writer); writeError(error, into: &writer)
        case .recordAppAction(let action):
            writer.write(tag: .recordAppAction); writeAppAction(action, into: &writer)
        case .renewSubscription(let device, let original):
            writer.write(tag: .renewSubscription); writer.write(device); writeOriginal(original, into: &writer)
        case .expireSubscription(let device, let original):
            writer.write(tag: .expireSubscription); writer.write(device); writeOriginal(original, into: &writer)
        case .refundPurchase(let device, let original):
            writer.write(tag: .refundPurchase); writer.write(device); writeOriginal(original, into: &writer)
        case .resumeInterruptedPurchase(let device, let interrupted, let payment, let charged):
            writer.write(tag: .resumeInterruptedPurchase); writer.write(device); writeKey(interrupted, into: &writer)
            writePayment(payment, into: &writer); writer.write(charged)
        case .beginBillingRetry(let device, let original, let grace):
            writer.write(tag: .beginBillingRetry); writer.write(device); writeOriginal(original, into: &writer); writer.write(signed: grace)
        case .clearTransactions(let device):
            writer.write(tag: .clearTransactions); writer.write(device)
        case .refreshReceipt(let device):
            writer.write(tag: .refreshReceipt); writer.write(device)
        case .deliverReceipt(let device, let request, let firstIndex, let entries, let isLast):
            let offers = receiptOffers(entries)
            writer.write(tag: offers.commandTag)
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
        let rawTag = try reader.readByte()
        guard let tag = CommandTag(rawValue: rawTag) else { throw reader.failure("unknown command tag \(rawTag)") }
        let body: CommandBody
        switch tag {
        case .registerDevice: body = .registerDevice(device: try reader.readString(), account: try reader.readString())
        case .launchApp: body = .launchApp(device: try reader.readString())
        case .terminateApp: body = .terminateApp(device: try reader.readString())
        case .attachObserver: body = .attachObserver(device: try reader.readString(), observer: try reader.readString())
        case .detachObserver: body = .detachObserver(device: try reader.readString(), observer: try reader.readString())
        case .setPaymentsAllowed: body = .setPaymentsAllowed(device: try reader.readString(), allowed: try reader.readBool())
        case .addPayment: body = .addPayment(device: try reader.readString(), payment: try readPayment(&reader))
        case .addPaymentWithDiscount: body = .addPayment(device: try reader.readString(), payment: try readPaymentWithDiscount(&reader))
        case .finishTransaction: body = .finishTransaction(try readKey(&reader))
        case .restoreCompletedTransactions: body = .restoreCompletedTransactions(device: try reader.readString(), applicationUsername: try reader.readOptionalString())
        case .startDownloads: body = .startDownloads(try readDownloadKeys(&reader))
        case .pauseDownloads: body = .pauseDownloads(try readDownloadKeys(&reader))
        case .resumeDownloads: body = .resumeDownloads(try readDownloadKeys(&reader))
        case .cancelDownloads: body = .cancelDownloads(try readDownloadKeys(&reader))
        case .decidePurchase:
            let key = try readKey(&reader)
            let decision: StoreDecision
            let rawDecision = try reader.readByte()
            switch StoreDecisionTag(rawValue: rawDecision) {
            case .purchased: decision = .purchased(charged: try reader.readBool())
            case .failed: decision = .failed(try readError(&reader))
            case .deferred: decision = .deferred
            case .declined: decision = .declined
            case nil: throw reader.failure("unknown store decision \(rawDecision)")
            }
            body = .decidePurchase(key, decision)
        case .completeRestore:
            let device = try reader.readString()
            let restore = try reader.readVarint()
            let firstIndex = try readCount(&reader, maximum: Int(Int32.max))
            let isLast = try reader.readBool()
            let count = try readCount(&reader, maximum: QueueProjection.maximumRestorePiece)
            var originals: [OriginalTransaction] = []
            originals.reserveCapacity(count)
            for _ in 0..<count { originals.append(try readOriginal(&reader)) }
            body = .completeRestore(device: device, restore: restore, firstIndex: firstIndex, originals: originals, isLast: isLast)
        case .failRestore: body = .failRestore(device: try reader.readString(), restore: try reader.readVarint(), error: try readError(&reader))
        case .reportDownloadProgress:
            body = .reportDownloadProgress(try readDownloadKey(&reader), progress: try reader.readDouble(), timeRemaining: try reader.readDouble())
        case .completeDownload: body = .completeDownload(try readDownloadKey(&reader), contentURL: try reader.readString())
        case .failDownload: body = .failDownload(try readDownloadKey(&reader), error: try readError(&reader))
        case .recordAppAction: body = .recordAppAction(try readAppAction(&reader))
        case .renewSubscription: body = .renewSubscription(device: try reader.readString(), original: try readOriginal(&reader))
        case .expireSubscription: body = .expireSubscription(device: try reader.readString(), original: try readOriginal(&reader))
        case .refundPurchase: body = .refundPurchase(device: try reader.readString(), original: try readOriginal(&reader))
        case .resumeInterruptedPurchase:
            body = .resumeInterruptedPurchase(device: try reader.readString(), interrupted: try readKey(&reader),
                                              payment: try readPayment(&reader), charged: try reader.readBool())
        case .beginBillingRetry:
            body = .beginBillingRetry(device: try reader.readString(), original: try readOriginal(&reader),
                                      gracePeriodNanoseconds: try reader.readSigned())
        case .clearTransactions: body = .clearTransactions(device: try reader.readString())
        case .refreshReceipt: body = .refreshReceipt(device: try reader.readString())
        case .deliverReceipt, .deliverReceiptWithIntroductoryOffers, .deliverReceiptWithPromotionalOffers:
            let piece = try readReceiptPiece(&reader, offers: ReceiptOffers(tag))
            body = .deliverReceipt(device: piece.device, request: piece.request, firstIndex: piece.firstIndex, entries: piece.entries, isLast: piece.isLast)
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
    private enum ReceiptOffers {
        case none, introductory, promotional

        init(_ tag: EventTag) {
            self = tag == .receiptDelivered ? .none : tag == .receiptDeliveredWithIntroductoryOffers ? .introductory : .promotional
        }

        init(_ tag: CommandTag) {
            self = tag == .deliverReceipt ? .none : tag == .deliverReceiptWithIntroductoryOffers ? .introductory : .promotional
        }

        var eventTag: EventTag {
            switch self {
            case .none: .receiptDelivered
            case .introductory: .receiptDeliveredWithIntroductoryOffers
            case .promotional: .receiptDeliveredWithPromotionalOffers
            }
        }

        var commandTag: CommandTag {
            switch self {
            case .none: .deliverReceipt
            case .introductory: .deliverReceiptWithIntroductoryOffers
            case .promotional: .deliverReceiptWithPromotionalOffers
            }
        }
    }

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
            writer.write(tag: .contentGranted); writeKey(key, into: &writer); writer.write(observer); writer.write(product)
        case .contentKept(let key, let observer):
            writer.write(tag: .contentKept); writeDownloadKey(key, into: &writer); writer.write(observer)
        case .restoreShownDone(let device, let restore, let observer):
            writer.write(tag: .restoreShownDone); writer.write(device); writer.write(varint: restore); writer.write(observer)
        case .failureShown(let key, let observer):
            writer.write(tag: .failureShown); writeKey(key, into: &writer); writer.write(observer)
        case .transactionReported(let key, let observer, let report):
            writer.write(tag: .transactionReported); writeKey(key, into: &writer); writer.write(observer); writer.write(report.rawValue)
        }
    }

    private static func readAppAction(_ reader: inout BinaryReader) throws(DecodingFailure) -> AppAction {
        let rawTag = try reader.readByte()
        switch AppActionTag(rawValue: rawTag) {
        case .contentGranted: return .contentGranted(try readKey(&reader), observer: try reader.readString(), productIdentifier: try reader.readString())
        case .contentKept: return .contentKept(try readDownloadKey(&reader), observer: try reader.readString())
        case .restoreShownDone: return .restoreShownDone(device: try reader.readString(), restore: try reader.readVarint(), observer: try reader.readString())
        case .failureShown: return .failureShown(try readKey(&reader), observer: try reader.readString())
        case .transactionReported:
            let key = try readKey(&reader), observer = try reader.readString(), rawReport = try reader.readByte()
            guard let report = AppReport(rawValue: rawReport) else { throw reader.failure("unknown app report \(rawReport)") }
            return .transactionReported(key, observer: observer, report: report)
        case nil: throw reader.failure("unknown app action \(rawTag)")
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
        // One flags byte: bit 0, request data follows; bit 1, Ask to Buy. A payment without Ask to Buy
        // writes 0 or 1, the boolean logs have always held.
        writer.write(UInt8((payment.requestData == nil ? 0 : 1) | (payment.simulatesAskToBuyInSandbox ? 2 : 0)))
        if let data = payment.requestData { writer.write(data) }
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
        return try readPayment(&reader, product: product, quantity: quantity, username: username)
    }

    /// The rest of a payment after its product, quantity and user name: the flags byte of
    /// `writePayment` (bit 0, request data follows; bit 1, Ask to Buy), then the request data.
    /// Shared with `EncodedEventFold`, which reads the strings its own way.
    static func readPayment(_ reader: inout BinaryReader, product: String, quantity: Int, username: String?) throws(DecodingFailure) -> Payment {
        let flags = try reader.readByte()
        guard flags <= 3 else { throw reader.failure("expected a payment's flags (0 to 3), found \(flags)") }
        let data: [UInt8]? = flags & 1 != 0 ? try reader.readBytes() : nil
        var payment = Payment(productIdentifier: product, quantity: quantity, applicationUsername: username, requestData: data)
        payment.simulatesAskToBuyInSandbox = flags & 2 != 0
        return payment
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
