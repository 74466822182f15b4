import StoreKitModel
import StoreKitRoles

/// The minimal trace as a sequence diagram: the device (the user's script and the OS), each
/// observer, the queue, the store and the downloader as lifelines. Built from the log (what the
/// queue did and who asked) and the app trace (which observer heard what, and who sent each
/// command), so nothing in it is guessed.
public struct TraceDiagram {
    public struct Message: Sendable, Hashable {
        public enum Kind: Sendable, Hashable { case arrow, reply, note }
        public var kind: Kind
        public var from: String
        public var to: String
        public var text: String
    }

    public private(set) var participants: [String] = []
    public private(set) var messages: [Message] = []
    public let title: String

    public init(events: [RecordedEvent], trace: AppTrace, violation: AppViolation) {
        title = "[\(violation.invariant.rawValue)] \(violation.message)"
        let multipleDevices = Set(events.compactMap(\.event.device)).count > 1
        func lifeline(_ device: String, _ name: String) -> String {
            multipleDevices ? "\(device.replacingOccurrences(of: "device-", with: "d"))/\(name)" : name
        }
        var senders: [UInt64: String] = [:]
        var bodies: [UInt64: CommandBody] = [:]
        var callbacks: [UInt64: [(String, String)]] = [:]
        // A kill is drawn where the app's next command (its termination) reaches the queue: after
        // every command it sent before dying. Keyed by that command's number.
        var kills: [UInt64: (lifeline: String, text: String)] = [:]
        var observers: [String] = []
        for entry in trace.entries {
            switch entry {
            case .command(let device, let sender, let body, let ordinal):
                // "device" is the user's script and the OS; an observer is drawn as itself, whatever its name.
                senders[ordinal] = lifeline(device, sender == "device" ? "device" : sender)
                bodies[ordinal] = body
            case .callback(let device, let observer, let callback, let detail, let cause):
                let name = lifeline(device, observer)
                if !observers.contains(name) { observers.append(name) }
                callbacks[cause, default: []].append((name, "\(callback)(\(detail))"))
            case .killed(let device, let dropped, let cause, let sentBefore):
                let text = dropped.isEmpty ? "app killed after #\(cause)"
                    : "app killed after #\(cause): never sent \(dropped.map(Self.describe).joined(separator: ", "))"
                kills[sentBefore + 1] = (lifeline(device, "device"), text)
            }
        }
        let devices = multipleDevices ? Set(events.compactMap(\.event.device)).sorted().map { lifeline($0, "device") } : ["device"]
        participants = devices + observers.sorted() + ["queue", "store", "downloader"]
        var messages: [Message] = []
        for recorded in events {
            let sequence = recorded.sequence
            if case .runStarted = recorded.event { continue }
            if case .downloadProgressed(_, let progress, _) = recorded.event, progress < 1 { continue }
            let label = Self.describe(recorded.event)
            if let id = recorded.commandID {
                let fromApps = id.origin.hasPrefix("apps")
                if fromApps, let kill = kills.removeValue(forKey: id.number) {
                    messages.append(Message(kind: .note, from: kill.lifeline, to: kill.lifeline, text: kill.text))
                }
                let from: String = if fromApps {
                    senders[id.number] ?? "device"
                } else if id.origin.hasPrefix("store") {
                    "store"
                } else {
                    "downloader"
                }
                if case .downloadCancelled = recorded.event, fromApps, case .finishTransaction? = bodies[id.number] {
                    // The queue cancels a running download when its transaction is finished: not the app's own command.
                    messages.append(Message(kind: .note, from: "queue", to: "queue", text: "\(sequence) \(label) by the queue (its transaction was finished)"))
                } else {
                    messages.append(Message(kind: .arrow, from: from, to: "queue", text: "\(sequence) \(label)"))
                }
            } else {
                messages.append(Message(kind: .note, from: "queue", to: "queue", text: "\(sequence) \(label)"))
            }
            switch recorded.event {
            case .transactionAdded, .restoreStarted:
                messages.append(Message(kind: .reply, from: "queue", to: "store", text: label))
            case .downloadStarted:
                messages.append(Message(kind: .reply, from: "queue", to: "downloader", text: label))
            default:
                break
            }
            for (observer, text) in callbacks[sequence] ?? [] {
                messages.append(Message(kind: .reply, from: "queue", to: observer, text: text))
            }
            if sequence == violation.sequence {
                messages.append(Message(kind: .note, from: "queue", to: "queue", text: "VIOLATION \(violation.invariant.rawValue)"))
            }
        }
        // A kill whose termination is not in the log (the run ended first) closes the trace.
        for number in kills.keys.sorted() {
            let kill = kills[number]!
            messages.append(Message(kind: .note, from: kill.lifeline, to: kill.lifeline, text: kill.text))
        }
        self.messages = messages
    }

