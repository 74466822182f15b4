import Foundation

/// A JSON value that keeps object keys in the order given, so output is stable and
/// reads in a sensible order.
public indirect enum JSONValue: Sendable, Equatable {
    case null
    case bool(Bool)
    case int(Int64)
    case unsigned(UInt64)
    case double(Double)
    case string(String)
    case array([JSONValue])
    case object([(String, JSONValue)])

    public static func == (left: JSONValue, right: JSONValue) -> Bool { left.serialized() == right.serialized() }

    public func serialized() -> String {
        var output = ""
        write(into: &output)
        return output
    }

    private func write(into output: inout String) {
        switch self {
        case .null: output += "null"
        case .bool(let value): output += value ? "true" : "false"
        case .int(let value): output += String(value)
        case .unsigned(let value): output += String(value)
        case .double(let value): output += value.isFinite ? String(value) : "null"
        case .string(let value): Self.escape(value, into: &output)
        case .array(let values):
            output += "["
            for (index, value) in values.enumerated() {
                if index > 0 { output += "," }
                value.write(into: &output)
            }
            output += "]"
        case .object(let members):
            output += "{"
            for (index, (key, value)) in members.enumerated() {
                if index > 0 { output += "," }
                Self.escape(key, into: &output)
                output += ":"
                value.write(into: &output)
            }
            output += "}"
        }
    }

    private static func escape(_ string: String, into output: inout String) {
        output += "\""
        for scalar in string.unicodeScalars {
            switch scalar {
            case "\"": output += "\\\""
            case "\\": output += "\\\\"
            case "\n": output += "\\n"
            case "\r": output += "\\r"
            case "\t": output += "\\t"
            case _ where scalar.value < 0x20: output += String(format: "\\u%04x", scalar.value)
            default: output.unicodeScalars.append(scalar)
            }
        }
        output += "\""
    }
}

extension JSONValue {
    package static func int(_ value: Int) -> JSONValue { .int(Int64(value)) }
    package static func int(_ value: UInt64) -> JSONValue { .int(Int64(clamping: value)) }
    package static func optional(_ value: String?) -> JSONValue { value.map { .string($0) } ?? .null }
    /// Nanoseconds as microseconds with one decimal.
    package static func microseconds(_ nanoseconds: Int64) -> JSONValue { .double((Double(nanoseconds) / 100).rounded() / 10) }
}
