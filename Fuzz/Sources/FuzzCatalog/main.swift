import FuzzSupport
import StoreKitModel

/// A product catalog file as `--catalog` reads it (`Catalog.load`): a `.json` file, sniffed as the
/// native format or a StoreKit configuration by its content.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzCatalog(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let url = FuzzInput.file(UnsafeRawBufferPointer(start: data, count: size), named: "catalog.json")
    _ = try? Catalog.load(contentsOf: url)
    return 0
}

@_cdecl("FuzzCatalog_main")
func entryPoint(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> CInt {
    runFuzzer(argc, argv) { data, size in fuzzCatalog(data!, size) }
}
