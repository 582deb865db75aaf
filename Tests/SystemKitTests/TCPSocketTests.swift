import Foundation
import SystemKit
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// TCP sockets on loopback: `HOST:PORT` parsing, a dual-stack listener reached over IPv4 and
/// IPv6, a refused connect reported with its address.
@Suite struct TCPSocketTests {
    @Test(arguments: [
        ("127.0.0.1:7000", "127.0.0.1", 7000), ("[::1]:1", "::1", 1), ("board.local:65535", "board.local", 65535),
        ("[fe80::1%eth0]:80", "fe80::1%eth0", 80),
    ])
    func parsesHostAndPort(text: String, host: String, port: Int) throws {
        let hp = try HostPort(text)
        #expect(hp.host == host && Int(hp.port) == port)
        #expect(hp.description == text)
    }

    @Test(arguments: [
        ("nohost", "expected HOST:PORT"), (":80", "the host is empty"), ("a:0", "from 1 to 65535"), ("a:65536", "from 1 to 65535"),
        ("a:x", "from 1 to 65535"), ("::1:80", "in brackets"), ("[::1:80", "no ']'"), ("[::1]80", "expected ':PORT'"),
        ("a b:1", "printable ASCII"),
    ])
    func rejectsBadAddresses(text: String, words: String) {
        #expect {
            _ = try HostPort(text)
        } throws: { error in
            "\(error)".contains(words) && "\(error)".contains("'\(text)'")
        }
    }

    /// Connects to `address`, waiting (blocking, up to 5 s) for the connect to finish.
    static func connect(_ address: SocketAddress) throws -> Int32 {
        let fd = try TCPSocket.startConnect(to: address)
        var p = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
        _ = poll(&p, 1, 5000)
        do { try TCPSocket.connectResult(fd, to: address) } catch {
            closeQuietly(fd)
            throw error
        }
        return fd
    }

    static func acceptWaiting(_ listener: Int32) throws -> (fd: Int32, from: SocketAddress) {
        var p = pollfd(fd: listener, events: Int16(POLLIN), revents: 0)
        _ = poll(&p, 1, 5000)
        guard let a = try TCPSocket.accept(listener) else { throw SystemError(call: "accept", code: ETIMEDOUT) }
        return a
    }

    @Test(arguments: ["127.0.0.1", "::1"])
    func aDualStackListenerIsReachedOverBothFamilies(host: String) throws {
        let (listener, port) = try TCPSocket.listen(port: 0, loopback: false)
        defer { closeQuietly(listener) }
        #expect(port > 0)
        let addresses = try TCPSocket.resolve(HostPort("\(host.contains(":") ? "[\(host)]" : host):\(port)"))
        #expect(addresses.count == 1 && addresses[0].port == port)
        let client = try Self.connect(addresses[0])
        defer { closeQuietly(client) }
        let (server, from) = try Self.acceptWaiting(listener)
        defer { closeQuietly(server) }
        #expect(from.unmappedHost == host)
        #expect(try TCPSocket.localAddress(client).port == from.port)
        #expect(try TCPSocket.peerAddress(client).port == port)
        try setNonBlocking(client, false)
        try setNonBlocking(server, false)
        try writeAll(client, [1, 2, 3])
        #expect(try SocketIO.receive(server) == [1, 2, 3])
    }

    @Test func aRefusedConnectNamesTheAddress() throws {
        // A port held by a socket that is bound and does not listen: a connect to it is
        // refused, and no other socket (a parallel test's listener, or this connect's own
        // end: TCP connects a socket to itself when both ends get one port) can take it
        // meanwhile, as it could a port that was only free a moment ago.
        let bound = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #expect(bound >= 0)
        defer { closeQuietly(bound) }
        var local = sockaddr_in()
        local.sin_family = sa_family_t(AF_INET)
        local.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bindResult = withUnsafePointer(to: &local) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(bound, $0, length) } }
        #expect(bindResult == 0)
        _ = withUnsafeMutablePointer(to: &local) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(bound, $0, &length) } }
        let port = UInt16(bigEndian: local.sin_port)
        #expect(port != 0)
        let address = try TCPSocket.resolve(HostPort("127.0.0.1:\(port)"))[0]
        #expect {
            _ = try Self.connect(address)
        } throws: { error in
            (error as? SystemError)?.code == ECONNREFUSED && "\(error)".contains("127.0.0.1:\(port)")
        }
    }
}
