import Foundation

/// Durations as people write them on command lines and in files: `500ms`, `30s`, `2m`, `1h`,
/// compounds such as `1m30s`, and a bare number meaning seconds.
public enum DurationText {
    public struct Failure: Error, Sendable, CustomStringConvertible {
        public var text: String
        public var problem: String
        public var description: String { "'\(text)' is not a duration: \(problem); write e.g. 500ms, 30s, 2m, 1h or 1m30s" }
    }

    private static let units: [(suffix: String, seconds: Double)] = [("ms", 0.001), ("us", 0.000_001), ("s", 1), ("m", 60), ("h", 3_600)]

    /// The duration in seconds. Negative values are refused; zero is allowed (callers that need a
    /// positive duration say so with `positiveSeconds`).
    public static func seconds(_ text: String) throws(Failure) -> Double {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        guard !trimmed.isEmpty else { throw Failure(text: text, problem: "it is empty") }
        if let plain = Double(trimmed) {
            guard plain.isFinite, plain >= 0 else { throw Failure(text: text, problem: "it is negative or not finite") }
            return plain
        }
        var total = 0.0
        var rest = Substring(trimmed)
        while !rest.isEmpty {
            let number = rest.prefix { $0.isNumber || $0 == "." }
            guard !number.isEmpty, let value = Double(number) else {
                throw Failure(text: text, problem: rest.first == "-" ? "it is negative" : "expected a number at '\(rest)'")
            }
            rest = rest.dropFirst(number.count)
            let unitText = rest.prefix { $0.isLetter }
            guard let unit = units.first(where: { $0.suffix == unitText }) else {
                throw Failure(text: text, problem: unitText.isEmpty ? "a number inside a compound needs a unit" : "unknown unit '\(unitText)'")
            }
            rest = rest.dropFirst(unitText.count)
            total += value * unit.seconds
        }
        guard total.isFinite else { throw Failure(text: text, problem: "it is too large") }
        return total
    }

    /// As `seconds`, refusing zero.
    public static func positiveSeconds(_ text: String) throws(Failure) -> Double {
        let value = try seconds(text)
        guard value > 0 else { throw Failure(text: text, problem: "it must be longer than zero") }
        return value
    }

    /// Short form for reports: `500ms`, `30s`, `2m`, `1h`, or seconds with a fraction.
    public static func format(seconds: Double) -> String {
        if seconds < 1 { return "\(Int((seconds * 1000).rounded()))ms" }
        if seconds.truncatingRemainder(dividingBy: 3_600) == 0 { return "\(Int(seconds / 3_600))h" }
        if seconds.truncatingRemainder(dividingBy: 60) == 0 { return "\(Int(seconds / 60))m" }
        if seconds == seconds.rounded() { return "\(Int(seconds))s" }
        return "\(seconds)s"
    }
}
