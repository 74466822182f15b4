import StoreKitModel

/// The text form of an event for `sksim log cat` (and the context of a replay's divergence): the
/// case and its fields in Swift's own layout, `transactionRestored(device-0002#5, restore: 1, …)`,
/// but without module and type prefixes (`StoreKitModel.OriginalTransaction(…)`) or `Optional(…)`
/// wrappers, which say nothing to a reader. Values that describe themselves (keys, payments,
/// contents, errors) print their descriptions; strings are quoted.
public enum EventText {
    public static func of(_ event: Event) -> String { enumCase(event) }

    /// An enum value: its case name, then its payload in parentheses.
    private static func enumCase(_ value: Any) -> String {
        let mirror = Mirror(reflecting: value)
        // A case without a payload has no child, and prints as its name.
        guard let payload = mirror.children.first, let name = payload.label else { return "\(value)" }
        let inner = Mirror(reflecting: payload.value)
        return name + "(" + (inner.displayStyle == .tuple ? fields(inner) : text(payload.value)) + ")"
    }

    private static func fields(_ mirror: Mirror) -> String {
        mirror.children.map { child in
            // Unlabelled tuple elements are named ".0", ".1": printed without a label.
            guard let label = child.label, !label.hasPrefix(".") else { return text(child.value) }
            return label + ": " + text(child.value)
        }.joined(separator: ", ")
    }

    private static func text(_ value: Any) -> String {
        let mirror = Mirror(reflecting: value)
        switch mirror.displayStyle {
        case .optional: return mirror.children.first.map { text($0.value) } ?? "nil"
        case .collection, .set: return "[" + mirror.children.map { text($0.value) }.joined(separator: ", ") + "]"
        case .tuple: return "(" + fields(mirror) + ")"
        default: break
        }
        if let string = value as? String { return string.debugDescription }
        if let described = value as? any CustomStringConvertible { return described.description }
        switch mirror.displayStyle {
        case .enum: return enumCase(value)
        case .struct, .class: return "\(type(of: value))(" + fields(mirror) + ")"
        default: return "\(value)"
        }
    }
}
