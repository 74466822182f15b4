import Foundation
import StoreKitModel
import StoreKitRoles

/// How to replay a recording. The defaults replay all of it once, as fast as possible,
/// against the recorded observers.
public struct ReplayOptions: Sendable {
    /// nil: as fast as the machine goes. K: K times the recorded pace, every command
    /// scheduled against an absolute start time.
    public var speed: Double?
    /// Observer behaviours to run instead of the recorded ones.
    public var observers: [ObserverBehavior]?
    /// The user's own app code to run instead of the recorded observers (or the recorded app): a
    /// what-if replay, whatever the recording ran, since the timing of the app's asynchronous work is
    /// not in the log. Needed to replay a recording that ran an app (`Scenario.apps.app`).
    public var app: AppUnderTest?
    /// Compare only commands whose first record lies in `from...to` (recorded sequences); the
    /// history before `from` is replayed from the recording without being compared.
    public var from: UInt64 = 1
    public var to: UInt64 = .max
    /// Replay only these devices (whole devices, with their history), by name.
    public var devices: Set<String>?
    /// Copies of the recording, with device and account names rewritten per copy.
    public var loop = 1
    public var loopLayout: LoopLayout = .sideBySide
    /// Most commands the observers may send in reaction to one command (a runaway observer
    /// is stopped there and reported).
    public var maximumReactionCommands = 10_000

    public enum LoopLayout: String, Sendable, CaseIterable {
        /// Every copy at once: each recorded command is followed by its copies.
        case sideBySide = "side-by-side"
        /// Copy k starts 1 ms after copy k − 1 ends.
        case oneAfterAnother = "one-after-another"
    }

    public init() {}

    /// An app registered under a name (StoreKitSim's `SimulatedApp.launch`), as a replay runs it.
    public struct AppUnderTest: Sendable {
        public var name: String
        public var launch: @Sendable (_ queue: PaymentQueue) -> Void

        public init(name: String, launch: @escaping @Sendable (_ queue: PaymentQueue) -> Void) {
            self.name = name
            self.launch = launch
        }
    }

    public func validate() throws(ReplayInputError) {
        if let speed, !(speed.isFinite && speed > 0) {
            throw ReplayInputError("--speed \(speed) is not a pace; use max, or a number greater than 0 (1 = the recorded pace)", code: .invalidOption)
        }
        guard from >= 1, from <= to else {
            throw ReplayInputError("--from \(from) --to \(to) is an empty slice; use 1 <= --from <= --to", code: .invalidOption)
        }
        guard (1...1_000).contains(loop) else { throw ReplayInputError("--loop \(loop) is out of range; use 1 to 1000 copies", code: .invalidOption) }
        if let observers, observers.isEmpty {
            throw ReplayInputError("--observers names no observer; give at least one of \(ObserverBehavior.allCases.map(\.rawValue).joined(separator: ", "))", code: .invalidOption)
        }
        if let devices, devices.isEmpty { throw ReplayInputError("--devices names no device", code: .invalidOption) }
        if app != nil, observers != nil { throw ReplayInputError("give either an app or built-in observers to replay with, not both", code: .invalidOption) }
    }
}
