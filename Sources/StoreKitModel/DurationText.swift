import Foundation

/// Durations as people write them on a command line or in a topology file: `500ms`, `30s`,
/// `2m`, `1h`, `1.5s`, `1m30s`, `250us`, or a plain number of seconds. One parser, so every
/// option reads them alike.
public enum DurationText {
    /// Nanoseconds per unit, longest unit names first so `ms` is not read as `m` then `s`.
    private static let units: [(String, Double)] = [
        ("ms", 1e6), ("us", 1e3), ("µs", 1e3), ("ns", 1), ("h", 3_600e9), ("m", 60e9), ("s", 1e9),
    ]

    /// The longest duration accepted: 30 days, far beyond any run, so arithmetic cannot overflow.
    public static let maximumNanoseconds: Int64 = 30 * 86_400 * 1_000_000_000

    /// Nanoseconds in `text`: one or more `<number><unit>` pairs (units h, m, s, ms, us, ns), or a
    /// plain number of seconds. Negative durations are refused; zero is allowed (see `positiveSeconds`).
    public static func nanoseconds(_ text: String) throws(DurationTextError) -> Int64 {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        guard !trimmed.isEmpty else { throw DurationTextError(text: text) }
        if trimmed.hasPrefix("-") { throw DurationTextError(text: text, problem: "it is negative") }
        var total = 0.0
        if let plain = Double(trimmed) {
            guard plain.isFinite else { throw DurationTextError(text: text) }
            total = plain * 1e9
        } else {
            var rest = Substring(trimmed)
            while !rest.isEmpty {
                let number = rest.prefix { $0.isNumber || $0 == "." }
                guard let value = Double(number), value.isFinite else { throw DurationTextError(text: text) }
                rest = rest.dropFirst(number.count)
                guard let (unit, scale) = units.first(where: { rest.hasPrefix($0.0) }) else { throw DurationTextError(text: text) }
                rest = rest.dropFirst(unit.count)
                total += value * scale
            }
        }
        guard total <= Double(maximumNanoseconds) else { throw DurationTextError(text: text, tooLong: true) }
        return Int64(total.rounded())
    }

    /// The duration in seconds.
    public static func seconds(_ text: String) throws(DurationTextError) -> Double {
        Double(try nanoseconds(text)) / 1e9
    }

    /// As `seconds`, refusing zero.
    public static func positiveSeconds(_ text: String) throws(DurationTextError) -> Double {
        let value = try nanoseconds(text)
        guard value > 0 else { throw DurationTextError(text: text, problem: "it must be longer than zero") }
        return Double(value) / 1e9
    }

    /// The shortest exact text for `nanoseconds` in one unit (`1500ms`, `2m`), for messages and reports.
    public static func text(_ nanoseconds: Int64) -> String {
        for (unit, scale) in [("h", 3_600e9), ("m", 60e9), ("s", 1e9), ("ms", 1e6), ("us", 1e3)] as [(String, Double)]
        where Double(nanoseconds).truncatingRemainder(dividingBy: scale) == 0 && nanoseconds != 0 {
            return "\(Int64(Double(nanoseconds) / scale))\(unit)"
        }
        return "\(nanoseconds)ns"
    }
}

public struct DurationTextError: Error, Sendable, Equatable, CustomStringConvertible {
    public var text: String
    public var tooLong = false
    /// What is wrong when the text is a duration but not an acceptable one (negative, zero).
    public var problem: String?

    public init(text: String, tooLong: Bool = false, problem: String? = nil) {
        self.text = text
        self.tooLong = tooLong
        self.problem = problem
    }

    public var description: String {
        if tooLong { return "'\(text)' is longer than the 30 days a duration may be" }
        if let problem { return "'\(text)' is not a usable duration: \(problem); write e.g. 500ms, 30s, 2m or 1h" }
        return "'\(text)' is not a duration; write a number and a unit, such as 500ms, 30s, 2m or 1h"
    }
}