    /// A command in a few words, for what a kill dropped: "finish t2", "grant t2".
    static func describe(_ body: CommandBody) -> String {
        switch body {
        case .finishTransaction(let key): return "finish t\(key.number)"
        case .startDownloads(let keys): return "start " + keys.map { "t\($0.transaction.number)/\($0.index)" }.joined(separator: " ")
        case .recordAppAction(let action):
            switch action {
            case .contentGranted(let key, _, _): return "grant t\(key.number)"
            case .contentKept(let key, _): return "keep t\(key.transaction.number)/\(key.index)"
            case .restoreShownDone(_, let restore, _): return "restore \(restore) shown done"
            case .failureShown(let key, _): return "failure of t\(key.number) shown"
            case .transactionReported(let key, _, let report): return "t\(key.number) reported: \(report)"
            }
        default: return body.name
        }
    }

    /// An event in a few words: "t2 purchased", "t2/1 finished".
    static func describe(_ event: Event) -> String {
        func transaction(_ key: TransactionKey) -> String { "t\(key.number)" }
        func download(_ key: DownloadKey) -> String { "t\(key.transaction.number)/\(key.index)" }
        func product(_ identifier: String) -> String { identifier.split(separator: ".").last.map(String.init) ?? identifier }
        switch event {
        case .runStarted: return "run started"
        case .deviceRegistered(_, let account): return "registered (\(account))"
        case .appLaunched: return "app launched"
        case .appTerminated: return "app terminated"
        case .observerAttached(_, let observer): return "attached \(observer)"
        case .observerDetached(_, let observer): return "detached \(observer)"
        case .paymentsAllowedChanged(_, let allowed): return "payments allowed \(allowed)"
        case .transactionAdded(let key, let payment): return "\(transaction(key)) purchasing \(product(payment.productIdentifier)) x\(payment.quantity)"
        case .transactionDeferred(let key): return "\(transaction(key)) deferred"
        case .askToBuyDeclined(let key): return "\(transaction(key)) declined by the parent (stays deferred)"
        case .subscriptionRenewed(let key, _, let original, _): return "\(transaction(key)) renewed \(product(original.payment.productIdentifier))"
        case .subscriptionExpired(_, let original): return "\(product(original.payment.productIdentifier)) subscription expired"
        case .entitlementsRevoked(_, let original): return "\(product(original.payment.productIdentifier)) refunded (entitlement revoked)"
        case .interruptedPurchaseResumed(let key, let interrupted): return "\(transaction(key)) resumes interrupted \(transaction(interrupted))"
        case .subscriptionBillingRetry(_, let original, let grace):
            return "\(product(original.payment.productIdentifier)) billing retry" + (grace > 0 ? " (grace period)" : "")
        case .transactionsCleared: return "the store cleared the account's transactions"
        case .receiptRefreshStarted(_, let request): return "receipt refresh \(request) asked for"
        case .receiptDelivered(_, let request, _, let entries, let isLast):
            return "receipt refresh \(request): \(entries.count) entries" + (isLast ? " (done)" : "")
        case .transactionPurchased(let key, _, let downloads, _):
            return "\(transaction(key)) purchased" + (downloads.isEmpty ? "" : " with \(downloads.count) download(s)")
        case .transactionFailed(let key, let error): return "\(transaction(key)) failed (\(error.code))"
        case .restoreStarted(_, let restore, _): return "restore \(restore) started"
        case .transactionRestored(let key, let restore, _, let original, _):
            return "\(transaction(key)) restored by restore \(restore) (\(product(original.payment.productIdentifier)))"
        case .restoreFinished(_, let restore): return "restore \(restore) finished"
        case .restoreFailed(_, let restore, _): return "restore \(restore) failed"
        case .transactionFinished(let key): return "\(transaction(key)) finished"
        case .downloadStarted(let key): return "download \(download(key)) started"
        case .downloadProgressed(let key, let progress, _): return "download \(download(key)) progress \(progress)"
        case .downloadPaused(let key): return "download \(download(key)) paused"
        case .downloadResumed(let key): return "download \(download(key)) resumed"
        case .downloadFinished(let key, _): return "download \(download(key)) finished"
        case .downloadFailed(let key, _): return "download \(download(key)) failed"
        case .downloadCancelled(let key): return "download \(download(key)) cancelled"
        case .commandRejected(let command, let rejection):
            // The transaction a refused finish was for, so the trace says which.
            if case .finishTransaction(let key) = command { return "finish of \(transaction(key)) rejected (\(rejection.code))" }
            return "\(command.name) rejected (\(rejection.code))"
        case .appActionRecorded(let action):
            switch action {
            case .contentGranted(let key, _, let identifier): return "granted \(transaction(key)) (\(product(identifier)))"
            case .contentKept(let key, _): return "kept content of \(download(key))"
            case .restoreShownDone(_, let restore, _): return "restore \(restore) shown done"
            case .failureShown(let key, _): return "failure of \(transaction(key)) shown"
            case .transactionReported(let key, _, let report): return "\(transaction(key)) reported: \(report)"
            }
        }
    }

    /// Mermaid has no escapes for some characters inside messages: keep them out.
    private static func mermaidText(_ text: String) -> String {
        text.replacingOccurrences(of: ";", with: ",").replacingOccurrences(of: "#", with: "-t")
    }

