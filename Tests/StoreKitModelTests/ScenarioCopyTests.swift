import Foundation
import StoreKitRoles
import Testing
@testable import StoreKitModel

/// `Scenario.unsharedCopy()`: what each exploration worker runs, so that threads do not share the
/// reference counts of the catalog's strings.
@Suite struct ScenarioCopyTests {
    /// Where a string's bytes live: inside the string for up to 15 bytes, in a heap object beyond.
    private static func storage(_ text: String) -> UnsafeRawPointer? {
        guard text.utf8.count > 15 else { return nil }
        return text.utf8.withContiguousStorageIfAvailable { UnsafeRawPointer($0.baseAddress!) } ?? nil
    }

    @Test("the copy of every fixture's catalog and of the built-in sample is equal, and shares none of its long strings")
    func copiesAreEqualAndUnshared() throws {
        let files = try FileManager.default.contentsOfDirectory(at: CatalogTestFixtures.storeKitDirectory(), includingPropertiesForKeys: nil)
            .filter { $0.pathExtension == "storekit" }
        let catalogs = try [Catalog.sample] + files.map { try Catalog.load(contentsOf: $0) }
        #expect(catalogs.count >= 9)
        var longIdentifiers = 0
        for catalog in catalogs {
            let scenario = Scenario(seed: 7, devices: 2, catalog: catalog)
            let copy = scenario.unsharedCopy()
            #expect(copy.catalog == scenario.catalog)
            #expect(copy.catalogSource == scenario.catalogSource)
            for (original, copied) in zip(scenario.catalog.products, copy.catalog.products) {
                guard let before = Self.storage(original.identifier) else { continue }
                longIdentifiers += 1
                #expect(Self.storage(copied.identifier) != before, "\(original.identifier) is still shared")
            }
        }
        #expect(longIdentifiers > 0, "the catalogs have product identifiers longer than 15 bytes")
    }
}
