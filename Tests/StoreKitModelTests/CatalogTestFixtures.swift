import Foundation
import Testing
@testable import StoreKitModel

/// Finds shared test data and makes scratch files for catalog tests.
enum CatalogTestFixtures {
    /// The `.storekit` files the tests read, kept beside the tests (copies of
    /// `shared/testdata/storekit` and files written for the tests, all listed in Fixtures/README.md),
    /// so a clone runs them alone.
    static func storeKitDirectory(filePath: String = #filePath) -> URL {
        URL(fileURLWithPath: filePath).deletingLastPathComponent().appendingPathComponent("Fixtures", isDirectory: true)
    }

    static func storeKitFile(_ name: String) -> URL {
        storeKitDirectory().appendingPathComponent(name)
    }

    /// A fresh empty directory under the system temporary directory.
    static func scratchDirectory() throws -> URL {
        let directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("catalog-tests-\(UUID().uuidString)", isDirectory: true)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        return directory
    }

    /// Runs `body` expecting a catalog error and returns it.
    static func catalogError(_ body: () throws -> Catalog) throws -> CatalogError {
        // Typed-throws closures are not inferred at call sites yet, so the error is narrowed here.
        let thrown: any Error
        do {
            let catalog = try body()
            Issue.record("Expected a CatalogError, but got a catalog of \(catalog.products.count) products.")
            throw UnexpectedOutcome()
        } catch {
            thrown = error
        }
        guard let catalogError = thrown as? CatalogError else {
            Issue.record("Expected a CatalogError, but got \(thrown).")
            throw UnexpectedOutcome()
        }
        return catalogError
    }

    struct UnexpectedOutcome: Error {}
}
