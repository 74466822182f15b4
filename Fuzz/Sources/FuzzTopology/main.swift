import FuzzSupport
import StoreKitLive
import StoreKitLoad

/// A topology YAML file as `sksim run|queue|topology check|...` read it (`Topology.load`), then, as
/// `sksim load` does once the topology has loaded, its `load:` section (`LoadSettings.fromTopology`).
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzTopology(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let url = FuzzInput.file(UnsafeRawBufferPointer(start: data, count: size), named: "topology.yaml")
    guard (try? Topology.load(path: url.path)) != nil else { return 0 }
    _ = try? LoadSettings.fromTopology(path: url.path)
    return 0
}

@_cdecl("FuzzTopology_main")
func entryPoint(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> CInt {
    runFuzzer(argc, argv) { data, size in fuzzTopology(data!, size) }
}
