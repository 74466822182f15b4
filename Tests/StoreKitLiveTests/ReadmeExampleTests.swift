import Foundation
import Testing

/// The README's deterministic example, run as printed: its output must match the README's
/// text exactly, so the README cannot drift from what sksim prints.
@Suite struct ReadmeExampleTests {
    @Test("Every `$ sksim simulate …` example in README.md prints exactly what the README shows")
    func simulateExamplesReproduce() throws {
        let readme = try String(contentsOf: TopologyTests.repositoryRoot.appendingPathComponent("README.md"), encoding: .utf8)
        let lines = readme.components(separatedBy: "\n")
        var checked = 0
        for (index, line) in lines.enumerated() where line.hasPrefix("$ sksim simulate ") && index + 1 < lines.count {
            let scratch = CommandLineTests.Scratch()
            let arguments = line.dropFirst("$ sksim ".count).split(separator: " ").map(String.init)
            let outcome = try CommandLineTests.sksim(arguments, in: scratch.url)
            #expect(outcome.status == 0, "\(outcome.error)")
            #expect(outcome.output.trimmingCharacters(in: .newlines) == lines[index + 1], "README line \(index + 2) no longer matches `\(line)`")
            checked += 1
        }
        #expect(checked >= 1)
    }
}
