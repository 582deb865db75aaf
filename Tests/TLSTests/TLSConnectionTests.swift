import Foundation
@testable import TLS
import Testing

/// Two `TLSConnection`s pumped into each other in memory: the handshake, data both ways, the
/// exporter, and every refusal (pins, a missing certificate, a mismatch), with the error each
/// side reports.
@Suite(.memoryHeavy) struct TLSConnectionTests {
    @Test func handshakeCompletesAndEachSideSeesTheOther() throws {
        let clientDirectory = try TemporaryDirectory("client")
        let serverDirectory = try TemporaryDirectory("server")
        let pair = try ConnectedPair(clientIdentity: try TLSIdentity.loadOrCreate(directory: clientDirectory.path),
                                     serverIdentity: try TLSIdentity.loadOrCreate(directory: serverDirectory.path))
        #expect(pair.client.handshakeState == .inProgress)
        #expect(pair.server.handshakeState == .inProgress)
        let result = pump(pair.client, pair.server)
        #expect(result.clientError == nil)
        #expect(result.serverError == nil)
        #expect(pair.client.handshakeState == .done)
        #expect(pair.server.handshakeState == .done)
        #expect(pair.client.peerFingerprint == pair.serverIdentity.fingerprint)
        #expect(pair.server.peerFingerprint == pair.clientIdentity.fingerprint)
        #expect(pair.client.peerCertificateDER == pair.serverIdentity.certificateDER)
        #expect(pair.server.peerCertificateDER == pair.clientIdentity.certificateDER)
        #expect(pair.client.negotiatedVersion == "TLSv1.3")
        #expect(pair.server.negotiatedVersion == "TLSv1.3")
        // AES-128-GCM is preferred (the cheaper pass over bulk data); OpenSSL's own order
        // would give AES-256-GCM.
        #expect(pair.client.cipher == "TLS_AES_128_GCM_SHA256")
        #expect(pair.client.cipher == pair.server.cipher)
        // Nothing left over: no tickets or other post-handshake chatter.
        #expect(pair.client.takeOutgoing().isEmpty)
        #expect(pair.server.takeOutgoing().isEmpty)
    }

    @Test func dataFlowsBothWays() throws {
        let pair = try ConnectedPair()
        pump(pair.client, pair.server)
        try pair.client.write(Array("hello from the client".utf8))
        try pair.server.write(Array("hello from the server".utf8))
        let result = pump(pair.client, pair.server)
        #expect(result.clientError == nil && result.serverError == nil)
        #expect(pair.server.readPlaintext() == Array("hello from the client".utf8))
        #expect(pair.client.readPlaintext() == Array("hello from the server".utf8))
        // Taken once: a second read is empty.
        #expect(pair.server.readPlaintext().isEmpty)
    }

    /// 1 MiB each way, written in uneven chunks and delivered in pieces that split records.
    @Test func oneMebibyteInChunksBothWays() throws {
        let pair = try ConnectedPair()
        pump(pair.client, pair.server)
        let upload = pattern(1 << 20, seed: 1)
        let download = pattern(1 << 20, seed: 2)
        var offset = 0, step = 1
        while offset < upload.count {
            let end = min(upload.count, offset + 1000 * step)  // 1000, 2000, ... bytes
            try pair.client.write(Array(upload[offset..<end]))
            try pair.server.write(Array(download[offset..<end]))
            offset = end
            step = step % 70 + 1
        }
        var received = (atServer: [UInt8](), atClient: [UInt8]())
        for _ in 0..<100 {
            let result = pump(pair.client, pair.server, chunk: 4093)
            #expect(result.clientError == nil && result.serverError == nil)
            received.atServer += pair.server.readPlaintext()
            received.atClient += pair.client.readPlaintext()
            if received.atServer.count >= upload.count && received.atClient.count >= download.count { break }
        }
        #expect(received.atServer == upload)
        #expect(received.atClient == download)
    }

