import StoreKitModel

/// An in-memory queue for tests of the pure domain logic: decides commands against
/// the projection and applies what it accepts, numbering events as the log would.
struct QueueHarness {
    var projection = QueueProjection()
    let catalog: Catalog
    var recorded: [RecordedEvent] = []
    var clock: Int64 = 1_000
    var commandNumber: UInt64 = 0

    init(catalog: Catalog = .sample) { self.catalog = catalog }

    @discardableResult
    mutating func send(_ body: CommandBody, id: CommandID? = nil) -> Decision {
        commandNumber += 1
        let command = Command(id: id ?? CommandID(origin: "test", number: commandNumber), body: body)
        let decision = projection.decide(command, catalog: catalog)
        switch decision {
        case .accept(let events):
            for event in events { append(event, command.id) }
        case .reject(let rejection):
            append(QueueProjection.rejectionEvent(command, rejection), command.id)
        case .duplicate:
            break
        }
        return decision
    }

    mutating func append(_ event: Event, _ id: CommandID?) {
        clock += 1_000_000
        let record = RecordedEvent(sequence: projection.lastSequence + 1, timestamp: clock, commandID: id, event: event)
        recorded.append(record)
        projection.apply(record)
    }

    /// Registers, launches and attaches one observer to a device.
    mutating func ready(_ device: String = "d1", account: String = "a1") {
        send(.registerDevice(device: device, account: account))
        send(.launchApp(device: device))
        send(.attachObserver(device: device, observer: "o1"))
    }

    /// Adds a payment and returns its key.
    mutating func buy(_ product: String, device: String = "d1", quantity: Int = 1) -> TransactionKey {
        guard case .accept(let events) = send(.addPayment(device: device, payment: Payment(productIdentifier: product, quantity: quantity))),
              case .transactionAdded(let key, _) = events.first else {
            fatalError("payment for \(product) was not accepted")
        }
        return key
    }

    mutating func purchase(_ product: String, device: String = "d1") -> TransactionKey {
        let key = buy(product, device: device)
        send(.decidePurchase(key, .purchased(charged: true)))
        return key
    }

    func rejection(_ decision: Decision) -> Rejection.Code? {
        if case .reject(let rejection) = decision { return rejection.code }
        return nil
    }

    func transaction(_ key: TransactionKey) -> PaymentTransaction? { projection.transaction(key) }
}

enum SampleProducts {
    static let coins = "com.example.sksim.coins.small"
    static let removeAds = "com.example.sksim.removeads"
    static let forest = "com.example.sksim.levelpack.forest"
    static let desert = "com.example.sksim.levelpack.desert"
    static let monthly = "com.example.sksim.premium.monthly"
}