    private static func mermaidName(_ name: String) -> String {
        String(name.map { $0.isLetter || $0.isNumber ? $0 : "_" })
    }

    /// Mermaid `sequenceDiagram` text.
    public func mermaid() -> String {
        var lines = ["sequenceDiagram", "    title \(Self.mermaidText(title))"]
        for participant in participants { lines.append("    participant \(Self.mermaidName(participant)) as \(participant)") }
        for message in messages {
            let from = Self.mermaidName(message.from)
            let to = Self.mermaidName(message.to)
            switch message.kind {
            case .arrow: lines.append("    \(from)->>\(to): \(Self.mermaidText(message.text))")
            case .reply: lines.append("    \(from)-->>\(to): \(Self.mermaidText(message.text))")
            case .note: lines.append("    Note over \(from): \(Self.mermaidText(message.text))")
            }
        }
        return lines.joined(separator: "\n") + "\n"
    }

    private static func escape(_ text: String) -> String {
        text.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
            .replacingOccurrences(of: ">", with: "&gt;").replacingOccurrences(of: "\"", with: "&quot;")
    }

    /// A self-contained HTML page: the diagram as inline SVG (no script, no network), and the
    /// Mermaid text under it.
    public func html() -> String {
        let column = 190
        let row = 26
        let top = 50
        func x(_ participant: String) -> Int { (participants.firstIndex(of: participant) ?? 0) * column + column / 2 }
        /// A note's box: as wide as its text (about 6.5 px a character at 11 px), never left of the page.
        func noteBox(_ message: Message) -> (left: Int, width: Int) {
            let width = max(180, message.text.count * 13 / 2 + 16)
            return (max(2, x(message.from) - width / 2), width)
        }
        let notesRight = messages.filter { $0.kind == .note }.map { let box = noteBox($0); return box.left + box.width + 2 }.max() ?? 0
        let width = max(column * participants.count, notesRight)
        let height = top + row * (messages.count + 1)
        var svg = ["<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"\(width)\" height=\"\(height)\" font-family=\"sans-serif\" font-size=\"11\">",
                   "<defs><marker id=\"arrow\" markerWidth=\"8\" markerHeight=\"8\" refX=\"8\" refY=\"4\" orient=\"auto\"><path d=\"M0,0 L8,4 L0,8 z\" fill=\"#333\"/></marker></defs>"]
        for participant in participants {
            let center = x(participant)
            svg.append("<g class=\"lifeline\" data-name=\"\(Self.escape(participant))\">")
            svg.append("<rect x=\"\(center - 80)\" y=\"8\" width=\"160\" height=\"26\" rx=\"4\" fill=\"#eef\" stroke=\"#336\"/>")
            svg.append("<text x=\"\(center)\" y=\"25\" text-anchor=\"middle\" font-weight=\"bold\">\(Self.escape(participant))</text>")
            svg.append("<line x1=\"\(center)\" y1=\"34\" x2=\"\(center)\" y2=\"\(height)\" stroke=\"#aaa\" stroke-dasharray=\"4 3\"/></g>")
        }
        for (index, message) in messages.enumerated() {
            let y = top + row * index + 14
            svg.append("<g class=\"message\" data-kind=\"\(message.kind)\" data-from=\"\(Self.escape(message.from))\" data-to=\"\(Self.escape(message.to))\">")
            defer { svg.append("</g>") }
            switch message.kind {
            case .note:
                let box = noteBox(message)
                let violation = message.text.hasPrefix("VIOLATION")
                svg.append("<rect x=\"\(box.left)\" y=\"\(y - 14)\" width=\"\(box.width)\" height=\"20\" fill=\"\(violation ? "#fcc" : "#ffd")\" stroke=\"\(violation ? "#c00" : "#cc9")\"/>")
                svg.append("<text x=\"\(box.left + box.width / 2)\" y=\"\(y)\" text-anchor=\"middle\">\(Self.escape(message.text))</text>")
            case .arrow, .reply:
                let from = x(message.from)
                let to = x(message.to)
                let dash = message.kind == .reply ? " stroke-dasharray=\"5 3\"" : ""
                svg.append("<line x1=\"\(from)\" y1=\"\(y)\" x2=\"\(to)\" y2=\"\(y)\" stroke=\"#333\"\(dash) marker-end=\"url(#arrow)\"/>")
                svg.append("<text x=\"\((from + to) / 2)\" y=\"\(y - 4)\" text-anchor=\"middle\">\(Self.escape(message.text))</text>")
            }
        }
        svg.append("</svg>")
        return """
            <!DOCTYPE html>
            <html lang="en"><head><meta charset="utf-8"><title>sksim explore: \(Self.escape(title))</title>
            <style>body{font-family:sans-serif;margin:1.5em}pre{background:#f6f6f6;padding:1em;overflow:auto}</style></head>
            <body><h1>Minimal failing trace</h1><p id="violation">\(Self.escape(title))</p>
            \(svg.joined(separator: "\n"))
            <h2>Mermaid</h2><pre id="mermaid">\(Self.escape(mermaid()))</pre></body></html>

            """
    }
}
