import Testing
@testable import StoreKitModel

/// Receipt pieces with introductory offers (F-O3): their own tags (event 35, command 29), written only
/// when an entry has an offer, so a piece without one keeps the bytes of tags 34 and 28 (R-R2).
@Suite struct ReceiptOfferCodecTests {
    static func entry(_ identifier: String, _ offer: IntroductoryOfferPeriod? = nil) -> OriginalTransaction {
        OriginalTransaction(transactionIdentifier: identifier, payment: Payment(productIdentifier: "plus.monthly", applicationUsername: "a"),
                            transactionDate: 7, introductoryOfferPeriod: offer)
    }

    static let flagged = [entry("d.1", .freeTrial), entry("d.2"), entry("d.3", .introductoryPrice)]
    static let plain = [entry("d.1"), entry("d.2"), entry("d.3")]

    /// The tag byte of an event encoded without a command id: after the version and the absent-id byte.
    static func eventTag(_ event: Event) -> UInt8 { EventCodec.encode(event, commandID: nil)[2] }

    @Test("F-O3: a receiptDelivered piece with an offer is tag 35 and decodes with each entry's offer; without one it is tag 34, as before")
    func eventTags() throws {
        let withOffers = Event.receiptDelivered(device: "d", request: 2, firstIndex: 100, entries: Self.flagged, isLast: true)
        let withoutOffers = Event.receiptDelivered(device: "d", request: 2, firstIndex: 100, entries: Self.plain, isLast: true)
        #expect(Self.eventTag(withOffers) == 35)
        #expect(Self.eventTag(withoutOffers) == 34)
        let id = CommandID(origin: "store.0", number: 4)
        let decoded = try EventCodec.decodeEvent(EventCodec.encode(withOffers, commandID: id))
        #expect(decoded.commandID == id)
        #expect(decoded.event == withOffers)
        guard case .receiptDelivered(_, _, _, let entries, _) = decoded.event else { Issue.record("not a receipt piece"); return }
        #expect(entries.map(\.isTrialPeriod) == [true, false, false])
        #expect(entries.map(\.isInIntroductoryOfferPeriod) == [false, false, true])
        #expect(try EventCodec.decodeEvent(EventCodec.encode(withoutOffers, commandID: id)).event == withoutOffers)
        // The one name for both forms: `log cat --type receiptDelivered` finds either.
        #expect(withOffers.name == "receiptDelivered")
    }

    @Test("F-O3: tag 35 is tag 34's layout with one offer byte after each entry (0 none, 1 free trial, 2 introductory price)")
    func layout() {
        let withOffers = EventCodec.encode(.receiptDelivered(device: "d", request: 1, firstIndex: 0, entries: Self.flagged, isLast: true), commandID: nil)
        let withoutOffers = EventCodec.encode(.receiptDelivered(device: "d", request: 1, firstIndex: 0, entries: Self.plain, isLast: true), commandID: nil)
        let entryLength = (withoutOffers.count - EventCodec.encode(
            .receiptDelivered(device: "d", request: 1, firstIndex: 0, entries: [], isLast: true), commandID: nil).count) / 3
        #expect(withOffers.count == withoutOffers.count + 3)
        // Header (version, no id, tag, device, request, firstIndex, isLast, count) then each entry and its byte.
        let header = withoutOffers.count - 3 * entryLength
        #expect(Array(withOffers[3..<header]) == Array(withoutOffers[3..<header]))
        for index in 0..<3 {
            let start = header + index * (entryLength + 1)
            #expect(Array(withOffers[start..<start + entryLength]) == Array(withoutOffers[header + index * entryLength..<header + (index + 1) * entryLength]))
            #expect(withOffers[start + entryLength] == [1, 0, 2][index])
        }
    }

    @Test("F-O3: a deliverReceipt command with an offer is tag 29 and round-trips; without one it is tag 28's bytes")
    func commandTags() throws {
        let withOffers = Command(id: CommandID(origin: "store.0", number: 9),
                                 body: .deliverReceipt(device: "d", request: 1, firstIndex: 0, entries: Self.flagged, isLast: false))
        let withoutOffers = Command(id: CommandID(origin: "store.0", number: 9),
                                    body: .deliverReceipt(device: "d", request: 1, firstIndex: 0, entries: Self.plain, isLast: false))
        #expect(try EventCodec.decodeCommand(EventCodec.encode(withOffers)) == withOffers)
        #expect(try EventCodec.decodeCommand(EventCodec.encode(withoutOffers)) == withoutOffers)
        let prefix = EventCodec.encode(Command(id: withOffers.id, body: .refreshReceipt(device: "d"))).count - 3  // tag, then "d"
        #expect(EventCodec.encode(withOffers)[prefix] == 29)
        #expect(EventCodec.encode(withoutOffers)[prefix] == 28)
        // A refused piece keeps its whole body, offers included (commandRejected embeds the command's tag).
        let rejected = Event.commandRejected(withOffers.body, Rejection(.invalidArgument, "out of order"))
        #expect(try EventCodec.decodeEvent(EventCodec.encode(rejected, commandID: withOffers.id)).event == rejected)
    }

    @Test("F-O3: an unknown offer byte, or a truncated piece with offers, is refused with a reason, never a crash")
    func malformedOffer() {
        var bytes = EventCodec.encode(.receiptDelivered(device: "d", request: 1, firstIndex: 0, entries: [Self.entry("d.1", .freeTrial)], isLast: true),
                                      commandID: nil)
        bytes[bytes.count - 1] = 3
        let failure = #expect(throws: DecodingFailure.self) { try EventCodec.decodeEvent(bytes) }
        #expect(failure?.reason.contains("unknown introductory offer period 3") == true)
        for length in 0..<bytes.count {
            #expect(throws: DecodingFailure.self) { try EventCodec.decodeEvent(Array(bytes[0..<length])) }
        }
    }
}
