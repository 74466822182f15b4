import Bus
import EventLog
import FuzzSupport
import Foundation
import StoreKitModel
import ZeroMQ

/// A request (CMD, FETCH, PING or anything else) sent over a real DEALER to a real `QueueEndpoint`
/// over its log, as a client on the network would: the input's frames (cut at
/// `FuzzInput.frameSeparator`) are the message after the ROUTER's routing id. Every request from a
/// known peer is answered, so the harness waits for that answer (a bounded number of steps).
final class Harness {
    let context: ZeroMQContext
    let endpoint: QueueEndpoint
    let dealer: Socket

    init() throws {
        let directory = FuzzInput.freshDirectory("queue-log")
        let writer = try PartitionWriter(
            directory: directory, partition: "queue", configuration: PartitionWriterConfiguration(durability: .always))
        // A few records, so FETCH has something to read.
        for index in 0..<3 {
            let event = Event.deviceRegistered(device: "device-\(index)", account: "account-\(index)")
            _ = try writer.append(payload: EventCodec.encode(event, commandID: nil), timestampNanoseconds: Int64(index))
        }
        context = try ZeroMQContext()
        let identity = "\(getpid())"
        var configuration = QueueEndpointConfiguration(
            eventsEndpoint: "inproc://fuzz-events-\(identity)", requestsEndpoint: "inproc://fuzz-requests-\(identity)")
        configuration.refusalReportInterval = .seconds(3_600)
        // Decoding is what is fuzzed: the handler records nothing, so every input meets the same queue.
        endpoint = try QueueEndpoint(context: context, configuration: configuration, writer: writer) { _ in
            .retryLater("fuzzing: decoding only")
        }
        dealer = try context.socket(.dealer)
        try dealer.connect(endpoint.requestsEndpoint)
    }

    func run(_ frames: [[UInt8]]) throws {
        // Beyond 7 frames or 65,536 + 1,024 bytes a request is drained unanswered and counted as
        // oversized (docs/wire-format.md); every other request is answered.
        let oversized = frames.count > 7 || frames.reduce(0) { $0 + $1.count } > endpoint.configuration.maximumCommandBytes + 1_024
        let oversizedBefore = endpoint.counters.refused[.oversized]
        _ = try dealer.send(frames)
        for _ in 0..<1_000 {
            try endpoint.step(timeout: .milliseconds(10))
            if oversized {
                guard endpoint.counters.refused[.oversized] > oversizedBefore else { continue }
                let reply = try dealer.receive(timeout: .zero)
                precondition(reply == nil, "the queue answered an oversized request")
                return
            }
            guard let reply = try dealer.receive(timeout: .zero) else { continue }
            check(reply)
            return
        }
        fatalError("the queue did not \(oversized ? "count" : "answer") a request of \(frames.count) frames")
    }

    /// The queue's own replies must be well-formed whatever it was sent.
    func check(_ reply: [[UInt8]]) {
        switch reply.first.map({ String(decoding: $0, as: UTF8.self) }) {
        case "ACK": precondition((try? CommandAcknowledgement.decode(reply)) != nil, "the queue sent an ACK its clients cannot decode")
        case "BATCH", "PONG": break
        default: fatalError("the queue sent an unknown reply")
        }
    }
}

nonisolated(unsafe) let harness = try! Harness()

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzQueueRequests(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    try! harness.run(FuzzInput.frames(UnsafeRawBufferPointer(start: data, count: size)))
    return 0
}

@_cdecl("FuzzQueueRequests_main")
func entryPoint(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> CInt {
    runFuzzer(argc, argv) { data, size in fuzzQueueRequests(data!, size) }
}
