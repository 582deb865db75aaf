import Foundation
import Synchronization
import TLS
import Testing

/// A fresh temporary directory, removed (with everything in it) when released.
final class TemporaryDirectory {
    let path: String

    init(_ label: String = "tls") throws {
        path = FileManager.default.temporaryDirectory
            .appendingPathComponent("peerlink-\(label)-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }

    /// `name` inside the directory.
    func file(_ name: String) -> String { path + "/" + name }

    deinit { try? FileManager.default.removeItem(atPath: path) }
}

/// What went wrong on each side while pumping.
struct PumpResult {
    var clientError: TLSError?
    var serverError: TLSError?
}

/// Moves ciphertext between two connections, as two sockets would, until neither has
/// anything to send (at most `rounds` exchanges, so a bug cannot loop forever). A side whose
/// `feed` throws keeps its error; its alert, if any, is still delivered to the other side.
/// `chunk` splits each delivery into pieces of that size, as a socket may.
@discardableResult
func pump(_ client: TLSConnection, _ server: TLSConnection, chunk: Int? = nil, rounds: Int = 1000) -> PumpResult {
    var result = PumpResult()
    for _ in 0..<rounds {
        let toServer = client.takeOutgoing()
        let toClient = server.takeOutgoing()
        if toServer.isEmpty && toClient.isEmpty { break }
        if result.serverError == nil { result.serverError = deliver(toServer, to: server, chunk: chunk) }
        if result.clientError == nil { result.clientError = deliver(toClient, to: client, chunk: chunk) }
    }
    return result
}

/// Feeds `bytes` to `connection` in pieces of `chunk` bytes (all at once if nil); the error
/// that stopped it, if any.
func deliver(_ bytes: [UInt8], to connection: TLSConnection, chunk: Int? = nil) -> TLSError? {
    let size = max(1, chunk ?? bytes.count)
    var offset = 0
    while offset < bytes.count {
        let end = min(bytes.count, offset + size)
        do throws(TLSError) {
            try connection.feed(Array(bytes[offset..<end]))
        } catch {
            return error
        }
        offset = end
    }
    return nil
}

/// Two connections made for each other: a client and a server with their own identities, each
/// pinning the other's fingerprint unless told otherwise.
struct ConnectedPair {
    let clientIdentity: TLSIdentity
    let serverIdentity: TLSIdentity
    let client: TLSConnection
    let server: TLSConnection

    init(clientIdentity: TLSIdentity? = nil, serverIdentity: TLSIdentity? = nil,
         clientPin: PinPolicy? = nil, serverPin: PinPolicy? = nil) throws {
        let c = try clientIdentity ?? TLSIdentity.ephemeral()
        let s = try serverIdentity ?? TLSIdentity.ephemeral()
        self.clientIdentity = c
        self.serverIdentity = s
        client = try TLSConnection(role: .client, identity: c, pin: clientPin ?? .expect(s.fingerprint))
        server = try TLSConnection(role: .server, identity: s, pin: serverPin ?? .expect(c.fingerprint))
    }
}

/// The error a connection failed with, or nil if it has not failed.
func failure(of connection: TLSConnection) -> TLSError? {
    if case .failed(let error) = connection.handshakeState { return error }
    return nil
}

/// `count` bytes of a repeating, position-dependent pattern (so a reordering would show).
func pattern(_ count: Int, seed: UInt8 = 0) -> [UInt8] {
    (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ ($0 >> 8) &+ Int(seed)) }
}

/// The `openssl` command, when installed.
let opensslPath: String? = ["/usr/bin/openssl", "/usr/local/bin/openssl"]
    .first { FileManager.default.isExecutableFile(atPath: $0) }

/// Fingerprints a pin policy was called with (the policy is `@Sendable`).
final class SeenFingerprints: Sendable {
    private let storage = Mutex<[[UInt8]]>([])
    func append(_ fingerprint: [UInt8]) { storage.withLock { $0.append(fingerprint) } }
    var all: [[UInt8]] { storage.withLock { $0 } }
}

/// An object whose release a test can watch through a weak reference.
final class Tracker: Sendable {}
