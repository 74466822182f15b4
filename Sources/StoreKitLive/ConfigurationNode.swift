import Foundation
import Yams

/// A problem in a topology file: the file, the key path, what was expected, what was found.
public struct TopologyError: Error, Sendable, CustomStringConvertible {
    /// What kind of problem, for code (and tests) that tell problems apart; the description is for people.
    public enum Code: String, Sendable, Hashable, CaseIterable {
        /// The file is missing, a directory, or not UTF-8 text.
        case unreadableFile
        /// Not YAML this parser accepts (syntax, nesting, alias expansion, complex keys).
        case malformedYAML
        /// A key the format does not define at that place.
        case unknownKey
        /// A required key is absent.
        case missingKey
        /// A value of the wrong kind (a list where a mapping belongs, text where a number belongs).
        case wrongType
        /// A number outside its allowed range.
        case outOfRange
        /// A name that refers to nothing in the topology (a process, a role).
        case unknownName
        /// Two things claim what only one may have: a name, a partition, an endpoint, a device.
        case conflict
        /// A key given to a role that does not use it, or a role missing what it needs.
        case wrongRole
        /// tcp:// beyond loopback without CURVE and without `insecure: true`.
        case insecureEndpoint
        /// A CURVE key or key file that is missing, malformed or does not match.
        case curveKey
        /// This host's client key is not among the allowed client keys.
        case clientKeyNotAllowed
        /// The scenario or catalog the topology names is not valid.
        case scenario
        /// Any other value that is not acceptable.
        case invalidValue
    }

    public var code: Code
    public var file: String
    public var keyPath: String
    public var problem: String

    public init(file: String, keyPath: String, problem: String, code: Code = .invalidValue) {
        self.file = file
        self.keyPath = keyPath
        self.problem = problem
        self.code = code
    }

    public var description: String {
        // A problem quoted from elsewhere (a catalog's error) may end in its own full stop.
        let sentence = problem.hasSuffix(".") ? String(problem.dropLast()) : problem
        return "\(file): \(keyPath.isEmpty ? "(top level)" : keyPath): \(sentence). See docs/topology.md for the format."
    }
}

/// A value read from YAML that remembers where it came from, so every error names the
/// file and key path. Unknown keys are errors: a misspelt key should not be ignored.
struct ConfigurationNode {
    let value: Any?
    let keyPath: String
    let file: String

    /// Bounds on what a file may make the parser do. Yams composes and constructs recursively, so
    /// a file nested a few thousand levels deep overflows the stack (a crash, not an error), and
    /// aliases that refer to aliases expand exponentially ("billion laughs": ten lines, gigabytes).
    /// Real topologies nest under ten levels and hold a few thousand values.
    static let maximumNesting = 1_000
    static let maximumValues = 1_000_000

    static func parse(_ text: String, file: String) throws(TopologyError) -> ConfigurationNode {
        guard nestingBound(text) <= maximumNesting else {
            throw TopologyError(file: file, keyPath: "", problem: "nests lists or mappings more than \(maximumNesting) levels deep; a topology needs a few levels, check that this is the right file", code: .malformedYAML)
        }
        let root: Node?
        do {
            root = try Yams.compose(yaml: text)
        } catch {
            // libyaml's messages span lines (a caret under the quoted line): keep the error one line.
            let message = "\(error)".split(whereSeparator: \.isNewline).map { $0.trimmingCharacters(in: .whitespaces) }.joined(separator: " ")
            throw TopologyError(file: file, keyPath: "", problem: "not valid YAML (\(message))", code: .malformedYAML)
        }
        var budget = maximumValues
        guard let root else { return ConfigurationNode(value: nil, keyPath: "", file: file) }
        guard fits(root, within: &budget) else {
            throw TopologyError(file: file, keyPath: "", problem: "expands to more than \(maximumValues) values through YAML aliases (*name); write the values out instead of aliasing aliases", code: .malformedYAML)
        }
        // Yams's conversion to dictionaries force-unwraps every key as text: a list or mapping as a key
        // (`{}: x`, `? [a]`) crashed it (found by Fuzz/FuzzTopology).
        if let key = firstNonScalarKey(root) {
            throw TopologyError(file: file, keyPath: "", problem: "has a list or mapping as a key\(key.mark.map { " at line \($0.line)" } ?? ""); keys are plain names such as scenario or processes", code: .malformedYAML)
        }
        return ConfigurationNode(value: root.any, keyPath: "", file: file)
    }

