import Foundation
import FuzzSupport
import StoreKitLoad

/// A driver's REPORT as the `sksim load` coordinator reads it (a driver may be on another host):
/// the JSON body (`LoadWire.decode`), its stage histograms (`StageHistograms(encoded:)`) and its
/// counters added to the run's totals (`LoadCounters.+`, as the coordinator sums every report).
/// Frames: the JSON body, then optionally raw histogram bytes, decoded the same way (random
/// mutation rarely makes valid base64 inside the JSON).
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzLoadReport(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let frames = FuzzInput.frames(UnsafeRawBufferPointer(start: data, count: size))
    if let report = try? LoadWire.decode(DriverReport.self, frames[0]) {
        if var histograms = try? StageHistograms(encoded: report.histograms) { histograms.add(histograms) }
        var totals = LoadCounters()
        for _ in 0..<2 { totals = totals + report.counters }
    }
    if frames.count > 1, var histograms = try? StageHistograms(encoded: Data(frames[1])) {
        histograms.add(histograms)
    }
    return 0
}

@_cdecl("FuzzLoadReport_main")
func entryPoint(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> CInt {
    runFuzzer(argc, argv) { data, size in fuzzLoadReport(data!, size) }
}
