import Testing
@testable import StoreKitModel

@Suite struct EventCodecTests {
    static let key = TransactionKey(device: "device-0001", number: 7)
    static let download = DownloadKey(transaction: key, index: 1)
    static let original = OriginalTransaction(transactionIdentifier: "device-0001.3",
                                              payment: Payment(productIdentifier: "p", quantity: 2, applicationUsername: "acct", requestData: [1, 2, 3]),
                                              transactionDate: -5)
    static let content = HostedContent(contentIdentifier: "c", contentLength: 4096, contentVersion: "1.0.2")

    static let everyEvent: [Event] = [
        .runStarted(RunHeader(seed: .max, sksimVersion: "0.3.0", runtime: "deterministic", startedAtUnixNanoseconds: 0,
                               scenario: "{\"devices\":2} ünïcödé", catalogSource: "sample", catalogDigest: "0123456789abcdef", catalog: "{}")),
        .deviceRegistered(device: "d", account: "a"), .appLaunched(device: "d"), .appTerminated(device: "d"),
        .observerAttached(device: "d", observer: "o"), .observerDetached(device: "d", observer: "o"),
        .paymentsAllowedChanged(device: "d", allowed: false),
        .transactionAdded(key, Payment(productIdentifier: "p", quantity: 3)),
        .transactionDeferred(key),
        .transactionPurchased(key, identifier: "device-0001.7", downloads: [content, content], charged: false),
        .transactionFailed(key, StoreError(.paymentCancelled, "user cancelled")),
        .restoreStarted(device: "d", restore: 2, applicationUsername: nil),
        .restoreStarted(device: "d", restore: 3, applicationUsername: "acct"),
        .transactionRestored(key, restore: 2, identifier: "x", original: original, downloads: [content]),
        .restoreFinished(device: "d", restore: 2),
        .restoreFailed(device: "d", restore: 2, error: StoreError(.unknown, "no")),
        .transactionFinished(key), .downloadStarted(download),
        .downloadProgressed(download, progress: 0.25, timeRemaining: Download.timeRemainingUnknown),
        .downloadPaused(download), .downloadResumed(download),
        .downloadFinished(download, contentURL: "/tmp/c"),
        .downloadFailed(download, error: StoreError(.unknown, "dropped")),
        .downloadCancelled(download),
        .commandRejected(.addPayment(device: "d", payment: Payment(productIdentifier: "nope")), Rejection(.unknownProduct, "no such product")),
        .appActionRecorded(.contentGranted(key, observer: "o", productIdentifier: "p")),
        .appActionRecorded(.contentKept(download, observer: "o")),
        .appActionRecorded(.restoreShownDone(device: "d", restore: 2, observer: "o")),
        .appActionRecorded(.failureShown(key, observer: "o")),
        .appActionRecorded(.transactionReported(key, observer: "o", report: .revenue)),
        .appActionRecorded(.transactionReported(key, observer: "o", report: .creditedAsNewPurchase)),
        .askToBuyDeclined(key),
        .subscriptionRenewed(key, identifier: "d.7", original: original, downloads: []),
        .subscriptionExpired(device: "d", original: original),
        .entitlementsRevoked(device: "d", original: original),
        .interruptedPurchaseResumed(TransactionKey(device: "d", number: 8), interrupted: key),
        .subscriptionBillingRetry(device: "d", original: original, gracePeriodNanoseconds: 16_000_000_000),
        .transactionsCleared(device: "d"),
        .receiptRefreshStarted(device: "d", request: 3),
        .receiptDelivered(device: "d", request: 3, firstIndex: 100, entries: [original, original], isLast: true),
    ]

    @Test("Every event kind survives encoding and decoding unchanged", arguments: everyEvent)
    func eventRoundTrip(event: Event) throws {
        for id in [nil, CommandID(origin: "apps", number: 1 << 40)] {
            let bytes = EventCodec.encode(event, commandID: id)
            let decoded = try EventCodec.decodeEvent(bytes)
            #expect(decoded.event == event)
            #expect(decoded.commandID == id)
        }
    }

    @Test("An Ask to Buy payment (simulatesAskToBuyInSandbox) round-trips, with and without request data; a plain one writes the flags byte logs always held (F-S1)")
    func askToBuyPaymentRoundTrip() throws {
        for data in [nil, [UInt8]([9, 8])] {
            var payment = Payment(productIdentifier: "p", requestData: data)
            payment.simulatesAskToBuyInSandbox = true
            let decoded = try EventCodec.decodeEvent(EventCodec.encode(.transactionAdded(Self.key, payment), commandID: nil))
            #expect(decoded.event == .transactionAdded(Self.key, payment))
            let command = try EventCodec.decodeCommand(EventCodec.encode(Command(id: CommandID(origin: "o", number: 1), body: .addPayment(device: "d", payment: payment))))
            #expect(command.body == .addPayment(device: "d", payment: payment))
        }
        let plain = EventCodec.encode(.transactionAdded(Self.key, Payment(productIdentifier: "p")), commandID: nil)
        var asking = Payment(productIdentifier: "p")
        asking.simulatesAskToBuyInSandbox = true
        let flagged = EventCodec.encode(.transactionAdded(Self.key, asking), commandID: nil)
        // The same bytes but the flags byte, the last one: 0 (no request data) against 2 (Ask to Buy).
        #expect(plain.dropLast() == flagged.dropLast())
        #expect(plain.last == 0 && flagged.last == 2)
    }

