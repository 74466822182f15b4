import Benchmarks
import Testing

/// `sksim bench signing`'s measurements: each counts real signatures, and the baseline signs too.
@Suite struct SigningBenchmarkTests {
    @Test func eachMeasurementSignsAndTheBaselineIsRawSignatures() async throws {
        let result = try await SigningBenchmark.run(seconds: 0.05)
        #expect(result.signedTransactions.operations > 0 && result.receipts.operations > 0 && result.rawSignatures.operations > 0)
        #expect(result.signedTransactions.seconds >= 0.05)
        // A JWS costs at least the raw signature it contains.
        #expect(result.ratioToRawSignatures > 0 && result.ratioToRawSignatures <= 1.5)
    }
}
