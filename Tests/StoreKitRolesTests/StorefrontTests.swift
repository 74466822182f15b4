import StoreKitModel
import StoreKitRoles
import Testing

/// SKPaymentQueue's `storefront` comes from the catalog's `_storefront` test setting (F-S4).
@Suite struct StorefrontTests {
    @Test("F-S4: a queue's storefront is the catalog's _storefront; without one there is none")
    func storefrontFromSettings() {
        var catalog = Catalog.sample
        #expect(PaymentQueue(device: "device-0001", catalog: catalog, choices: SeededChoices(seed: 1)).storefront == nil)
        catalog.testSettings.storefront = "FRA"
        let queue = PaymentQueue(device: "device-0001", catalog: catalog, choices: SeededChoices(seed: 1))
        #expect(queue.storefront?.countryCode == "FRA")
        #expect(queue.storefront?.identifier == "FRA")
    }
}
