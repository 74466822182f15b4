import AppStoreSigning
import ArgumentParser
import Foundation
import SKSimCommands

/// `sksim bench signing`: what signing App Store objects costs, beside raw P-256 signatures.
struct SigningBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "signing",
        abstract: "Signed transactions (ES256 JWS with x5c) and app receipts (CMS) per second, beside raw P-256 signatures.",
        discussion: """
            Each figure is one thread signing for --seconds with a chain made for the run. Baseline (same run, same key): \
            P256.Signing.PrivateKey.signature(for:) over the bytes a JWS signs (its header and payload). \
            ratioToRawSignatures is JWS/s over raw signatures/s: what jwt-kit's encoding and checks cost beside the \
            signature itself.

            JSON fields: signedTransactions, receipts and rawSignatures, each {operations, seconds, perSecond}; \
            ratioToRawSignatures.
            """)

    @Option(help: "Seconds for each of the three measurements.") var seconds = 3.0
    @Flag(help: "Print one JSON object.") var json = false
    @OptionGroup var results: BenchResultsOptions

    func validate() throws {
        guard seconds > 0, seconds <= 600 else { throw ValidationError("--seconds \(seconds) is out of range; use more than 0 and at most 600") }
    }

    func run() async throws {
        BenchCommand.warnIfDebug()
        let result = try await SigningBenchmark.run(seconds: seconds)
        func measurement(_ value: SigningBenchmark.Measurement) -> JSONValue {
            .object([("operations", .int(Int64(value.operations))), ("seconds", .double((value.seconds * 1000).rounded() / 1000)),
                     ("perSecond", .double(value.perSecond.rounded()))])
        }
        let object = JSONValue.object([
            ("signedTransactions", measurement(result.signedTransactions)), ("receipts", measurement(result.receipts)),
            ("rawSignatures", measurement(result.rawSignatures)),
            ("ratioToRawSignatures", .double((result.ratioToRawSignatures * 1000).rounded() / 1000)),
        ])
        results.record(bench: "signing", figures: object)
        if json {
            printLine(object.serialized())
            return
        }
        printLine(String(format: "signed transactions (ES256 JWS, x5c): %.0f/s; app receipts (CMS): %.0f/s; baseline raw P-256 signatures: %.0f/s; JWS/raw %.3f",
                         result.signedTransactions.perSecond, result.receipts.perSecond, result.rawSignatures.perSecond, result.ratioToRawSignatures))
    }
}
