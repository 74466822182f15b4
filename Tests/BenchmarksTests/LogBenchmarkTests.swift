import Benchmarks
import EventLog
import Foundation
import Testing

@Suite struct LogBenchmarkTests {
    @Test("the benchmark measures every record of the log and of each baseline, and durability latency of each")
    func smallRun() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("log-benchmark-\(UUID().uuidString)", isDirectory: true)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        do {
            var configuration = LogBenchmark.Configuration(directory: directory)
            configuration.recordsAlways = 20
            configuration.recordsGroupCommit = 3_000
            configuration.recordsOperatingSystem = 3_000
            configuration.recordsRead = 3_000
            configuration.groupCommitMaximumRecords = 8
            let results = try LogBenchmark.run(configuration)
            #expect(results.map(\.log.records) == [20, 3_000, 3_000])
            #expect(results.map(\.baseline.records) == [20, 3_000, 3_000])
            for result in results where result.policy != .operatingSystem {
                #expect(result.log.appendToDurable?.samples == UInt64(result.log.records), "\(result.policy)")
                #expect(result.baseline.appendToDurable?.samples == UInt64(result.baseline.records), "\(result.policy)")
            }
            let read = try LogBenchmark.runRead(configuration)
            #expect(read.log.records == 3_000 && read.rawScan.records == 3_000)
            #expect(read.log.recordsPerSecond > 0 && read.rawScan.recordsPerSecond > 0)
            #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path).isEmpty)
        }
    }
}