    /// Counts the values `node` expands to, aliases copied out, stopping once `budget` is spent.
    private static func fits(_ node: Node, within budget: inout Int) -> Bool {
        budget -= 1
        guard budget >= 0 else { return false }
        switch node {
        case .scalar: return true
        case .sequence(let items): return items.allSatisfy { fits($0, within: &budget) }
        case .mapping(let pairs): return pairs.allSatisfy { fits($0.key, within: &budget) && fits($0.value, within: &budget) }
        }
    }

    /// The first mapping key that is not a scalar, depth first (the nesting is bounded before this runs).
    private static func firstNonScalarKey(_ node: Node) -> Node? {
        switch node {
        case .scalar: return nil
        case .sequence(let items): return items.lazy.compactMap(firstNonScalarKey).first
        case .mapping(let pairs):
            for (key, value) in pairs {
                if case .scalar = key {} else { return key }
                if let found = firstNonScalarKey(value) { return found }
            }
            return nil
        }
    }

    /// An upper bound on the document's nesting, from its text alone (so it can run before the
    /// recursive parser): each line's indentation and block indicators (`- `, `? `, `: `) plus the
    /// flow brackets (`[`, `{`) open so far. Every opening bracket counts, even one in a quoted
    /// text or a comment; a closing one counts only outside them (as far as quotes can be told
    /// without parsing), so a mistaken guess over-counts and never under-counts.
    static func nestingBound(_ text: String) -> Int {
        let newline = UInt8(ascii: "\n"), space = UInt8(ascii: " ")
        let bytes = Array(text.utf8)
        var flow = 0, deepest = 0, block = 0
        var quote: UInt8? = nil, inComment = false, atLineStart = true
        var previous = newline  // the previous byte that is not a space, on this line
        var index = 0
        while index < bytes.count {
            let byte = bytes[index]
            let next = index + 1 < bytes.count ? bytes[index + 1] : newline
            index += 1
            if byte == newline {
                block = 0
                inComment = false
                atLineStart = true
                previous = newline
                continue
            }
            if atLineStart, byte == space {
                block += 1
                continue
            }
            atLineStart = false
            if byte == UInt8(ascii: "[") || byte == UInt8(ascii: "{") { flow += 1 }
            if let open = quote {
                if open == UInt8(ascii: "\""), byte == UInt8(ascii: "\\") {
                    if next == UInt8(ascii: "[") || next == UInt8(ascii: "{") { flow += 1 }
                    index += 1  // an escaped character
                } else if byte == open {
                    if open == UInt8(ascii: "'"), next == open { index += 1 } else { quote = nil }  // '' is a quote inside '…'
                }
            } else if !inComment {
                switch byte {
                case UInt8(ascii: "\""), UInt8(ascii: "'"):
                    // A quoted scalar starts a value; a quote inside a plain value is text.
                    if [newline, UInt8(ascii: "["), UInt8(ascii: "{"), UInt8(ascii: ","), UInt8(ascii: ":"),
                        UInt8(ascii: "-"), UInt8(ascii: "?")].contains(previous) {
                        quote = byte
                    }
                case UInt8(ascii: "#") where previous == newline || bytes[index - 2] == space:
                    inComment = true
                case UInt8(ascii: "]"), UInt8(ascii: "}"):
                    flow = max(0, flow - 1)
                case UInt8(ascii: "-"), UInt8(ascii: "?"), UInt8(ascii: ":"):
                    if next == space || next == newline { block += 1 }
                default: break
                }
            }
            if byte != space { previous = byte }
            deepest = max(deepest, flow + block)
        }
        return deepest
    }

