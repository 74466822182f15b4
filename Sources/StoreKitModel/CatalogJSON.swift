import Foundation

extension Catalog {
    /// A parsed JSON value. Catalog files are read through this rather than `Decodable` models
    /// so every error can name the exact key path and unknown keys are ignored for free.
    enum JSONValue: Sendable, Hashable, Decodable {
        case null
        case bool(Bool)
        case integer(Int64)
        case number(Double)
        case string(String)
        case array([JSONValue])
        case object([String: JSONValue])

        init(from decoder: any Decoder) throws {
            let container = try decoder.singleValueContainer()
            if container.decodeNil() {
                self = .null
            } else if let value = try? container.decode(Bool.self) {
                self = .bool(value)
            } else if let value = try? container.decode(Int64.self) {
                self = .integer(value)
            } else if let value = try? container.decode(Double.self) {
                self = .number(value)
            } else if let value = try? container.decode(String.self) {
                self = .string(value)
            } else if let value = try? container.decode([JSONValue].self) {
                self = .array(value)
            } else {
                self = .object(try container.decode([String: JSONValue].self))
            }
        }

        /// How the value reads in an error message, e.g. `a number (12)`.
        var summary: String {
            switch self {
            case .null: "null"
            case .bool(let value): "a boolean (\(value))"
            case .integer(let value): "a number (\(value))"
            case .number(let value): "a number (\(value))"
            case .string(let value): "a string (\"\(value)\")"
            case .array(let value): "an array of \(value.count) element\(value.count == 1 ? "" : "s")"
            case .object: "an object"
            }
        }
    }

    /// A JSON value together with where it sits in its document, so reading it can fail precisely.
    struct JSONNode: Sendable {
        let value: JSONValue
        /// The key path from the document root; empty for the root itself.
        let keyPath: String
        let source: String

        /// Parses `data` as JSON; `documentKind` names what the file should be, for the error message.
        static func parse(_ data: Data, source: String, documentKind: String) throws(CatalogError) -> JSONNode {
            let value: JSONValue
            do {
                value = try JSONDecoder().decode(JSONValue.self, from: data)
            } catch {
                let explanation = Catalog.jsonSyntaxProblem(data, documentKind: documentKind, decodingError: error)
                throw CatalogError(reason: .notJSON, source: source, problem: explanation.problem, remedy: explanation.remedy)
            }
            return JSONNode(value: value, keyPath: "", source: source)
        }

        func error(
            _ reason: CatalogError.Reason,
            at keyPath: String? = nil,
            problem: String,
            remedy: String
        ) -> CatalogError {
            let path = keyPath ?? self.keyPath
            return CatalogError(
                reason: reason,
                source: source,
                keyPath: path.isEmpty ? "top level" : path,
                problem: problem,
                remedy: remedy
            )
        }

        func keyPath(appending key: String) -> String {
            keyPath.isEmpty ? key : "\(keyPath).\(key)"
        }

        func object() throws(CatalogError) -> [String: JSONValue] {
            guard case .object(let members) = value else {
                throw error(.wrongShape, problem: "Expected an object, found \(value.summary).",
                            remedy: "Write this value as a JSON object ({ ... }).")
            }
            return members
        }

        /// The member named `key`, or nil when it is absent or null (Xcode writes `null` for absent offers).
        func child(_ key: String) throws(CatalogError) -> JSONNode? {
            guard let member = try object()[key], member != .null else { return nil }
            return JSONNode(value: member, keyPath: keyPath(appending: key), source: source)
        }

        /// A child node addressed with a bracketed name, for keys that are product identifiers containing dots.
        func child(quoted key: String, value member: JSONValue) -> JSONNode {
            JSONNode(value: member, keyPath: "\(keyPath)[\"\(key)\"]", source: source)
        }

        func requiredChild(_ key: String, remedy: String) throws(CatalogError) -> JSONNode {
            guard let node = try child(key) else {
                throw error(.missingValue, at: keyPath(appending: key),
                            problem: "This required key is missing.", remedy: remedy)
            }
            return node
        }

        func string() throws(CatalogError) -> String {
            guard case .string(let text) = value else {
                throw error(.wrongShape, problem: "Expected a string, found \(value.summary).",
                            remedy: "Write this value as a JSON string in quotes.")
            }
            return text
        }

        func integer() throws(CatalogError) -> Int64 {
            guard case .integer(let number) = value else {
                throw error(.wrongShape, problem: "Expected a whole number, found \(value.summary).",
                            remedy: "Write this value as a whole number without quotes.")
            }
            return number
        }

        func array() throws(CatalogError) -> [JSONNode] {
            guard case .array(let elements) = value else {
                throw error(.wrongShape, problem: "Expected an array, found \(value.summary).",
                            remedy: "Write this value as a JSON array ([ ... ]).")
            }
            return elements.enumerated().map { index, element in
                JSONNode(value: element, keyPath: "\(keyPath)[\(index)]", source: source)
            }
        }

        func optionalString(_ key: String) throws(CatalogError) -> String? {
            try child(key)?.string()
        }

        /// A string member that must be present and not empty.
        func requiredString(_ key: String, remedy: String) throws(CatalogError) -> String {
            let text = try requiredChild(key, remedy: remedy).string()
            guard !text.trimmingCharacters(in: .whitespaces).isEmpty else {
                throw error(.missingValue, at: keyPath(appending: key),
                            problem: "Expected a non-empty string, found an empty one.", remedy: remedy)
            }
            return text
        }

        /// The elements of an array member; an absent member counts as empty.
        func optionalArray(_ key: String) throws(CatalogError) -> [JSONNode] {
            try child(key)?.array() ?? []
        }
    }
}
