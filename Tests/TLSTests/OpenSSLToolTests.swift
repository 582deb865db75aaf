import Foundation
import SystemKit
import TestSupport
import TLS
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// `TLSConnection` against the independent implementation: `openssl s_client` dials our server
/// and `openssl s_server` answers our client, over loopback TCP (127.0.0.1 only). The bridge
/// between a socket and a connection lives here, in the test: the TLS module never touches a
/// socket. Every wait is bounded; child processes are stopped at the end.
@Suite(.serialized)  // without openssl each test fails at its #require (a missing tool is a failure, not a skip)
struct OpenSSLToolTests {
    /// Seconds any one step may take before the test gives up.
    static let timeout = 15.0

    @Test func sClientCompletesTLS13WithOurServer() async throws {
        let openssl = try #require(opensslPath)
        let files = try TemporaryDirectory("s_client")
        let clientFingerprint = try await makeToolCertificate(openssl, in: files)
        let identity = try TLSIdentity.loadOrCreate(directory: files.file("server"))
        let server = try TLSConnection(role: .server, identity: identity, pin: .expect(clientFingerprint))
        let (served, tool) = try await serveOne(server, openssl: openssl,
                                                 arguments: ["-tls1_3", "-cert", files.file("c.crt"), "-key", files.file("c.key")])
        #expect(served.error == nil, "\(String(describing: served.error)); s_client: \(tool)")
        #expect(server.handshakeState == .done)
        #expect(server.peerFingerprint == clientFingerprint)
        // s_client prints "Protocol  : TLSv1.3" inside its SSL-Session block, which for TLS 1.3
        // it prints only when a session ticket arrives; we send none (a resumed session would
        // skip the certificate exchange, and with it the pin), so it is the "New" line here.
        #expect(tool.stdout.contains("New, TLSv1.3, Cipher is TLS_"), "\(tool)")
        #expect(tool.stdout.contains("hello from peerlink"), "\(tool)")
        // The certificate s_client was shown is ours: its SHA-256, by openssl, is our fingerprint.
        let pem = try #require(firstCertificatePEM(in: tool.stdout), "\(tool)")
        let printed = try await runTool(openssl, ["x509", "-noout", "-fingerprint", "-sha256"],
                                        stdin: Data(pem.utf8), timeout: Self.timeout)
        let value = try #require(printed.stdout.split(separator: "=").last.map(String.init), "\(printed)")
        #expect(Fingerprint.parse(value.trimmingCharacters(in: .whitespacesAndNewlines)) == identity.fingerprint)
    }

    /// s_client presents a certificate other than the one the pin expects: refused, with
    /// both fingerprints in the reason; s_client is told "handshake failure".
    @Test func sClientWithAnotherCertificateIsRefusedByThePin() async throws {
        let openssl = try #require(opensslPath)
        let files = try TemporaryDirectory("s_client")
        let presented = try await makeToolCertificate(openssl, in: files)
        let expected = try TLSIdentity.ephemeral().fingerprint
        let server = try TLSConnection(role: .server, identity: try TLSIdentity.ephemeral(), pin: .expect(expected))
        let (served, tool) = try await serveOne(server, openssl: openssl,
                                                 arguments: ["-tls1_3", "-cert", files.file("c.crt"), "-key", files.file("c.key")])
        guard case .pinRejected(let reason)? = served.error?.kind else {
            Issue.record("expected a pin rejection, got \(String(describing: served.error)); \(tool)")
            return
        }
        #expect(reason.contains(Fingerprint.short(presented)) && reason.contains(Fingerprint.short(expected)), "\(reason)")
        #expect(!tool.stdout.contains("hello from peerlink"))
        #expect((tool.stdout + tool.stderr).contains("handshake failure"), "\(tool)")
    }

    @Test func sClientWithTLS12IsRefused() async throws {
        let openssl = try #require(opensslPath)
        let files = try TemporaryDirectory("s_client")
        _ = try await makeToolCertificate(openssl, in: files)
        let server = try TLSConnection(role: .server, identity: try TLSIdentity.ephemeral(), pin: .acceptAny)
        let (served, tool) = try await serveOne(server, openssl: openssl,
                                                 arguments: ["-tls1_2", "-cert", files.file("c.crt"), "-key", files.file("c.key")])
        #expect(served.error?.kind == .protocolVersion, "\(String(describing: served.error))")
        #expect(!tool.stdout.contains("New, TLSv1.3"))
        #expect(tool.status != 0, "\(tool)")
        #expect((tool.stdout + tool.stderr).contains("protocol version"), "\(tool)")
    }