    /// Slices are encrypted as they are (bulk data is written from where it lies, after the
    /// frames before it): exactly their bytes arrive, in order, over several records,
    /// whatever lies around them in their array.
    @Test func aSliceArrivesAsItIs() throws {
        let pair = try ConnectedPair()
        pump(pair.client, pair.server)
        let message = pattern(100_000, seed: 3)
        try pair.client.write(message[7..<20_007], then: message[20_007..<70_007])
        try pair.client.write(message[70_007...], then: [])
        let result = pump(pair.client, pair.server, chunk: 16_000)
        #expect(result.clientError == nil && result.serverError == nil)
        #expect(pair.server.readPlaintext() == Array(message[7...]))
    }

    /// What OpenSSL reads comes out of the fed arrays in order, a read crossing from one
    /// into the next, and nothing is counted twice or lost; output taken is left empty.
    @Test func ciphertextBuffersReadAcrossFeeds() {
        let b = CiphertextBuffers()
        let fed = pattern(30, seed: 4)
        b.feed(Array(fed[0..<10]))
        b.feed([])
        b.feed(Array(fed[10..<13]))
        b.feed(Array(fed[13..<30]))
        #expect(b.pendingInput == 30)
        var got: [UInt8] = []
        for want in [4, 9, 1, 50, 5] {
            var chunk = [UInt8](repeating: 0, count: want)
            let n = chunk.withUnsafeMutableBytes { b.read(into: $0.baseAddress!, count: want) }
            got += chunk.prefix(n)
        }
        #expect(got == fed && b.pendingInput == 0)
        let two: [UInt8] = [1, 2]
        two.withUnsafeBytes { b.write($0) }
        b.reserveOutput(1_000)
        [UInt8]([3]).withUnsafeBytes { b.write($0) }
        #expect(b.pendingOutput == 3)
        b.dropOutput(from: 2)
        #expect(b.takeOutput() == two && b.pendingOutput == 0 && b.takeOutput().isEmpty)
    }

    /// The ciphertext buffers behind the SSL's BIO go with the connection: the BIO holds a
    /// reference to them, given back when OpenSSL frees it with the SSL.
    @Test func theCiphertextBuffersGoWithTheConnection() throws {
        weak var buffers: CiphertextBuffers?
        do {
            let pair = try ConnectedPair()
            pump(pair.client, pair.server)
            try pair.client.write(Array("unread".utf8))
            buffers = pair.client.network
            #expect(buffers != nil && pair.client.network.pendingOutput > 0)
        }
        #expect(buffers == nil)
    }

    /// Writes made before the handshake is done are buffered and arrive in order after it.
    @Test func writesBeforeTheHandshakeAreBuffered() throws {
        let pair = try ConnectedPair()
        try pair.client.write(Array("early ".utf8))
        try pair.client.write(Array("bird".utf8))
        try pair.server.write(Array("server early".utf8))
        pump(pair.client, pair.server)
        #expect(pair.client.handshakeState == .done && pair.server.handshakeState == .done)
        #expect(pair.server.readPlaintext() == Array("early bird".utf8))
        #expect(pair.client.readPlaintext() == Array("server early".utf8))
    }

