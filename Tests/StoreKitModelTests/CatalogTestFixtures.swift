import Foundation
import Testing
@testable import StoreKitModel

/// Finds shared test data and makes scratch files for catalog tests.
enum CatalogTestFixtures {
    /// The `shared/testdata/storekit` directory: found by walking up from this file, because the
    /// package may live at /work/main or /work/parts/catalog with /work/shared beside either.
    static func storeKitDirectory(filePath: String = #filePath) throws -> URL {
        var directory = URL(fileURLWithPath: filePath).deletingLastPathComponent()
        while directory.path != "/" {
            let candidate = directory.appendingPathComponent("shared/testdata/storekit", isDirectory: true)
            if FileManager.default.fileExists(atPath: candidate.path) {
                return candidate
            }
            directory = directory.deletingLastPathComponent()
        }
        throw FixtureMissing(searchedFrom: filePath)
    }

    struct FixtureMissing: Error, CustomStringConvertible {
        var searchedFrom: String
        var description: String { "No shared/testdata/storekit directory above \(searchedFrom)." }
    }

    static func storeKitFile(_ name: String) throws -> URL {
        try storeKitDirectory().appendingPathComponent(name)
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
