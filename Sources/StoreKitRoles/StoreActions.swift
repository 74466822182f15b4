import StoreKitModel

/// One timed SKTestSession control in a scenario (F-T2, topology `storeActions:`): at `atMilliseconds`
/// of run time the store acts on `device` as the test session would, through the same store commands
/// (`StoreTestSession`). Part of the scenario, so the log's header holds it.
public struct StoreAction: Sendable, Hashable, Codable {
    public enum Kind: String, Sendable, Hashable, Codable, CaseIterable {
        /// Approve or decline every Ask to Buy request the device has waiting (F-S1, F-A1).
        case approve, decline
        /// Refund the device's purchase of `product` (its subscription, or its account's latest purchase, F-K1).
        case refund
        /// End, or renew now, the device's subscription to `product` (F-U1, F-U2).
        case expire, forceRenew
        /// Fail the device's next purchase the store decides, with `error` (default unknown).
        case failNext
        /// Forget every purchase of the device's account (SKTestSession `clearTransactions`).
        case clearTransactions

        var needsProduct: Bool { self == .refund || self == .expire || self == .forceRenew }
    }

    public var atMilliseconds: Double
    public var action: Kind
    public var device: String
    public var product: String?
    /// An SKError code name (`paymentCancelled`), for `failNext`.
    public var error: String?

    public init(atMilliseconds: Double, action: Kind, device: String, product: String? = nil, error: String? = nil) {
        self.atMilliseconds = atMilliseconds
        self.action = action
        self.device = device
        self.product = product
        self.error = error
    }

    /// Run time of the action in nanoseconds.
    public var atNanoseconds: Int64 { Int64((atMilliseconds * 1e6).rounded()) }

    /// The error `failNext` fails with: SKTestSession's default `failureError` is unknown.
    public var failure: StoreError {
        let code = error.flatMap(StoreError.Code.init(name:)) ?? .unknown
        return StoreError(code, "failed by the scenario's storeActions (failNext at \(atMilliseconds) ms)")
    }

    /// Checks what the action names against the run (`storeActions[index]` in messages).
    func validate(index: Int, devices: Set<String>, catalog: Catalog) throws(ConfigurationError) {
        let path = "storeActions[\(index)]"
        guard atMilliseconds.isFinite, atMilliseconds >= 0 else {
            throw ConfigurationError("\(path).atMilliseconds is \(atMilliseconds); use 0 or more milliseconds of run time", code: .outOfRange)
        }
        guard devices.contains(device) else {
            throw ConfigurationError("\(path).device '\(device)' is not a device of this run; use device-0001 … as the run names them", code: .unknownDevice)
        }
        if action.needsProduct {
            guard let product else { throw ConfigurationError("\(path).product is missing; \(action.rawValue) needs the product it acts on", code: .missingValue) }
            guard catalog.product(product) != nil else {
                throw ConfigurationError("\(path).product '\(product)' is not in the catalog; use one of its product identifiers", code: .unknownProduct)
            }
        }
        if let error, StoreError.Code(name: error) == nil {
            throw ConfigurationError("\(path).error '\(error)' is not an SKError code; use one of \(StoreError.Code.allCases.map { "\($0)" }.joined(separator: ", "))")
        }
    }
}

extension StoreError.Code {
    /// The code with this case name (`paymentCancelled`), as messages and JSON print it.
    public init?(name: String) {
        guard let code = Self.allCases.first(where: { "\($0)" == name }) else { return nil }
        self = code
    }
}
