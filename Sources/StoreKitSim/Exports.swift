// A file that imports StoreKitSim sees Foundation through it, as one that imports StoreKit does
// on Apple's platforms. Re-exporting Foundation also makes this module's declarations of the same
// names (`Bundle.appStoreReceiptURL`, AppReceipt.swift) shadow Foundation's in those files.
@_exported import Foundation
// Apple's StoreKit 1 names live in StoreKitRoles, beside the queue they drive, so that the built-in
// behaviours (StoreKitRoles) are written on them too; this module adds what needs more than the
// runtime: the signed receipt (AppStoreSigning) and the app's `Task`.
@_exported import StoreKitRoles
