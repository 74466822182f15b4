import FuzzSupport
import StoreKitModel

/// An Xcode `.storekit` configuration as `--catalog x.storekit` and `sksim catalog import` read it (`Catalog.load`).
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzStoreKit(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let url = FuzzInput.file(UnsafeRawBufferPointer(start: data, count: size), named: "Products.storekit")
    _ = try? Catalog.load(contentsOf: url)
    return 0
}

@_cdecl("FuzzStoreKit_main")
func entryPoint(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> CInt {
    runFuzzer(argc, argv) { data, size in fuzzStoreKit(data!, size) }
}
