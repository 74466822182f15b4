// A file that imports StoreKitSim sees Foundation through it, as one that imports StoreKit does
// on Apple's platforms. Re-exporting Foundation also makes this module's declarations of the same
// names (`Bundle.appStoreReceiptURL`, AppReceipt.swift) shadow Foundation's in those files.
@_exported import Foundation
