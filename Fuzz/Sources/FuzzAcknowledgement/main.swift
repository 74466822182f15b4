import Bus
import FuzzSupport

/// An ACK reply as `CommandSender` decodes it (frames cut at `FuzzInput.frameSeparator`), and the
/// 24-byte record header as subscribers decode it (the first frame).
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzAcknowledgement(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let frames = FuzzInput.frames(UnsafeRawBufferPointer(start: data, count: size))
    if let acknowledgement = try? CommandAcknowledgement.decode(frames) {
        precondition((try? CommandAcknowledgement.decode(acknowledgement.encodedFrames())) == acknowledgement,
                     "a decoded ACK does not survive encoding")
    }
    _ = try? BusWire.decodeHeader(frames[0])
    return 0
}

@_cdecl("FuzzAcknowledgement_main")
func entryPoint(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> CInt {
    runFuzzer(argc, argv) { data, size in fuzzAcknowledgement(data!, size) }
}
