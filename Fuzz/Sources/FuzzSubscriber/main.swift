import Bus
import FuzzSupport
import Foundation
import ZeroMQ

/// What a subscriber is sent, decoded by a real `EventSubscriber` over real sockets: the harness
/// plays the queue with a PUB and a ROUTER. The input's first byte says where the rest goes: even,
/// a published message `[topic, header, payload]`; odd, the reply to the subscriber's FETCH
/// (`BATCH, header, records...`). The rest is cut into frames at `FuzzInput.frameSeparator`.
final class Harness {
    let context: ZeroMQContext
    let publisher: Socket
    let router: Socket
    let configuration: EventSubscriberConfiguration

    init() throws {
        context = try ZeroMQContext()
        publisher = try context.socket(.publisher)
        router = try context.socket(.router)
        let identity = "\(getpid())"
        configuration = EventSubscriberConfiguration(
            eventsEndpoint: "inproc://fuzz-events-\(identity)", requestsEndpoint: "inproc://fuzz-requests-\(identity)")
        try publisher.bind(configuration.eventsEndpoint)
        try router.bind(configuration.requestsEndpoint)
    }

    func run(_ input: UnsafeRawBufferPointer) throws {
        // libzmq frees a closed socket only once its peers have processed the closing of their pipes,
        // and a pipe ends only once its reader has read everything in it: so the ROUTER reads what
        // earlier subscribers sent (FETCHes after a gap) and the PUB processes its commands. Without
        // this the context's 1,023 sockets ran out after some 50,000 inputs.
        while try router.receive(timeout: .zero) != nil {}
        _ = try publisher.get(.events)
        // A new subscriber for each input, so one input's effect does not depend on the ones before.
        let subscriber = try EventSubscriber(context: context, configuration: configuration)
        defer { subscriber.close() }
        // Its first FETCH shows both of its connections are made.
        guard let fetch = try router.receive(timeout: .seconds(10)) else { fatalError("the subscriber sent no FETCH") }
        let frames = FuzzInput.frames(UnsafeRawBufferPointer(rebasing: input.dropFirst()))
        if (input.first ?? 0) & 1 == 0 {
            _ = try publisher.send(frames)
        } else {
            _ = try router.send([fetch[0]] + frames)
        }
        for _ in 0..<3 { _ = try subscriber.receive(timeout: .zero) }
    }
}

nonisolated(unsafe) let harness = try! Harness()

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzSubscriber(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    try! harness.run(UnsafeRawBufferPointer(start: data, count: size))
    return 0
}

@_cdecl("FuzzSubscriber_main")
func entryPoint(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> CInt {
    runFuzzer(argc, argv) { data, size in fuzzSubscriber(data!, size) }
}
