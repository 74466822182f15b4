import FuzzSupport
import StoreKitExplore

/// A reproduce file (recorded choices of a finding) as `sksim explore --reproduce` reads it (`ReproduceFile.load`).
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzReproduce(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let url = FuzzInput.file(UnsafeRawBufferPointer(start: data, count: size), named: "reproduce.json")
    _ = try? ReproduceFile.load(url)
    return 0
}

@_cdecl("FuzzReproduce_main")
func entryPoint(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> CInt {
    runFuzzer(argc, argv) { data, size in fuzzReproduce(data!, size) }
}
