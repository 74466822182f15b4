// What stands around the app in the simulation: its server, and the app handed to StoreKitSim.
// Linux only: on Apple's platforms the app talks to its real server.
#if !canImport(StoreKit)
import StoreKitSim

/// The app's server, in the simulation: it answers after a while that the runtime chooses (in
/// exploration a choice point), may fail, and says whether the receipt the app sent holds the
/// transaction, as the real one would.
public final class SimulatedServer: ReceiptVerifier {
    let checks: ServerChecks

    public init(checks: ServerChecks) { self.checks = checks }

    public func verify(receipt: Data, transactionIdentifier: String, completion: @escaping (Result<Bool, any Error>) -> Void) {
        // The receipt is Apple's PKCS #7; the server reads its in-app entries as `/verifyReceipt` answers them.
        let entries = SimulatedReceipt.contents(receipt)?["in_app"] as? [[String: Any]] ?? []
        let holdsIt = entries.contains { $0["transaction_id"] as? String == transactionIdentifier }
        checks.note(holdsIt: holdsIt)
        SimulatedWork.start(canFail: true) { succeeded in
            completion(succeeded ? .success(holdsIt) : .failure(URLError(.timedOut)))
        }
    }
}

/// What the server was asked, over every device and schedule (the explorer's threads share it).
public final class ServerChecks: @unchecked Sendable {
    private let lock = NSLock()
    private var counts = (asked: 0, heldIt: 0)
    public init() {}
    func note(holdsIt: Bool) { lock.withLock { counts.asked += 1; if holdsIt { counts.heldIt += 1 } } }
    public var asked: Int { lock.withLock { counts.asked } }
    public var heldIt: Int { lock.withLock { counts.heldIt } }
}

extension StoreObserver {
    /// The app on every simulated device, as the tests explore it and `my-sksim` registers it: its
    /// storage made once per device, its objects at every launch, and what it credited read from
    /// that storage for the invariants.
    public static func simulatedApp(checks: ServerChecks = ServerChecks()) -> SimulatedApp {
        SimulatedApp(storage: { Entitlements() },
                     belief: { AppBelief(credits: $0.credits, restoresShownDone: $0.restoresShownDone) },
                     launch: { StoreObserver(entitlements: $0, verifier: SimulatedServer(checks: checks)) })
    }
}
#endif
