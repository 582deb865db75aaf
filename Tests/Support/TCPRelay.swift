import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A TCP relay on 127.0.0.1 for tests: every connection made to `port` is joined to a new
/// connection to `target`, bytes copied both ways by two threads of its own (blocking
/// sockets, outside the cooperative pool). `cut()` breaks every current pair at once, as a
/// link that goes down would, and the relay keeps accepting: a redial through it works.
public final class TCPRelay: Sendable {
    /// The port to connect to.
    public let port: UInt16
    private let listener: Int32
    private let target: UInt16
    private let pairs = Mutex<[(Int32, Int32)]>([])
    private let closed = Mutex(false)
    /// Flip a byte in the next chunk from the connecting side (`corruptNextChunk`).
    private let corruptNext = Mutex(false)

    /// A relay to 127.0.0.1:`target`.
    public init(to target: UInt16) throws {
        self.target = target
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw POSIXError(.EMFILE) }
        var a = Self.loopback(0)
        let bound = withUnsafePointer(to: &a) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        guard bound == 0, listen(fd, 16) == 0 else {
            Glibc.close(fd)
            throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO)
        }
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &a) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) } }
        listener = fd
        port = UInt16(bigEndian: a.sin_port)
        let t = Thread { [self] in self.acceptLoop() }
        t.start()
    }

    /// Breaks every pair now (both ends see the connection reset or closed).
    public func cut() {
        // Under the lock: a pair's descriptors are closed under it too, so none is shut down
        // after its number was reused.
        pairs.withLock { list in
            for (a, b) in list {
                // SO_LINGER 0: a reset, as when a link dies and the peer's stack gives up.
                var l = linger(l_onoff: 1, l_linger: 0)
                setsockopt(a, SOL_SOCKET, SO_LINGER, &l, socklen_t(MemoryLayout<linger>.size))
                setsockopt(b, SOL_SOCKET, SO_LINGER, &l, socklen_t(MemoryLayout<linger>.size))
                shutdown(a, Int32(SHUT_RDWR))
                shutdown(b, Int32(SHUT_RDWR))
            }
        }
    }

    /// Flips one byte in the middle of the next chunk the connecting side sends (a TLS
    /// record damaged on the way, which TLS must refuse).
    public func corruptNextChunk() { corruptNext.withLock { $0 = true } }

    /// How many pairs are joined now.
    public var pairCount: Int { pairs.withLock { $0.count } }

    /// Stops accepting and breaks every pair.
    public func close() {
        closed.withLock { $0 = true }
        shutdown(listener, Int32(SHUT_RDWR))
        cut()
    }

    deinit { Glibc.close(listener) }

    private func acceptLoop() {
        while !closed.withLock({ $0 }) {
            let inbound = accept(listener, nil, nil)
            guard inbound >= 0 else { if errno == EINTR { continue } else { return } }
            let outbound = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var a = Self.loopback(target)
            let ok = withUnsafePointer(to: &a) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(outbound, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
            guard ok == 0 else {
                Glibc.close(inbound)
                Glibc.close(outbound)
                continue
            }
            pairs.withLock { $0.append((inbound, outbound)) }
            let done = Mutex(0)
            for (from, to) in [(inbound, outbound), (outbound, inbound)] {
                let corruptible = from == inbound
                Thread {
                    self.copy(from, to, corruptible: corruptible)
                    // The second direction to finish closes both descriptors.
                    if done.withLock({ n in n += 1; return n }) == 2 {
                        self.pairs.withLock { list in
                            list.removeAll { $0 == (inbound, outbound) }
                            Glibc.close(inbound)
                            Glibc.close(outbound)
                        }
                    }
                }.start()
            }
        }
    }

    private func copy(_ from: Int32, _ to: Int32, corruptible: Bool) {
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = buffer.withUnsafeMutableBytes { recv(from, $0.baseAddress, $0.count, 0) }
            if n < 0, errno == EINTR { continue }
            guard n > 0 else { break }
            if corruptible, corruptNext.withLock({ c in defer { c = false }; return c }) { buffer[n / 2] ^= 0xFF }
            var sent = 0
            while sent < n {
                let m = buffer.withUnsafeBytes { send(to, $0.baseAddress! + sent, n - sent, Int32(MSG_NOSIGNAL)) }
                if m < 0, errno == EINTR { continue }
                guard m > 0 else { shutdown(from, Int32(SHUT_RDWR)); return }
                sent += m
            }
        }
        shutdown(to, Int32(SHUT_RDWR))
    }

    private static func loopback(_ port: UInt16) -> sockaddr_in {
        var a = sockaddr_in()
        a.sin_family = sa_family_t(AF_INET)
        a.sin_port = port.bigEndian
        a.sin_addr.s_addr = UInt32(0x7f00_0001).bigEndian
        return a
    }
}
