import FuzzSupport
import Bus
import StoreKitModel
import StoreKitRuntime

/// An event payload as subscribers (`BusRecord.decoded`), recovery and replay (`LogProjection.decode`) read it.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzEvent(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = UnsafeRawBufferPointer(start: data, count: size)
    let projected = try? LogProjection.decode(sequence: 1, timestamp: 0, payload: bytes)
    let received = try? BusRecord(sequence: 1, timestamp: 0, payload: Array(bytes), device: nil).decoded()
    // Compared as encoded bytes: a NaN (which the codec carries; the queue rejects it) is not equal to itself.
    let encoded = projected.map { EventCodec.encode($0.event, commandID: $0.commandID) }
    precondition(encoded == received.map { EventCodec.encode($0.event, commandID: $0.commandID) },
                 "the log and the bus decode one payload differently")
    if let encoded {
        let again = try? EventCodec.decodeEvent(encoded)
        precondition(again.map { EventCodec.encode($0.event, commandID: $0.commandID) } == encoded,
                     "a decoded event does not survive encoding: \(projected!.event)")
    }
    return 0
}

@_cdecl("FuzzEvent_main")
func entryPoint(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> CInt {
    runFuzzer(argc, argv) { data, size in fuzzEvent(data!, size) }
}
