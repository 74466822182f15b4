/// The error a failed transaction, restore or download carries, shaped like `SKError`.
public struct StoreError: Error, Sendable, Hashable, CustomStringConvertible {
    /// Mirrors `SKError.Code`; raw values are part of the log and wire format.
    public enum Code: UInt8, Sendable, Hashable, CaseIterable, CustomStringConvertible {
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

        public var description: String {
            switch self {
            case .unknown: "unknown"
            case .clientInvalid: "clientInvalid"
            case .paymentCancelled: "paymentCancelled"
            case .paymentInvalid: "paymentInvalid"
            case .paymentNotAllowed: "paymentNotAllowed"
            case .storeProductNotAvailable: "storeProductNotAvailable"
            case .cloudServiceNetworkConnectionFailed: "cloudServiceNetworkConnectionFailed"
            case .deferredPaymentDeclined: "deferredPaymentDeclined"
            case .downloadFailed: "downloadFailed"
            case .restoreFailed: "restoreFailed"
            }
        }
    }

    public var code: Code
    public var message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { "\(code): \(message)" }
}
