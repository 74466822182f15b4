import Foundation
import Testing
@testable import StoreKitModel

/// Payments with a promotional offer discount (F-O5) and receipt entries at one (F-O7): their own
/// tags, written only when there is a discount or a promotional entry, so every other log keeps its
/// bytes; and the simulator's signature (F-O6).
@Suite struct PaymentDiscountCodecTests {
    static let discount = PaymentDiscount(identifier: "winback", keyIdentifier: "SKSIMKEY01",
                                          nonce: "e44af1a6-4bae-498d-9f5c-865edc89d6ad", signature: "c2ln", timestamp: 1_700_000_000_000)
    static let plain = Payment(productIdentifier: "plus.weekly", applicationUsername: "a")
    static var discounted: Payment {
        var payment = plain
        payment.discount = discount
        return payment
    }

    /// The tag byte of an event encoded without a command id: after the version and the absent-id byte.
    static func eventTag(_ event: Event) -> UInt8 { EventCodec.encode(event, commandID: nil)[2] }

    @Test("F-O6: SHA-256 and HMAC-SHA256 give the standard test vectors (FIPS 180-2, RFC 4231 case 2)")
    func digests() {
        func hex(_ bytes: [UInt8]) -> String { bytes.map { String(format: "%02x", $0) }.joined() }
        #expect(hex(SHA256.hash(Array("abc".utf8))) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        #expect(hex(SHA256.hash([])) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        #expect(hex(SHA256.hash(Array("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq".utf8)))
            == "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1")
        #expect(hex(SHA256.authenticationCode(Array("what do ya want for nothing?".utf8), key: Array("Jefe".utf8)))
            == "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
        // A key longer than a block is hashed first (RFC 4231 case 6).
        #expect(hex(SHA256.authenticationCode(Array("Test Using Larger Than Block-Size Key - Hash Key First".utf8), key: [UInt8](repeating: 0xaa, count: 131)))
            == "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54")
    }

    @Test("F-O6: the signature is base64 HMAC-SHA256 of the fields joined by U+2063, as docs/storekit-fidelity.md computes it in Python")
    func signature() {
        let key = PromotionalOfferKey.simulator
        // python3: base64.b64encode(hmac.new(b"sksim-promotional-offers", "\u2063".join([...]).encode(), hashlib.sha256).digest())
        #expect(key.signature(productIdentifier: "example.pro.yearly", offerIdentifier: "comeback", applicationUsername: "account-0003",
                              nonce: "e44af1a6-4bae-498d-9f5c-865edc89d6ad", timestamp: 1) == "/IOM0fGpWV37eoZ++DUQYniYx5ipWrkGWkkjMYZwbOo=")
        let payment = Payment(productIdentifier: "example.pro.yearly", applicationUsername: "account-0003")
        let signed = key.discount(for: payment, offerIdentifier: "comeback", nonce: "E44AF1A6-4BAE-498D-9F5C-865EDC89D6AD", timestamp: 1)
        #expect(key.isValid(signed, on: payment))
        // Any signed field changed, or another key, and it is no longer valid.
        var other = payment
        other.applicationUsername = "account-0004"
        #expect(!key.isValid(signed, on: other))
        var later = signed
        later.timestamp = 2
        #expect(!key.isValid(later, on: payment))
        #expect(!PromotionalOfferKey(identifier: key.identifier, secret: "another").isValid(signed, on: payment))
        let nonce = PromotionalOfferKey.nonce(from: "device-0001 1")
        #expect(nonce == PromotionalOfferKey.nonce(from: "device-0001 1") && nonce != PromotionalOfferKey.nonce(from: "device-0001 2"))
        #expect(UUID(uuidString: nonce) != nil && nonce == nonce.lowercased() && Array(nonce)[14] == "4")
    }

    @Test("F-O5: transactionAdded with a discount is tag 36 and round-trips; without one it is tag 8, byte for byte as before")
    func eventTags() throws {
        let key = TransactionKey(device: "d", number: 3)
        let withDiscount = Event.transactionAdded(key, Self.discounted)
        let withoutDiscount = Event.transactionAdded(key, Self.plain)
        #expect(Self.eventTag(withDiscount) == 36)
        #expect(Self.eventTag(withoutDiscount) == 8)
        let id = CommandID(origin: "apps.0", number: 4)
        #expect(try EventCodec.decodeEvent(EventCodec.encode(withDiscount, commandID: id)).event == withDiscount)
        #expect(try EventCodec.decodeEvent(EventCodec.encode(withoutDiscount, commandID: id)).event == withoutDiscount)
        // Tag 36 is tag 8's bytes followed by the discount's five fields.
        let plainBytes = EventCodec.encode(withoutDiscount, commandID: nil)
        let discountedBytes = EventCodec.encode(withDiscount, commandID: nil)
        #expect(Array(discountedBytes[3..<plainBytes.count]) == Array(plainBytes[3...]))
        #expect(withDiscount.name == "transactionAdded")
        // The fast fold of a log reads tag 36 the plain way, to the same projection.
        var fold = EncodedEventFold()
        for (sequence, event) in [(UInt64(1), Event.deviceRegistered(device: "d", account: "a")),
                                  (2, .transactionAdded(TransactionKey(device: "d", number: 1), Self.discounted))] {
            try EventCodec.encode(event, commandID: nil).withUnsafeBytes { try fold.apply(sequence: sequence, timestamp: 0, payload: $0) }
        }
        #expect(fold.projection.transaction(TransactionKey(device: "d", number: 1))?.payment.discount == Self.discount)
    }

    @Test("F-O5: addPayment with a discount is command tag 30 and round-trips, refused or not; without one it keeps tag 7")
    func commandTags() throws {
        let id = CommandID(origin: "apps.0", number: 9)
        let withDiscount = Command(id: id, body: .addPayment(device: "d", payment: Self.discounted))
        let withoutDiscount = Command(id: id, body: .addPayment(device: "d", payment: Self.plain))
        #expect(try EventCodec.decodeCommand(EventCodec.encode(withDiscount)) == withDiscount)
        #expect(try EventCodec.decodeCommand(EventCodec.encode(withoutDiscount)) == withoutDiscount)
        let prefix = EventCodec.encode(Command(id: id, body: .launchApp(device: "d"))).count - 3  // tag, then "d"
        #expect(EventCodec.encode(withDiscount)[prefix] == 30)
        #expect(EventCodec.encode(withoutDiscount)[prefix] == 7)
        let rejected = Event.commandRejected(withDiscount.body, Rejection(.invalidArgument, "no"))
        #expect(try EventCodec.decodeEvent(EventCodec.encode(rejected, commandID: id)).event == rejected)
    }

    @Test("F-O7: a receipt piece with a promotional entry is event tag 37 and command tag 31, each entry with its offer byte and offer identifier")
    func receiptTags() throws {
        let entries = [
            OriginalTransaction(transactionIdentifier: "d.1", payment: Self.plain, transactionDate: 1, introductoryOfferPeriod: .freeTrial),
            OriginalTransaction(transactionIdentifier: "d.2", payment: Self.plain, transactionDate: 2, promotionalOfferIdentifier: "winback"),
            OriginalTransaction(transactionIdentifier: "d.3", payment: Self.plain, transactionDate: 3),
        ]
        let event = Event.receiptDelivered(device: "d", request: 1, firstIndex: 0, entries: entries, isLast: true)
        #expect(Self.eventTag(event) == 37)
        #expect(try EventCodec.decodeEvent(EventCodec.encode(event, commandID: nil)).event == event)
        let command = Command(id: CommandID(origin: "store.0", number: 2),
                              body: .deliverReceipt(device: "d", request: 1, firstIndex: 0, entries: entries, isLast: true))
        #expect(try EventCodec.decodeCommand(EventCodec.encode(command)) == command)
        let prefix = EventCodec.encode(Command(id: command.id, body: .refreshReceipt(device: "d"))).count - 3
        #expect(EventCodec.encode(command)[prefix] == 31)
        // Introductory marks alone keep tag 35.
        let introductory = Event.receiptDelivered(device: "d", request: 1, firstIndex: 0, entries: [entries[0], entries[2]], isLast: true)
        #expect(Self.eventTag(introductory) == 35)
    }

    @Test("F-O5: a truncated payment discount is refused with a reason, never a crash")
    func truncated() {
        let bytes = EventCodec.encode(.transactionAdded(TransactionKey(device: "d", number: 1), Self.discounted), commandID: nil)
        for length in 0..<bytes.count {
            #expect(throws: DecodingFailure.self) { try EventCodec.decodeEvent(Array(bytes[0..<length])) }
        }
    }
}
