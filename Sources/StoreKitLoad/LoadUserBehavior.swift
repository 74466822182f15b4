import Foundation
import StoreKitModel
import StoreKitRoles

/// A team's users as code, Locust-style: what each simulated user does next, how long they think,
/// and what the app does once a lifecycle ended (calls to the team's own server, timed as stages of
/// their own; counters; checks). A driver built with `StoreKitLoadKit` runs it on every device of its
/// share of the load (docs/load-testing.md, "Your own driver"). Called on the driver's one thread.
public protocol LoadUserBehavior: Sendable {
    /// What `user` does at its next start. `.planned` does what `--mix` and `--products` say.
    func nextAction(for user: LoadUser, random: LoadRandom) -> LoadUserAction
    /// The closed model's think time after `user`'s lifecycle ended, in nanoseconds; nil: `--think-time`'s.
    func thinkTimeNanoseconds(for user: LoadUser, random: LoadRandom) -> Int64?
    /// A lifecycle ended (completed or in error): make HTTP calls, count, check through `context`.
    func lifecycleEnded(_ outcome: LoadOutcome, user: LoadUser, context: LoadContext)
}

extension LoadUserBehavior {
    public func nextAction(for user: LoadUser, random: LoadRandom) -> LoadUserAction { .planned }
    public func thinkTimeNanoseconds(for user: LoadUser, random: LoadRandom) -> Int64? { nil }
    public func lifecycleEnded(_ outcome: LoadOutcome, user: LoadUser, context: LoadContext) {}
}

/// What a user does at one start; each is a lifecycle kind of `--mix`.
public enum LoadUserAction: Sendable, Equatable {
    /// What the plan's `--mix` and `--products` draw.
    case planned
    case purchase(productIdentifier: String)
    /// A purchase that waits for a parent's approval (Ask to Buy), then is approved or declined.
    case askToBuy(productIdentifier: String)
    case restore
    case refreshReceipt
    /// A refund of the device's latest purchase; a device with none buys what the plan draws instead.
    case requestRefund
}

/// One simulated user (one device) as a behaviour sees it.
public struct LoadUser: Sendable, Equatable {
    public var device: String
    public var account: String
    /// The device's number among this driver's devices.
    public var index: Int
    /// Lifecycles this device started so far.
    public var lifecyclesStarted: Int
    /// Products this device bought and had purchased, oldest first (at most the last 16).
    public var purchasedProducts: [String]
}

/// How a lifecycle ended.
public struct LoadOutcome: Sendable, Equatable {
    public var kind: LifecycleKind
    /// The product a purchase or Ask to Buy bought (nil for the other kinds).
    public var productIdentifier: String?
    /// The purchased transaction's `transactionIdentifier` as the app saw it (the log's, `device.number`), when one was purchased.
    public var transactionIdentifier: String?
    /// The same transaction's `transactionId` as the App Store's signed transaction and `--backend`'s POST carry it (decimal).
    public var appStoreTransactionId: String? { transactionIdentifier.map(AppStoreIdentifier.transactionIdentifier) }
    /// False when the lifecycle ended in an error (refused, unacknowledged, refused by `--backend`).
    public var succeeded: Bool
    /// From the lifecycle's intended start to its end.
    public var latencyNanoseconds: Int64
}

/// The behaviour's random draws: from the driver's seeded choices, so the same seed makes the same users.
public struct LoadRandom: @unchecked Sendable {
    let choices: ChoiceSource
    init(_ choices: ChoiceSource) { self.choices = choices }

    /// A number in [0, 1).
    public func unit() -> Double { choices.unit(.product) }
    /// True with `probability`.
    public func chance(_ probability: Double) -> Bool { choices.chance(.userRestore, probability) }
    /// An index in `0..<count` (0 when `count` is 0 or less).
    public func index(below count: Int) -> Int { count > 0 ? choices.index(.product, count: count) : 0 }
    /// An exponentially distributed duration of mean `meanNanoseconds`, as think times are.
    public func exponentialNanoseconds(meanNanoseconds: Int64) -> Int64 {
        Int64(-log(max(1e-12, 1 - choices.unit(.latency))) * Double(meanNanoseconds))
    }
}

/// An HTTP call the app makes to the team's server, timed as stage `stage` from when it is sent to
/// its answer; an answer outside `expectedStatus`, a timeout or a refused connection is not timed
/// and fails the check `"<stage> answered"`.
public struct LoadHTTPRequest: Sendable {
    public var method: String
    public var url: String
    public var headers: [String: String]
    public var body: Data?
    public var expectedStatus: Range<Int>
    public var timeoutNanoseconds: Int64
    /// Called on the driver's thread with the answer, to check its body and count.
    public var onAnswer: (@Sendable (_ status: Int, _ body: Data, _ context: LoadContext) -> Void)?

    public init(method: String = "GET", url: String, headers: [String: String] = [:], body: Data? = nil, expectedStatus: Range<Int> = 200..<300,
                timeoutNanoseconds: Int64 = 5_000_000_000, onAnswer: (@Sendable (_ status: Int, _ body: Data, _ context: LoadContext) -> Void)? = nil) {
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
        self.expectedStatus = expectedStatus
        self.timeoutNanoseconds = timeoutNanoseconds
        self.onAnswer = onAnswer
    }
}

/// What a behaviour's hook asks for: HTTP calls, counts and checks, carried out by the driver after the hook returns.
public final class LoadContext: @unchecked Sendable {
    var calls: [(stage: String, request: LoadHTTPRequest)] = []
    var counts: [(name: String, amount: Int)] = []
    var checks: [(name: String, passed: Bool)] = []

    init() {}

    /// Sends `request` and times it as stage `stage` (letters, digits, `_`, `-`; not a built-in stage's name).
    public func http(_ stage: String, _ request: LoadHTTPRequest) { calls.append((stage, request)) }
    /// Adds `amount` to the custom counter `name` (summed over drivers in the summary's `counters`).
    public func count(_ name: String, by amount: Int = 1) { counts.append((name, amount)) }
    /// Records one check (the summary's `checks`: passed and failed per name; `checksFailed` is judged `==0` by default).
    public func check(_ name: String, _ passed: Bool) { checks.append((name, passed)) }
}

/// A custom stage's, counter's or check's name: what reports and thresholds can carry.
public enum CustomFigureName {
    /// At most this many custom stages, counters and checks each per load: reports stay bounded.
    public static let maximumCount = 64

    /// Why `name` cannot name a custom figure, or nil when it can. A stage's or counter's name is read
    /// back in thresholds (`entitlements.p99<200ms`, `counters.coins>0`): no spaces, and no stage's
    /// name is a built-in one; a check's name may hold spaces.
    public static func refusal(_ name: String, isCheck: Bool = false, isStage: Bool = false) -> String? {
        guard !name.isEmpty, name.count <= 64,
              name.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_" || $0 == "-" || (isCheck && $0 == " ")) }) else {
            return "'\(name)' must be 1 to 64 ASCII letters, digits, '_' or '-'" + (isCheck ? " or spaces" : "")
        }
        if isStage, LifecycleStage(rawValue: name) != nil || name == "counters" {
            return "'\(name)' is a built-in stage's name; give the custom stage another name"
        }
        return nil
    }
}