    func error(_ problem: String, code: TopologyError.Code = .invalidValue) -> TopologyError {
        TopologyError(file: file, keyPath: keyPath, problem: problem, code: code)
    }

    private func child(_ key: String, _ value: Any?) -> ConfigurationNode {
        ConfigurationNode(value: value, keyPath: keyPath.isEmpty ? key : "\(keyPath).\(key)", file: file)
    }

    var isPresent: Bool { value != nil && !(value is NSNull) }

    func mapping(allowedKeys: Set<String>) throws(TopologyError) -> [String: ConfigurationNode] {
        guard let dictionary = value as? [String: Any] else {
            throw error("expected a mapping of keys to values, found \(describe(value))", code: .wrongType)
        }
        var result: [String: ConfigurationNode] = [:]
        for (key, item) in dictionary {
            guard allowedKeys.contains(key) else {
                throw child(key, item).error("unknown key; expected one of \(allowedKeys.sorted().joined(separator: ", "))", code: .unknownKey)
            }
            result[key] = child(key, item)
        }
        return result
    }

    /// A mapping whose keys are chosen by the user (e.g. API key ids) and whose values are strings, sorted by key.
    func stringMapping() throws(TopologyError) -> [(String, String)] {
        guard let dictionary = value as? [String: Any] else {
            throw error("expected a mapping of names to strings, found \(describe(value))", code: .wrongType)
        }
        var result: [(String, String)] = []
        for key in dictionary.keys.sorted() { result.append((key, try child(key, dictionary[key]).string())) }
        return result
    }

    func sequence() throws(TopologyError) -> [ConfigurationNode] {
        guard let array = value as? [Any] else { throw error("expected a list, found \(describe(value))", code: .wrongType) }
        return array.enumerated().map { index, item in
            ConfigurationNode(value: item, keyPath: "\(keyPath)[\(index)]", file: file)
        }
    }

    func string() throws(TopologyError) -> String {
        if let string = value as? String { return string }
        if let number = value as? Int { return String(number) }
        throw error("expected text, found \(describe(value))", code: .wrongType)
    }

    func integer(in range: ClosedRange<Int>) throws(TopologyError) -> Int {
        guard let number = value as? Int else { throw error("expected a whole number, found \(describe(value))", code: .wrongType) }
        guard range.contains(number) else { throw error("expected a number from \(range.lowerBound) to \(range.upperBound), found \(number)", code: .outOfRange) }
        return number
    }

    func unsigned() throws(TopologyError) -> UInt64 {
        if let number = value as? Int, number >= 0 { return UInt64(number) }
        if let text = value as? String, let number = UInt64(text) { return number }
        throw error("expected a non-negative whole number, found \(describe(value))", code: .wrongType)
    }

    func double(in range: ClosedRange<Double>) throws(TopologyError) -> Double {
        let number: Double
        if let value = value as? Double {
            number = value
        } else if let value = value as? Int {
            number = Double(value)
        } else {
            throw error("expected a number, found \(describe(value))", code: .wrongType)
        }
        guard range.contains(number) else { throw error("expected a number from \(range.lowerBound) to \(range.upperBound), found \(number)", code: .outOfRange) }
        return number
    }

    func bool() throws(TopologyError) -> Bool {
        guard let flag = value as? Bool else { throw error("expected true or false, found \(describe(value))", code: .wrongType) }
        return flag
    }

    func oneOf(_ choices: [String]) throws(TopologyError) -> String {
        let text = try string()
        guard choices.contains(text) else { throw error("expected one of \(choices.joined(separator: ", ")), found '\(text)'") }
        return text
    }

    private func describe(_ value: Any?) -> String {
        switch value {
        case nil, is NSNull: "nothing"
        case let text as String: "text '\(text)'"
        case is Bool: "a boolean"
        case let number as Int: "the number \(number)"
        case let number as Double: "the number \(number)"
        case is [Any]: "a list"
        case is [String: Any]: "a mapping"
        default: "\(type(of: value!))"
        }
    }
}
