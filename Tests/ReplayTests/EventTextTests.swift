import SKSimCommands
import StoreKitModel
import Testing

/// `sksim log cat`'s text form of events (also the context of a replay's divergence): Swift's layout of each case, without module or type
/// prefixes and `Optional(…)` wrappers.
@Suite("log cat's text form of events")
struct EventTextTests {
    let original = OriginalTransaction(
        transactionIdentifier: "phone.1", payment: Payment(productIdentifier: "com.example.pack", applicationUsername: "account-1"),
        transactionDate: 537_540_945, introductoryOfferPeriod: .freeTrial)

    @Test("optional fields print their value or nil")
    func optionals() {
        #expect(EventText.of(.restoreStarted(device: "phone", restore: 1, applicationUsername: "account-1"))
            == #"restoreStarted(device: "phone", restore: 1, applicationUsername: "account-1")"#)
        #expect(EventText.of(.restoreStarted(device: "phone", restore: 2, applicationUsername: nil))
            == #"restoreStarted(device: "phone", restore: 2, applicationUsername: nil)"#)
    }

    @Test("nested values print without their module and type")
    func nestedValues() {
        let key = TransactionKey(device: "phone", number: 2)
        #expect(EventText.of(.transactionRestored(key, restore: 1, identifier: "phone.2", original: original, downloads: []))
            == #"transactionRestored(phone#2, restore: 1, identifier: "phone.2", original: OriginalTransaction(transactionIdentifier: "phone.1", "#
            + #"payment: com.example.pack ×1 for account-1, transactionDate: 537540945, introductoryOfferPeriod: freeTrial), downloads: [])"#)
        let rejected = Event.commandRejected(
            .addPayment(device: "phone", payment: Payment(productIdentifier: "no.such")), Rejection(.unknownProduct, "not in the catalog"))
        let text = EventText.of(rejected)
        #expect(text.hasPrefix(#"commandRejected(addPayment(device: "phone", payment: no.such ×1), "#), "\(text)")
        #expect(!text.contains("StoreKitModel") && !text.contains("CommandBody"))
    }

    @Test("cases without fields print their name; strings are quoted and escaped")
    func plainCases() {
        #expect(EventText.of(.transactionFinished(TransactionKey(device: "phone", number: 3))) == "transactionFinished(phone#3)")
        #expect(EventText.of(.appLaunched(device: "a \"quoted\"\nname")) == #"appLaunched(device: "a \"quoted\"\nname")"#)
    }
}
