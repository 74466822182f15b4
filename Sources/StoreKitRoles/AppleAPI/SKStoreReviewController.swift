import Foundation

/// `SKStoreReviewController`: asks the user to rate the app. Store managers often call it after a
/// purchase; the simulated store has no user to ask, so nothing happens. (`requestReview(in:)` takes a
/// `UIWindowScene`, which Linux has not.)
open class SKStoreReviewController: NSObject, @unchecked Sendable {
    open class func requestReview() {}
}