    @Test func sClientWithoutACertificateIsRefused() async throws {
        let openssl = try #require(opensslPath)
        let server = try TLSConnection(role: .server, identity: try TLSIdentity.ephemeral(), pin: .acceptAny)
        let (served, tool) = try await serveOne(server, openssl: openssl, arguments: ["-tls1_3"])
        #expect(served.error?.kind == .peerCertificateMissing, "\(String(describing: served.error)); \(tool)")
        #expect(server.peerFingerprint == nil)
        #expect(!tool.stdout.contains("hello from peerlink"))
        #expect((tool.stdout + tool.stderr).contains("certificate required"), "\(tool)")
    }

    /// The other direction: our client against `openssl s_server -Verify 1` (which requires
    /// our certificate), pinning the server certificate's fingerprint as openssl prints it.
    @Test func ourClientCompletesTLS13WithSServer() async throws {
        let openssl = try #require(opensslPath)
        let files = try TemporaryDirectory("s_server")
        let serverFingerprint = try await makeToolCertificate(openssl, in: files)
        let identity = try TLSIdentity.ephemeral()
        let server = try BackgroundTool(openssl, ["s_server", "-accept", "127.0.0.1:0", "-naccept", "1", "-tls1_3",
                                                  "-Verify", "1", "-www",
                                                  "-cert", files.file("c.crt"), "-key", files.file("c.key")])
        defer { server.stop() }
        #expect(await server.waitForOutput(containing: ["ACCEPT 127.0.0.1:"], timeout: Self.timeout), "\(server.text)")
        let port = try #require(acceptedPort(server.text), "\(server.text)")
        let client = try TLSConnection(role: .client, identity: identity, pin: .expect(serverFingerprint))
        let done = try await onThread { () throws -> Bridged in
            let fd = try connectLoopback(port: port)
            defer { closeQuietly(fd) }
            return bridge(fd, client, deadline: Date().addingTimeInterval(Self.timeout),
                          until: { String(decoding: $0, as: UTF8.self).contains("</HTML>") }) { connection in
                try? connection.write(Array("GET / HTTP/1.0\r\n\r\n".utf8))
            }
        }
        #expect(done.error == nil, "\(String(describing: done.error)); s_server: \(server.text)")
        #expect(client.negotiatedVersion == "TLSv1.3")
        #expect(client.peerFingerprint == serverFingerprint)
        let page = String(decoding: done.received, as: UTF8.self)
        #expect(page.contains("TLSv1.3"), "\(page)")
        #expect(page.contains("Protocol  : TLSv1.3"), "\(page)")
        // s_server saw our certificate.
        #expect(page.contains("CN=peerlink") || page.contains("CN = peerlink") || server.text.contains("peerlink"),
                "\(page)\n\(server.text)")
    }

    // MARK: Helpers

    /// Makes `c.key`/`c.crt` with openssl itself (P-256, self-signed) and returns the SHA-256
    /// fingerprint openssl prints for it.
    private func makeToolCertificate(_ openssl: String, in files: TemporaryDirectory) async throws -> [UInt8] {
        let made = try await runTool(openssl, ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                                               "-nodes", "-keyout", files.file("c.key"), "-out", files.file("c.crt"),
                                               "-subj", "/CN=openssl-tool", "-days", "2"], timeout: Self.timeout)
        try #require(made.status == 0, "\(made)")
        let printed = try await runTool(openssl, ["x509", "-in", files.file("c.crt"), "-noout", "-fingerprint", "-sha256"],
                                        timeout: Self.timeout)
        let value = try #require(printed.stdout.split(separator: "=").last.map(String.init), "\(printed)")
        return try #require(Fingerprint.parse(value.trimmingCharacters(in: .whitespacesAndNewlines)))
    }

    /// Runs `openssl s_client -connect 127.0.0.1:PORT -ign_eof ARGUMENTS` against `server`
    /// behind a loopback listener. Once the handshake is done the server says hello and
    /// closes (close_notify), which ends s_client.
    private func serveOne(_ server: TLSConnection, openssl: String, arguments: [String]) async throws -> (Bridged, ToolResult) {
        let listener = try LoopbackListener()
        // -ign_eof: s_client's stdin is empty; it must wait for our close, not quit at once.
        async let tool = runTool(openssl, ["s_client", "-connect", "127.0.0.1:\(listener.port)", "-ign_eof"] + arguments,
                                 timeout: Self.timeout + 5)
        let served = try await onThread { () throws -> Bridged in
            let fd = try listener.accept(timeout: Self.timeout)
            defer { closeQuietly(fd) }
            return bridge(fd, server, deadline: Date().addingTimeInterval(Self.timeout)) { connection in
                try? connection.write(Array("hello from peerlink\n".utf8))
                connection.close()
            }
        }
        return (served, try await tool)
    }

    private func firstCertificatePEM(in text: String) -> String? {
        guard let start = text.range(of: "-----BEGIN CERTIFICATE-----"),
              let end = text.range(of: "-----END CERTIFICATE-----", range: start.upperBound..<text.endIndex) else { return nil }
        return String(text[start.lowerBound..<end.upperBound]) + "\n"
    }

    private func acceptedPort(_ text: String) -> UInt16? {
        guard let line = text.split(separator: "\n").first(where: { $0.hasPrefix("ACCEPT 127.0.0.1:") }),
              let port = line.split(separator: ":").last else { return nil }
        return UInt16(port.trimmingCharacters(in: .whitespaces))
    }
}

