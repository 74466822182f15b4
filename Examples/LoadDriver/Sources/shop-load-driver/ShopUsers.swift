import Foundation
import StoreKitLoadKit

/// The shop's users as code: what they buy, how long they think, when they restore, refund or ask a
/// parent; after each purchase the app asks the shop's own server for the account's entitlements
/// (timed as stage `entitlements`), and counts the coins sold.
struct ShopUsers: LoadUserBehavior {
    /// The shop's server (`SHOP_SERVER_URL`, e.g. http://127.0.0.1:8080, the one `--backend` POSTs to); nil: no calls to it.
    let server: String? = ProcessInfo.processInfo.environment["SHOP_SERVER_URL"]

    func nextAction(for user: LoadUser, random: LoadRandom) -> LoadUserAction {
        // A returning user restores now and then; one with a purchase may ask for a refund.
        if user.lifecyclesStarted > 0 && user.lifecyclesStarted % 5 == 0 { return .restore }
        if !user.purchasedProducts.isEmpty && random.chance(0.02) { return .requestRefund }
        // Children's devices (every fourth account) ask a parent first.
        if (user.index / 2) % 4 == 3 { return .askToBuy(productIdentifier: "com.example.sksim.coins.small") }
        return .purchase(productIdentifier: random.chance(0.1) ? "com.example.sksim.coins.large" : "com.example.sksim.coins.small")
    }

    func thinkTimeNanoseconds(for user: LoadUser, random: LoadRandom) -> Int64? {
        random.exponentialNanoseconds(meanNanoseconds: 200_000_000)
    }

    func lifecycleEnded(_ outcome: LoadOutcome, user: LoadUser, context: LoadContext) {
        guard outcome.kind == .purchase || outcome.kind == .askToBuy else { return }
        context.check("purchase completed", outcome.succeeded)
        guard outcome.succeeded, let product = outcome.productIdentifier, let transaction = outcome.appStoreTransactionId else { return }
        context.count("coins", by: ShopObserver.coins[product] ?? 0)
        guard let server else { return }
        let url = "\(server)/entitlements?account=\(user.account)"
        context.http("entitlements", LoadHTTPRequest(url: url) { _, body, context in
            // The server lists what it granted the account: the purchase just made (POSTed to it by
            // `--backend` before the app finished it) must be among it.
            context.check("entitlement listed", String(decoding: body, as: UTF8.self).contains(transaction))
        })
    }
}
