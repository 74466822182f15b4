#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Ends one connection that a bound socket accepted, by its file descriptor (from a monitor's
/// `accepted` event or a message's `__fd` property). libzmq has no call that closes one peer of a
/// bound socket; shutting the descriptor down makes its I/O thread read the end of the stream and
/// close the connection as if the peer had: the peer's pipe ends, and with it everything libzmq
/// kept for that peer (its subscriptions, its queued messages). The peer may reconnect.
public enum AcceptedConnection {
    /// Shuts down both directions of the connection on `fileDescriptor`, only if it is still an
    /// accepted connection (not a listener) whose local address is `endpoint` (the resolved
    /// `tcp://host:port` or `ipc:///path` the socket bound). A descriptor can be closed and reused
    /// between the moment it was learnt and this call; the check keeps a reused one from being
    /// anything but another connection to the same endpoint. Returns whether it was shut down.
    @discardableResult
    public static func shutDown(fileDescriptor: Int32, boundTo endpoint: String) -> Bool {
        guard fileDescriptor >= 0, isAcceptedConnection(fileDescriptor, boundTo: endpoint) else { return false }
        return shutdown(fileDescriptor, Int32(SHUT_RDWR)) == 0
    }

    /// The peer's address of a TCP connection (`127.0.0.1:54321`, `[::1]:54321`); nil for other sockets.
    public static func peerAddress(fileDescriptor: Int32) -> String? {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let named = withUnsafeMutablePointer(to: &storage) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { getpeername(fileDescriptor, $0, &length) }
        }
        guard named == 0 else { return nil }
        var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN) + 1)
        switch Int32(storage.ss_family) {
        case AF_INET:
            return withUnsafePointer(to: &storage) { pointer in
                pointer.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { address -> String? in
                    var host = address.pointee.sin_addr
                    guard inet_ntop(AF_INET, &host, &text, socklen_t(text.count)) != nil else { return nil }
                    return "\(nulTerminated(text)):\(UInt16(bigEndian: address.pointee.sin_port))"
                }
            }
        case AF_INET6:
            return withUnsafePointer(to: &storage) { pointer in
                pointer.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { address -> String? in
                    var host = address.pointee.sin6_addr
                    guard inet_ntop(AF_INET6, &host, &text, socklen_t(text.count)) != nil else { return nil }
                    return "[\(nulTerminated(text))]:\(UInt16(bigEndian: address.pointee.sin6_port))"
                }
            }
        default:
            return nil
        }
    }

    /// Whether the peer of a TCP connection has sent any byte (the kernel's count, `TCP_INFO`'s
    /// `tcpi_bytes_received`, Linux 4.1 and later); nil for other sockets or when the kernel does not say.
    /// libzmq reads what arrives at once, so the socket's own buffer cannot tell.
    public static func hasReceivedData(fileDescriptor: Int32) -> Bool? {
        #if os(Linux)
        // struct tcp_info of linux/tcp.h: tcpi_bytes_received is the u64 at offset 128 (Glibc's copy of
        // the struct ends before it).
        var information = [UInt8](repeating: 0, count: 256)
        var length = socklen_t(information.count)
        guard getsockopt(fileDescriptor, Int32(IPPROTO_TCP), TCP_INFO, &information, &length) == 0, length >= 136 else { return nil }
        let received = information.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: 128, as: UInt64.self) }
        return received > 0
        #else
        return nil
        #endif
    }

    static func isAcceptedConnection(_ descriptor: Int32, boundTo endpoint: String) -> Bool {
        var accepting: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        // Fails for anything that is not a socket (a reused descriptor of a file, an eventfd).
        guard getsockopt(descriptor, SOL_SOCKET, SO_ACCEPTCONN, &accepting, &length) == 0, accepting == 0 else { return false }
        var storage = sockaddr_storage()
        var storageLength = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let named = withUnsafeMutablePointer(to: &storage) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &storageLength) }
        }
        guard named == 0 else { return false }
        if endpoint.hasPrefix("tcp://") {
            guard let colon = endpoint.lastIndex(of: ":"), let port = UInt16(endpoint[endpoint.index(after: colon)...]) else { return false }
            switch Int32(storage.ss_family) {
            case AF_INET:
                let local = withUnsafePointer(to: &storage) { $0.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { $0.pointee.sin_port } }
                return UInt16(bigEndian: local) == port
            case AF_INET6:
                let local = withUnsafePointer(to: &storage) { $0.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { $0.pointee.sin6_port } }
                return UInt16(bigEndian: local) == port
            default:
                return false
            }
        }
        if endpoint.hasPrefix("ipc://"), Int32(storage.ss_family) == AF_UNIX {
            let expected = Array(endpoint.dropFirst("ipc://".count).utf8)
            let local: [UInt8] = withUnsafePointer(to: &storage) { pointer in
                pointer.withMemoryRebound(to: sockaddr_un.self, capacity: 1) { address in
                    withUnsafeBytes(of: address.pointee.sun_path) { Array($0.prefix { $0 != 0 }) }
                }
            }
            return local == expected
        }
        return false
    }
}

/// The text of a C string buffer filled by the C library (such as `inet_ntop`), up to its first NUL.
private func nulTerminated(_ characters: [CChar]) -> String {
    String(decoding: characters.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
}