    @Test func exportersAgreeForTheSameLabelAndContext() throws {
        let pair = try ConnectedPair()
        #expect(throws: TLSError.self) {
            try pair.client.exportKeyingMaterial(label: "EXPORTER-peerlink", context: [], length: 32)
        }
        pump(pair.client, pair.server)
        let context: [UInt8] = [1, 2, 3]
        let atClient = try pair.client.exportKeyingMaterial(label: "EXPORTER-peerlink", context: context, length: 32)
        let atServer = try pair.server.exportKeyingMaterial(label: "EXPORTER-peerlink", context: context, length: 32)
        #expect(atClient.count == 32)
        #expect(atClient == atServer)
        #expect(atClient != [UInt8](repeating: 0, count: 32))
        let otherLabel = try pair.server.exportKeyingMaterial(label: "EXPORTER-other", context: context, length: 32)
        #expect(otherLabel != atClient)
        let otherContext = try pair.server.exportKeyingMaterial(label: "EXPORTER-peerlink", context: [1, 2, 4], length: 32)
        #expect(otherContext != atClient)
        let longer = try pair.client.exportKeyingMaterial(label: "EXPORTER-peerlink", context: context, length: 64)
        #expect(longer.count == 64)
        // Another session gives other bytes for the same label and context.
        let second = try ConnectedPair(clientIdentity: pair.clientIdentity, serverIdentity: pair.serverIdentity)
        pump(second.client, second.server)
        #expect(try second.client.exportKeyingMaterial(label: "EXPORTER-peerlink", context: context, length: 32) != atClient)
    }

    /// The server's pin refuses the client: the server fails with the policy's reason, the
    /// client (whose TLS 1.3 handshake finished first) fails on the server's alert.
    @Test func serverPinRejectionFailsBothSides() throws {
        let pair = try ConnectedPair(serverPin: PinPolicy { _ in .reject("not invited") })
        try pair.client.write(Array("lost".utf8))
        let result = pump(pair.client, pair.server)
        #expect(result.serverError?.kind == .pinRejected(reason: "not invited"))
        #expect(failure(of: pair.server)?.kind == .pinRejected(reason: "not invited"))
        #expect(result.serverError?.message.contains("not invited") == true)
        let clientError = try #require(result.clientError)
        #expect(clientError.kind == .peerAlert("handshake failure"), "\(clientError)")
        #expect(failure(of: pair.client) == clientError)
        #expect(pair.server.readPlaintext().isEmpty)
        // Failed is final: later calls report the same error.
        #expect(throws: clientError) { try pair.client.write([1]) }
        #expect(throws: clientError) { try pair.client.feed([1]) }
    }

    /// The client's pin refuses the server: the client fails with the reason, the server on
    /// the client's alert, before its handshake is done.
    @Test func clientPinRejectionFailsBothSides() throws {
        let pair = try ConnectedPair(clientPin: PinPolicy { _ in .reject("unknown server") })
        let result = pump(pair.client, pair.server)
        #expect(result.clientError?.kind == .pinRejected(reason: "unknown server"))
        #expect(result.serverError?.kind == .peerAlert("handshake failure"), "\(String(describing: result.serverError))")
        #expect(pair.server.peerFingerprint == nil)
        #expect(pair.client.peerFingerprint == nil)
    }

    /// A client with no certificate: the server refuses it ("peer did not return a
    /// certificate"), the client learns why from the alert.
    @Test func clientWithoutIdentityIsRefused() throws {
        let serverIdentity = try TLSIdentity.ephemeral()
        let client = try TLSConnection(role: .client, identity: nil, pin: .expect(serverIdentity.fingerprint))
        let server = try TLSConnection(role: .server, identity: serverIdentity, pin: .acceptAny)
        let result = pump(client, server)
        #expect(result.serverError?.kind == .peerCertificateMissing, "\(String(describing: result.serverError))")
        #expect(result.clientError?.kind == .peerAlert("certificate required"), "\(String(describing: result.clientError))")
        #expect(server.peerFingerprint == nil)
    }

    /// The client expects one peer ID and the server presents another certificate: refused,
    /// with a reason naming both fingerprints (short hex).
    @Test func pinMismatchNamesBothFingerprints() throws {
        let expected = try TLSIdentity.ephemeral()
        let impostor = try TLSIdentity.ephemeral()
        let pair = try ConnectedPair(serverIdentity: impostor, clientPin: .expect(expected.fingerprint))
        let result = pump(pair.client, pair.server)
        let error = try #require(result.clientError)
        guard case .pinRejected(let reason) = error.kind else {
            Issue.record("expected a pin rejection, got \(error)")
            return
        }
        #expect(reason.contains(Fingerprint.short(impostor.fingerprint)), "\(reason)")
        #expect(reason.contains(Fingerprint.short(expected.fingerprint)), "\(reason)")
        #expect(Fingerprint.short(expected.fingerprint).count == 17)  // 16 hex digits and "…"
        #expect(result.serverError != nil)
    }

    /// A known peer ID presenting another certificate to a server is refused too.
    @Test func serverRefusesAKnownPeerWithAnotherCertificate() throws {
        let known = try TLSIdentity.ephemeral()
        let other = try TLSIdentity.ephemeral()
        let pair = try ConnectedPair(clientIdentity: other, serverPin: .oneOf([known.fingerprint]))
        let result = pump(pair.client, pair.server)
        guard case .pinRejected(let reason)? = result.serverError?.kind else {
            Issue.record("expected a pin rejection, got \(String(describing: result.serverError))")
            return
        }
        #expect(reason.contains(Fingerprint.short(other.fingerprint)))
        #expect(result.clientError != nil)
    }

    @Test func closeSendsCloseNotifyAndTheOtherWayStaysOpen() throws {
        let pair = try ConnectedPair()
        pump(pair.client, pair.server)
        try pair.client.write(Array("last words".utf8))
        pair.client.close()
        pair.client.close()  // idempotent
        #expect(pair.client.isClosed)
        #expect(throws: TLSError(.closed, "write after close()")) { try pair.client.write([1]) }
        pump(pair.client, pair.server)
        #expect(pair.server.peerClosed)
        #expect(pair.server.readPlaintext() == Array("last words".utf8))
        // Half-close: the server may still answer, and the client still decrypts.
        try pair.server.write(Array("goodbye".utf8))
        pair.server.close()
        pump(pair.client, pair.server)
        #expect(pair.client.readPlaintext() == Array("goodbye".utf8))
        #expect(pair.client.peerClosed)
        #expect(pair.client.handshakeState == .done && pair.server.handshakeState == .done)
    }

    /// close() during the handshake: the buffered writes go first, then close_notify.
    @Test func closeBeforeTheHandshakeSendsBufferedWritesFirst() throws {
        let pair = try ConnectedPair()
        try pair.client.write(Array("queued".utf8))
        pair.client.close()
        pump(pair.client, pair.server)
        #expect(pair.server.readPlaintext() == Array("queued".utf8))
        #expect(pair.server.peerClosed)
    }

    @Test func aCorruptRecordFailsTheConnection() throws {
        let pair = try ConnectedPair()
        pump(pair.client, pair.server)
        try pair.client.write(pattern(100))
        var record = pair.client.takeOutgoing()
        record[record.count - 5] ^= 0x01
        let error = try #require(deliver(record, to: pair.server))
        #expect(error.kind == .io, "\(error)")
        #expect(failure(of: pair.server) == error)
        #expect(pair.server.readPlaintext().isEmpty)
    }

    @Test func garbageInsteadOfAClientHelloFailsTheHandshake() throws {
        let server = try TLSConnection(role: .server, identity: TLSIdentity.ephemeral(), pin: .acceptAny)
        let error = try #require(deliver(Array("GET / HTTP/1.1\r\nHost: x\r\n\r\n".utf8), to: server))
        #expect(failure(of: server) == error)
        #expect(error.message.contains("error:"), "OpenSSL's text is kept: \(error)")
    }

    /// OpenSSL's error queue is per thread: an earlier failure's text (here a PEM parse
    /// error) must not show up in the next error made on the same thread.
    @Test func oneFailuresTextDoesNotLeakIntoTheNext() throws {
        let directory = try TemporaryDirectory("leak")
        try Data("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n".utf8)
            .write(to: URL(fileURLWithPath: directory.file("identity.key")))
        try Data().write(to: URL(fileURLWithPath: directory.file("identity.crt")))
        let first = try #require(throws: TLSError.self) { try TLSIdentity.loadOrCreate(directory: directory.path) }
        #expect(first.message.contains("PEM") || first.message.contains("DECODER") || first.message.contains("asn1"),
                "\(first)")
        let server = try TLSConnection(role: .server, identity: TLSIdentity.ephemeral(), pin: .acceptAny)
        let second = try #require(deliver(Array(repeating: 0x16, count: 64), to: server))
        #expect(!second.message.contains("PEM") && !second.message.contains("DECODER"), "\(second)")
        // And a clean handshake after both still succeeds on this thread.
        let pair = try ConnectedPair()
        let result = pump(pair.client, pair.server)
        #expect(result.clientError == nil && result.serverError == nil)
    }

    @Test func aServerNeedsAnIdentity() {
        #expect(throws: TLSError.self) { try TLSConnection(role: .server, identity: nil, pin: .acceptAny) }
        do {
            _ = try TLSConnection(role: .server, identity: nil, pin: .acceptAny)
        } catch {
            #expect(error.kind == .invalidState)
        }
    }

    /// Dates are not checked: a pinned certificate that expired an hour ago, or is valid only
    /// from next year (a board whose clock is behind), still completes the handshake.
    @Test func certificateDatesDoNotMatter() throws {
        let expired = try TLSIdentity.ephemeral(validFrom: -7200, for: 3600)
        let notYetValid = try TLSIdentity.ephemeral(validFrom: 365 * 24 * 3600, for: 3600)
        let pair = try ConnectedPair(clientIdentity: expired, serverIdentity: notYetValid)
        let result = pump(pair.client, pair.server)
        #expect(result.clientError == nil && result.serverError == nil)
        #expect(pair.client.peerFingerprint == notYetValid.fingerprint)
        #expect(pair.server.peerFingerprint == expired.fingerprint)
    }

    /// The pin policy sees the peer's fingerprint, once per handshake.
    @Test func thePolicyIsGivenThePeersFingerprint() throws {
        let serverIdentity = try TLSIdentity.ephemeral()
        let seen = SeenFingerprints()
        let pair = try ConnectedPair(serverIdentity: serverIdentity, clientPin: PinPolicy { fingerprint in
            seen.append(fingerprint)
            return .accept
        })
        pump(pair.client, pair.server)
        #expect(seen.all == [serverIdentity.fingerprint])
    }

    /// Delivered a byte at a time, as a slow socket might: the handshake still completes.
    @Test func handshakeOneByteAtATime() throws {
        let pair = try ConnectedPair()
        let result = pump(pair.client, pair.server, chunk: 1)
        #expect(result.clientError == nil && result.serverError == nil)
        #expect(pair.client.handshakeState == .done && pair.server.handshakeState == .done)
    }

    /// The verify callback's box (and so the pin policy it holds) is released with its
    /// connection: the `Unmanaged` reference taken in `init` is given back in `deinit`.
    @Test func thePinPolicyIsReleasedWithTheConnection() throws {
        let tracker = Tracker()
        weak let weakTracker = tracker
        do {
            let held = tracker
            let pair = try ConnectedPair(clientPin: PinPolicy { _ in
                _ = held
                return .accept
            })
            pump(pair.client, pair.server)
            #expect(pair.client.handshakeState == .done)
        }
        _ = consume tracker
        #expect(weakTracker == nil)
    }

    /// A connection may move between threads between calls (a serial queue's items run on
    /// any thread): here every step runs on a different queue, one at a time.
    @Test func aConnectionMayMoveBetweenThreads() async throws {
        let pair = try ConnectedPair()
        for round in 0..<20 {
            let queue = DispatchQueue(label: "tls-test-\(round)")
            let idle = await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
                queue.async {
                    let toServer = pair.client.takeOutgoing()
                    let toClient = pair.server.takeOutgoing()
                    _ = deliver(toServer, to: pair.server)
                    _ = deliver(toClient, to: pair.client)
                    continuation.resume(returning: toServer.isEmpty && toClient.isEmpty)
                }
            }
            if idle { break }
        }
        #expect(pair.client.handshakeState == .done && pair.server.handshakeState == .done)
    }

    @Test func fingerprintsParseAndPrint() {
        let bytes: [UInt8] = [0xab, 0x01, 0xff]
        #expect(Fingerprint.hexString(bytes) == "ab01ff")
        #expect(Fingerprint.parse("AB:01:FF") == bytes)
        #expect(Fingerprint.parse("ab01ff") == bytes)
        #expect(Fingerprint.parse("ab0") == nil)
        #expect(Fingerprint.parse("+b01") == nil)
    }
}
