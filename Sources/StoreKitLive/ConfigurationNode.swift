import Foundation
import Yams

/// A problem in a topology file: the file, the key path, what was expected, what was found.
public struct TopologyError: Error, Sendable, CustomStringConvertible {
    public var file: String
    public var keyPath: String
    public var problem: String

    public init(file: String, keyPath: String, problem: String) {
        self.file = file
        self.keyPath = keyPath
        self.problem = problem
    }

    public var description: String {
        "\(file): \(keyPath.isEmpty ? "(top level)" : keyPath): \(problem). See docs/topology.md for the format."
    }
}

/// A value read from YAML that remembers where it came from, so every error names the
/// file and key path. Unknown keys are errors: a misspelt key should not be ignored.
struct ConfigurationNode {
    let value: Any?
    let keyPath: String
    let file: String

    static func parse(_ text: String, file: String) throws(TopologyError) -> ConfigurationNode {
        do {
            return ConfigurationNode(value: try Yams.load(yaml: text), keyPath: "", file: file)
        } catch {
            throw TopologyError(file: file, keyPath: "", problem: "not valid YAML (\(error))")
        }
    }

    func error(_ problem: String) -> TopologyError { TopologyError(file: file, keyPath: keyPath, problem: problem) }

    private func child(_ key: String, _ value: Any?) -> ConfigurationNode {
        ConfigurationNode(value: value, keyPath: keyPath.isEmpty ? key : "\(keyPath).\(key)", file: file)
    }

    var isPresent: Bool { value != nil && !(value is NSNull) }

    func mapping(allowedKeys: Set<String>) throws(TopologyError) -> [String: ConfigurationNode] {
        guard let dictionary = value as? [String: Any] else {
            throw error("expected a mapping of keys to values, found \(describe(value))")
        }
        var result: [String: ConfigurationNode] = [:]
        for (key, item) in dictionary {
            guard allowedKeys.contains(key) else {
                throw child(key, item).error("unknown key; expected one of \(allowedKeys.sorted().joined(separator: ", "))")
            }
            result[key] = child(key, item)
        }
        return result
    }

    func sequence() throws(TopologyError) -> [ConfigurationNode] {
        guard let array = value as? [Any] else { throw error("expected a list, found \(describe(value))") }
        return array.enumerated().map { index, item in
            ConfigurationNode(value: item, keyPath: "\(keyPath)[\(index)]", file: file)
        }
    }

    func string() throws(TopologyError) -> String {
        if let string = value as? String { return string }
        if let number = value as? Int { return String(number) }
        throw error("expected text, found \(describe(value))")
    }

    func integer(in range: ClosedRange<Int>) throws(TopologyError) -> Int {
        guard let number = value as? Int else { throw error("expected a whole number, found \(describe(value))") }
        guard range.contains(number) else { throw error("expected a number from \(range.lowerBound) to \(range.upperBound), found \(number)") }
        return number
    }

    func unsigned() throws(TopologyError) -> UInt64 {
        if let number = value as? Int, number >= 0 { return UInt64(number) }
        if let text = value as? String, let number = UInt64(text) { return number }
        throw error("expected a non-negative whole number, found \(describe(value))")
    }

    func double(in range: ClosedRange<Double>) throws(TopologyError) -> Double {
        let number: Double
        if let value = value as? Double {
            number = value
        } else if let value = value as? Int {
            number = Double(value)
        } else {
            throw error("expected a number, found \(describe(value))")
        }
        guard range.contains(number) else { throw error("expected a number from \(range.lowerBound) to \(range.upperBound), found \(number)") }
        return number
    }

    func bool() throws(TopologyError) -> Bool {
        guard let flag = value as? Bool else { throw error("expected true or false, found \(describe(value))") }
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
