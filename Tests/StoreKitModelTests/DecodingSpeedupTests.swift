import Foundation
import Testing
@testable import StoreKitModel

/// The decoder's ASCII fast path for strings and the projection's device slots are speed-ups
/// only: what they give back must equal what was encoded and what hashing gives.
@Suite struct DecodingSpeedupTests {
    @Test("Decoding gives back the events encoded, with short, long, ASCII and non-ASCII strings")
    func decodingGivesTheEncodedEvents() throws {
        var events: [Event] = []
        // Many distinct long strings and repeated ones, interleaved.
        for index in 0..<3_000 {
            let key = TransactionKey(device: "device-\(index % 7)", number: UInt64(index))
            let product = index % 3 == 0 ? "com.example.sksim.coins.small" : "com.example.sksim.product-\(index)"
            events.append(.transactionAdded(key, Payment(productIdentifier: product, quantity: 1, applicationUsername: "account-with-a-long-name-\(index % 5)")))
            events.append(.downloadFinished(DownloadKey(transaction: key, index: 0), contentURL: "content/device-\(index % 7)/\(index)/com.example.levels-1.0"))
            events.append(.commandRejected(.addPayment(device: "d", payment: Payment(productIdentifier: "ünïcödé product name, not ASCII")),
                                           Rejection(.unknownProduct, "a reason that is longer than sixteen bytes")))
        }
        for event in events {
            let bytes = EventCodec.encode(event, commandID: CommandID(origin: "apps.0", number: 1))
            let decoded = try EventCodec.decodeEvent(bytes)
            #expect(decoded.event == event)
        }
    }

    @Test("The projection finds every device by name, whichever was changed last")
    func deviceSlotsFindEveryDevice() {
        var projection = QueueProjection()
        var sequence: UInt64 = 0
        func apply(_ event: Event) {
            sequence += 1
            projection.apply(RecordedEvent(sequence: sequence, timestamp: 0, commandID: nil, event: event))
        }
        for index in 0..<50 { apply(.deviceRegistered(device: "device-\(index)", account: "account-\(index / 2)")) }
        for index in stride(from: 49, through: 0, by: -3) { apply(.appLaunched(device: "device-\(index)")) }
        apply(.appLaunched(device: "not-registered"))
        for index in 0..<50 {
            #expect(projection.device("device-\(index)")?.isRunning == ((49 - index) % 3 == 0))
            #expect(projection.device("device-\(index)")?.account == "account-\(index / 2)")
        }
        #expect(projection.device("not-registered") == nil)
        #expect(projection.deviceCount == 50)
        #expect(projection.devices.count == 50)
        #expect(projection.deviceNames == (0..<50).map { "device-\($0)" }.sorted())
        // Registering again replaces the state in place (as the dictionary did).
        apply(.deviceRegistered(device: "device-3", account: "other"))
        #expect(projection.device("device-3")?.account == "other")
        #expect(projection.device("device-3")?.isRunning == false)
        #expect(projection.deviceCount == 50)
    }
}
