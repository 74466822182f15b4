import Foundation
import StoreKitTestSupport
import Testing

/// The trace page as people see it: `sksim explore` (the real binary) writes trace.html, and
/// headless Chromium lays it out. The diagram must render, not only be in the file: every
/// lifeline and every message gets a box of its own with a size, in its place.
@Suite(.serialized) struct TraceBrowserTests {
    static let repositoryRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// What the measuring script reads from the laid-out SVG: boxes as [x, y, width, height].
    struct Measured: Decodable {
        struct Lifeline: Decodable { var name: String; var label: [Double]; var line: [Double] }
        struct Message: Decodable { var kind: String; var from: String; var to: String; var text: String; var textBox: [Double]; var shape: [Double] }
        var svg: [Double]
        var lifelines: [Lifeline]
        var messages: [Message]
    }

    /// Run in the browser after layout; writes what it measured into the page, where --dump-dom shows it.
    static let measuringScript = """
        <script>
        const box = element => { const b = element.getBBox(); return [b.x, b.y, b.width, b.height]; };
        const svg = document.querySelector('svg');
        const measured = {
          svg: [svg.getBoundingClientRect().width, svg.getBoundingClientRect().height],
          lifelines: [...document.querySelectorAll('g.lifeline')].map(group => ({ name: group.dataset.name,
            label: box(group.querySelector('text')), line: box(group.querySelector('line')) })),
          messages: [...document.querySelectorAll('g.message')].map(group => ({ kind: group.dataset.kind, from: group.dataset.from,
            to: group.dataset.to, text: group.querySelector('text').textContent, textBox: box(group.querySelector('text')),
            shape: box(group.querySelector('line, rect')) })),
        };
        const out = document.createElement('pre');
        out.id = 'measured';
        out.textContent = JSON.stringify(measured);
        document.body.appendChild(out);
        </script>
        """

    @Test("The trace of a found violation renders in Chromium: every lifeline (device, each observer, queue, store, downloader) and every message is laid out in place (R-Q5)")
    func traceRendersInChromium() throws {
        let directory = URL(fileURLWithPath: "/tmp/ske-\(UUID().uuidString.prefix(8))", isDirectory: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let sksim = try SKSimProgram.executable(packageRoot: Self.repositoryRoot)
        let outcome = try SKSimProgram.run(sksim, ["explore", "--observers", "sdkFinishesEarly,deliverThenFinish", "--strategy", "pct",
                                                   "--seed", "42", "--report", directory.path, "--json"], in: Self.repositoryRoot)
        #expect(outcome.status == 1, "\(outcome.error)")
        let violation = try #require((outcome.json["violations"] as? [[String: Any]])?.first, "\(outcome.output)")
        let page = URL(fileURLWithPath: try #require(violation["trace"] as? String))
        let mermaid = try String(contentsOf: URL(fileURLWithPath: try #require(violation["mermaid"] as? String)), encoding: .utf8)
        guard let dump = try HeadlessChromium.dumpDOM(page) else {
            print(HeadlessChromium.skipMessage("the explorer's trace.html"))
            return
        }
        // The page as written: it loads, and the browser's DOM holds the diagram and its text.
        #expect(dump.status == 0, "\(dump.error)")
        #expect(dump.output.contains("<svg") && dump.output.contains("VIOLATION grant-before-finish"))

        // The same page with a measuring script: the laid-out boxes.
        let html = try String(contentsOf: page, encoding: .utf8)
        let measuringPage = directory.appendingPathComponent("measured.html")
        try html.replacingOccurrences(of: "</body>", with: Self.measuringScript + "</body>").write(to: measuringPage, atomically: true, encoding: .utf8)
        let measuredDump = try #require(try HeadlessChromium.dumpDOM(measuringPage))
        #expect(measuredDump.status == 0, "\(measuredDump.error)")
        let start = try #require(measuredDump.output.range(of: "<pre id=\"measured\">"), "the measuring script did not run: \(measuredDump.output.suffix(500))")
        let end = try #require(measuredDump.output.range(of: "</pre>", range: start.upperBound..<measuredDump.output.endIndex))
        let text = measuredDump.output[start.upperBound..<end.lowerBound]
            .replacingOccurrences(of: "&lt;", with: "<").replacingOccurrences(of: "&gt;", with: ">").replacingOccurrences(of: "&amp;", with: "&")
        let measured = try JSONDecoder().decode(Measured.self, from: Data(text.utf8))

        #expect(measured.svg[0] > 500 && measured.svg[1] > 200, "the diagram has no size: \(measured.svg)")
        // Lifelines: the device, each observer, then queue, store and downloader, left to right.
        #expect(measured.lifelines.map(\.name) == ["device", "deliverThenFinish-2", "sdkFinishesEarly-1", "queue", "store", "downloader"])
        var centers: [String: Double] = [:]
        var previousRight = -Double.infinity
        for lifeline in measured.lifelines {
            #expect(lifeline.label[2] > 10 && lifeline.label[3] > 5, "label \(lifeline.name) not laid out: \(lifeline.label)")
            #expect(lifeline.label[0] > previousRight, "label \(lifeline.name) overlaps the one before it")
            previousRight = lifeline.label[0] + lifeline.label[2]
            #expect(lifeline.line[3] > 100, "the lifeline of \(lifeline.name) is not drawn down the page")
            centers[lifeline.name] = lifeline.line[0]
        }
        // Messages: as many as the Mermaid text has, each with its text laid out and its arrow
        // running from the sender's lifeline to the receiver's, top to bottom in log order.
        let mermaidMessages = mermaid.split(separator: "\n").filter { $0.contains("->>") || $0.contains("-->>") || $0.contains("Note over") }
        #expect(measured.messages.count == mermaidMessages.count)
        #expect(measured.messages.count >= 10)
        var previousTop = -Double.infinity
        for message in measured.messages {
            #expect(message.textBox[2] > 5, "\(message.text) has no laid-out text")
            #expect(message.shape[1] > previousTop, "\(message.text) is not below the message before it")
            previousTop = message.shape[1]
            if message.kind == "note" { continue }
            let from = try #require(centers[message.from], "\(message.from) is not a lifeline")
            let to = try #require(centers[message.to], "\(message.to) is not a lifeline")
            #expect(abs(message.shape[0] - min(from, to)) < 1 && abs(message.shape[0] + message.shape[2] - max(from, to)) < 1,
                    "\(message.text): arrow \(message.shape) does not join \(message.from) and \(message.to)")
        }
        for sender in ["device", "sdkFinishesEarly-1", "deliverThenFinish-2", "store"] {
            #expect(measured.messages.contains { $0.from == sender && $0.kind == "arrow" }, "no command drawn from \(sender)")
        }
        #expect(measured.messages.contains { $0.to == "deliverThenFinish-2" && $0.text.hasPrefix("updatedTransactions") })
        #expect(measured.messages.filter { $0.kind == "note" && $0.text == "VIOLATION grant-before-finish" }.count == 1)
    }
}