// MARK: The socket bridge (test-only)

/// What a bridged connection ended with.
struct Bridged: Sendable {
    /// The connection's error, if it failed.
    var error: TLSError?
    /// Plaintext received.
    var received: [UInt8] = []
}

/// Pumps bytes between the socket `fd` and `connection` until the peer closes the socket, the
/// connection fails (its alert sent first), `until` is true of the plaintext received, or
/// `deadline` passes. `onDone` runs once, when the handshake is done.
func bridge(_ fd: Int32, _ connection: TLSConnection, deadline: Date, until: ([UInt8]) -> Bool = { _ in false },
            onDone: (TLSConnection) -> Void) -> Bridged {
    var result = Bridged()
    var doneSeen = false
    var buffer = [UInt8](repeating: 0, count: 16 * 1024)
    while true {
        if !doneSeen && connection.handshakeState == .done {
            doneSeen = true
            onDone(connection)
        }
        guard sendAll(fd, connection.takeOutgoing()) else { break }
        if result.error != nil { break }
        let remaining = deadline.timeIntervalSinceNow
        if remaining <= 0 { break }
        var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        let ready = poll(&p, 1, Int32(min(remaining, 1) * 1000))
        if ready < 0 && errno != EINTR { break }
        if ready <= 0 { continue }
        let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        if n <= 0 { break }  // the peer closed (or reset) its end
        do throws(TLSError) {
            try connection.feed(Array(buffer[0..<n]))
        } catch {
            result.error = error
        }
        result.received += connection.readPlaintext()
        if until(result.received) { break }
    }
    result.received += connection.readPlaintext()
    return result
}

/// Sends all of `bytes`; false if the socket failed (the peer went away).
private func sendAll(_ fd: Int32, _ bytes: [UInt8]) -> Bool {
    var offset = 0
    while offset < bytes.count {
        let n = bytes.withUnsafeBytes { raw in
            send(fd, raw.baseAddress.map { $0 + offset }, raw.count - offset, Int32(MSG_NOSIGNAL))
        }
        if n < 0 && errno == EINTR { continue }
        if n <= 0 { return false }
        offset += n
    }
    return true
}

/// A TCP listener on 127.0.0.1 and a port the kernel picked.
final class LoopbackListener: Sendable {
    let fd: Int32
    let port: UInt16

    init() throws {
        let sock = try syscall("socket") { socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0) }
        var address = loopbackAddress(port: 0)
        var bound = sockaddr_in()
        do {
            try withUnsafePointer(to: &address) { pointer in
                try pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { sa in
                    _ = try syscall("bind") { bind(sock, sa, socklen_t(MemoryLayout<sockaddr_in>.size)) }
                }
            }
            try syscall("listen") { listen(sock, 4) }
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            try withUnsafeMutablePointer(to: &bound) { pointer in
                try pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { sa in
                    _ = try syscall("getsockname") { getsockname(sock, sa, &length) }
                }
            }
        } catch {
            closeQuietly(sock)
            throw error
        }
        fd = sock
        port = UInt16(bigEndian: bound.sin_port)
    }

    /// The next connection, waiting at most `timeout` seconds.
    func accept(timeout: Double) throws -> Int32 {
        var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        let ready = try syscall("poll") { poll(&p, 1, Int32(timeout * 1000)) }
        guard ready > 0 else { throw TestSupportError("no connection on 127.0.0.1:\(port) within \(timeout) s") }
        let client = try syscall("accept") { Glibc.accept(fd, nil, nil) }
        try? setCloseOnExec(client)
        return client
    }

    deinit { closeQuietly(fd) }
}

/// Connects a TCP socket to 127.0.0.1:`port` (loopback connects at once or fail at once).
func connectLoopback(port: UInt16) throws -> Int32 {
    let fd = try syscall("socket") { socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0) }
    var address = loopbackAddress(port: port)
    do {
        try withUnsafePointer(to: &address) { pointer in
            try pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { sa in
                _ = try syscall("connect") { connect(fd, sa, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
        }
    } catch {
        closeQuietly(fd)
        throw error
    }
    return fd
}

private func loopbackAddress(port: UInt16) -> sockaddr_in {
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = port.bigEndian
    address.sin_addr.s_addr = UInt32(0x7f00_0001).bigEndian
    return address
}
