import FuzzSupport
import StoreKitModel

/// The CMD body as the queue decodes it (`QueueEndpoint` calls `EventCodec.decodeCommand` on it).
/// A command that decodes must survive encoding and decoding again: the queue logs the decoded value.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzCommand(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = UnsafeRawBufferPointer(start: data, count: size)
    guard let command = try? EventCodec.decodeCommand(bytes) else { return 0 }
    // Compared as encoded bytes: a NaN (which the codec carries; the queue rejects it) is not equal to itself.
    let encoded = EventCodec.encode(command)
    let again = try? EventCodec.decodeCommand(encoded)
    precondition(again.map(EventCodec.encode) == encoded, "a decoded command does not survive encoding: \(command)")
    return 0
}

@_cdecl("FuzzCommand_main")
func entryPoint(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> CInt {
    runFuzzer(argc, argv) { data, size in fuzzCommand(data!, size) }
}