    static let everyCommand: [CommandBody] = [
        .registerDevice(device: "d", account: "a"), .launchApp(device: "d"), .terminateApp(device: "d"),
        .attachObserver(device: "d", observer: "o"), .detachObserver(device: "d", observer: "o"),
        .setPaymentsAllowed(device: "d", allowed: true),
        .addPayment(device: "d", payment: Payment(productIdentifier: "p", quantity: -1, applicationUsername: "u")),
        .finishTransaction(key), .restoreCompletedTransactions(device: "d", applicationUsername: "u"),
        .startDownloads([download]), .pauseDownloads([download]), .resumeDownloads([download, download]), .cancelDownloads([]),
        .decidePurchase(key, .purchased(charged: true)), .decidePurchase(key, .failed(StoreError(.unknown, "?"))),
        .decidePurchase(key, .deferred),
        .completeRestore(device: "d", restore: 1, firstIndex: 3, originals: [original, original], isLast: true),
        .failRestore(device: "d", restore: 1, error: StoreError(.unknown, "no")),
        .reportDownloadProgress(download, progress: 0.5, timeRemaining: 3),
        .completeDownload(download, contentURL: "/c"), .failDownload(download, error: StoreError(.unknown, "x")),
        .recordAppAction(.contentGranted(key, observer: "o", productIdentifier: "p")),
        .decidePurchase(key, .declined),
        .renewSubscription(device: "d", original: original), .expireSubscription(device: "d", original: original),
        .refundPurchase(device: "d", original: original),
        .resumeInterruptedPurchase(device: "d", interrupted: key, payment: Payment(productIdentifier: "p", quantity: 2, applicationUsername: "u"),
                                   charged: false),
        .beginBillingRetry(device: "d", original: original, gracePeriodNanoseconds: 0),
        .clearTransactions(device: "d"),
        .refreshReceipt(device: "d"),
        .deliverReceipt(device: "d", request: 2, firstIndex: 0, entries: [original], isLast: false),
    ]

    @Test("Event.typeNames lists every event kind's name once (log cat --type takes them)")
    func typeNames() {
        #expect(Set(Self.everyEvent.map(\.name)) == Set(Event.typeNames))
        #expect(Set(Event.typeNames).count == Event.typeNames.count)
    }

    @Test("Every command kind survives encoding and decoding unchanged", arguments: everyCommand)
    func commandRoundTrip(body: CommandBody) throws {
        let command = Command(id: CommandID(origin: "store", number: 9), body: body)
        #expect(try EventCodec.decodeCommand(EventCodec.encode(command)) == command)
    }

    @Test("Truncated payloads are refused with an offset, never a crash")
    func truncation() {
        for event in Self.everyEvent {
            let bytes = EventCodec.encode(event, commandID: CommandID(origin: "o", number: 1))
            for length in 0..<bytes.count {
                #expect(throws: DecodingFailure.self) { try EventCodec.decodeEvent(Array(bytes[0..<length])) }
            }
        }
    }

    @Test("Garbage, an unknown version, an unknown tag and trailing bytes are refused with a reason")
    func garbage() throws {
        var random = SystemRandomNumberGenerator()
        for _ in 0..<2_000 {
            let bytes = (0..<Int.random(in: 0..<64, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) }
            _ = try? EventCodec.decodeEvent(bytes)  // Must not trap, whatever it returns.
            _ = try? EventCodec.decodeCommand(bytes)
        }
        var valid = EventCodec.encode(.appLaunched(device: "d"), commandID: nil)
        valid[0] = 9
        let version = #expect(throws: DecodingFailure.self) { try EventCodec.decodeEvent(valid) }
        #expect(version?.reason.contains("version 9") == true)
        let unknownTag: [UInt8] = [EventCodec.formatVersion, 0, 200]
        let tag = #expect(throws: DecodingFailure.self) { try EventCodec.decodeEvent(unknownTag) }
        #expect(tag?.reason.contains("unknown event tag 200") == true)
        let trailing = EventCodec.encode(.appLaunched(device: "d"), commandID: nil) + [0]
        let extra = #expect(throws: DecodingFailure.self) { try EventCodec.decodeEvent(trailing) }
        #expect(extra?.reason.contains("trailing") == true)
        let hugeLength: [UInt8] = [EventCodec.formatVersion, 0, 3, 0xFF, 0xFF, 0xFF, 0xFF, 0x0F]
        #expect(throws: DecodingFailure.self) { try EventCodec.decodeEvent(hugeLength) }
        let commandWithoutID: [UInt8] = [1, 0, 2, 1, 100]
        #expect(throws: DecodingFailure.self) { try EventCodec.decodeCommand(commandWithoutID) }
    }

    @Test("Varints and zigzag integers round-trip at their extremes")
    func integers() throws {
        var writer = BinaryWriter()
        let unsigned: [UInt64] = [0, 1, 127, 128, 16_383, 16_384, .max]
        let signed: [Int64] = [0, -1, 1, .min, .max]
        for value in unsigned { writer.write(varint: value) }
        for value in signed { writer.write(signed: value) }
        let (decodedUnsigned, decodedSigned, atEnd) = try writer.bytes.withUnsafeBytes { buffer throws -> ([UInt64], [Int64], Bool) in
            var reader = BinaryReader(buffer)
            let first = try unsigned.map { _ in try reader.readVarint() }
            let second = try signed.map { _ in try reader.readSigned() }
            return (first, second, reader.isAtEnd)
        }
        #expect(decodedUnsigned == unsigned)
        #expect(decodedSigned == signed)
        #expect(atEnd)
    }
}
