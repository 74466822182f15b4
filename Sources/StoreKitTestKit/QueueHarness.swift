import StoreKitModel
import StoreKitRuntime

/// The one queue engine over an in-memory log, for tests of the queue's rules: each `send`
/// is decided, appended as one unit and applied exactly as the live queue does it.
public struct QueueHarness {
    public let engine: QueueEngine
    public var catalog: Catalog { engine.catalog }
    public var projection: QueueProjection { engine.projection }
    /// Every event appended so far, in order.
    public private(set) var recorded: [RecordedEvent] = []
    private var clock: Int64 = 0
    private var commandNumber: UInt64 = 0

    public init(catalog: Catalog = .sample) {
        do {
            engine = try QueueEngine(catalog: catalog, storage: MemoryLogStorage())
        } catch {
            preconditionFailure("an empty in-memory log cannot fail to open: \(error)")
        }
    }

    /// Sends a command (numbered for the "test" origin unless `id` is given) and returns
    /// what the queue decided.
    @discardableResult
    public mutating func send(_ body: CommandBody, id: CommandID? = nil) -> Decision {
        commandNumber += 1
        clock += 1_000_000
        let command = Command(id: id ?? CommandID(origin: "test", number: commandNumber), body: body)
        let outcome: EngineOutcome
        do {
            outcome = try engine.handle(command, timestamp: clock)
        } catch {
            preconditionFailure("an in-memory log cannot fail to append: \(error)")
        }
        recorded += outcome.records.map(\.recorded)
        switch outcome.decision {
        case .accepted: return .accept(outcome.records.map(\.recorded.event))
        case .rejected(let rejection): return .reject(rejection)
        case .duplicate: return .duplicate
        }
    }

    /// Registers, launches and attaches one observer to a device.
    public mutating func ready(_ device: String = "d1", account: String = "a1") {
        send(.registerDevice(device: device, account: account))
        send(.launchApp(device: device))
        send(.attachObserver(device: device, observer: "o1"))
    }

    /// Adds a payment and returns its key.
    public mutating func buy(_ product: String, device: String = "d1", quantity: Int = 1) -> TransactionKey {
        guard case .accept(let events) = send(.addPayment(device: device, payment: Payment(productIdentifier: product, quantity: quantity))),
              case .transactionAdded(let key, _) = events.first else {
            preconditionFailure("payment for \(product) was not accepted")
        }
        return key
    }

    /// Adds a payment and has the store purchase it.
    public mutating func purchase(_ product: String, device: String = "d1") -> TransactionKey {
        let key = buy(product, device: device)
        send(.decidePurchase(key, .purchased(charged: true)))
        return key
    }

    public func rejection(_ decision: Decision) -> Rejection.Code? {
        if case .reject(let rejection) = decision { return rejection.code }
        return nil
    }

    public func transaction(_ key: TransactionKey) -> PaymentTransaction? { projection.transaction(key) }
}

/// Product identifiers of the built-in sample catalog.
public enum SampleProducts {
    public static let coins = "com.example.sksim.coins.small"
    public static let removeAds = "com.example.sksim.removeads"
    public static let forest = "com.example.sksim.levelpack.forest"
    public static let desert = "com.example.sksim.levelpack.desert"
    public static let monthly = "com.example.sksim.premium.monthly"
    public static let seasonPass = "com.example.sksim.seasonpass"
}
