/// The error a failed transaction, restore or download carries, shaped like `SKError`.
public struct StoreError: Error, Sendable, Hashable, CustomStringConvertible {
    /// Mirrors `SKError.Code`; raw values are part of the log and wire format. Printed by
    /// its case name (Swift's default), which messages and JSON use.
    public enum Code: UInt8, Sendable, Hashable, CaseIterable {
        case unknown = 0
        case clientInvalid = 1
        case paymentCancelled = 2
        case paymentInvalid = 3
        case paymentNotAllowed = 4
        case storeProductNotAvailable = 5
        case cloudServiceNetworkConnectionFailed = 7
        case deferredPaymentDeclined = 20
        case downloadFailed = 21
        case restoreFailed = 22

    }

    public var code: Code
    public var message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { "\(code): \(message)" }
}
