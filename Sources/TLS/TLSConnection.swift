internal import COpenSSL
import Synchronization

/// Where a connection's handshake is.
public enum TLSHandshakeState: Sendable, Equatable {
    /// Messages are still to be exchanged: send `takeOutgoing()`, feed what arrives.
    case inProgress
    /// Both sides are authenticated (as far as this side can know: see `TLSConnection`);
    /// application data flows.
    case done
    /// The connection failed, during the handshake or after it (a fatal alert, a corrupt
    /// record), and can carry nothing more. `takeOutgoing()` may still hold an alert telling
    /// the peer why: send it, then close the socket.
    case failed(TLSError)
}

/// One TLS 1.3 connection driven through memory buffers: it never touches a socket. Whoever
/// owns the socket pumps bytes through it (the SwiftNIO-SSL shape):
///
/// ```
/// socket bytes ──feed()──▶ TLSConnection ──readPlaintext()──▶ frame decoder
/// frames ──write()──▶ TLSConnection ──takeOutgoing()──▶ socket
/// ```
///
/// After every `feed`, `write` or `close`, send whatever `takeOutgoing()` returns. A client
/// queues its ClientHello in `init`. Both sides present certificates (the server requires
/// the client's), the peer's certificate may be self-signed, and the `PinPolicy` given here
/// decides whether it is acceptable. Only TLS 1.3 is spoken.
///
/// Writes made before the handshake is done are buffered and sent, in order, as soon as it
/// is; `close()` before then sends close_notify after them.
///
/// In TLS 1.3 a client finishes its handshake before the server has checked the client's
/// certificate: a server that refuses it answers with an alert, which the client's next
/// `feed` reports (`handshakeState` becomes `.failed` with kind `.peerAlert`), and data the
/// client wrote meanwhile is discarded by the server.
///
/// Concurrency: not thread-safe. A connection must be used from one serial context at a time
/// (`Peer` confines each to its connection's serial queue); overlapping calls from two
/// threads stop the process with a precondition failure rather than corrupt OpenSSL's state.
/// `@unchecked Sendable` for that reason only: it may move between threads between calls
/// (a serial queue's work items run on any thread), never be used by two at once. OpenSSL's
/// thread-local error queue is cleared at the start of each call and read before it returns.
public final class TLSConnection: @unchecked Sendable {
    /// Which end of the handshake this is.
    public let role: TLSRole
    /// Where the handshake is; `.failed` is final.
    public private(set) var handshakeState: TLSHandshakeState = .inProgress
    /// SHA-256 of the peer's certificate (its peer ID), once the handshake is done.
    public private(set) var peerFingerprint: [UInt8]?
    /// The peer's certificate, DER-encoded, once the handshake is done.
    public private(set) var peerCertificateDER: [UInt8]?
    /// The protocol version, "TLSv1.3", once the handshake is done.
    public private(set) var negotiatedVersion: String?
    /// The cipher suite, e.g. "TLS_AES_128_GCM_SHA256", once the handshake is done.
    public private(set) var cipher: String?
    /// True once the peer has sent close_notify: nothing more will be decrypted.
    public private(set) var peerClosed = false
    /// True once `close()` was called: writes are refused.
    public private(set) var isClosed = false

    private let context: OpenSSLObject
    private let ssl: OpenSSLObject
    /// What OpenSSL reads ciphertext from (filled by `feed`) and writes it to (emptied by
    /// `takeOutgoing`), behind the SSL's BIO. Internal for the tests only: everything else
    /// reaches it through the calls above, inside their confinement check.
    let network = CiphertextBuffers()
    /// The verify callback's state; the `SSL`'s ex_data holds the +1 reference taken in `init`.
    private let verify: Unmanaged<VerifyBox>
    /// Decrypted and not yet taken: a piece per record, each decrypted straight into its own
    /// array (one copy of every byte fewer than gathering them in one buffer).
    private var plaintext: [[UInt8]] = []
    private var plaintextCount = 0
    private var pendingWrites: [UInt8] = []
    /// The most a record carries (TLS 1.3: 2^14 bytes of plaintext).
    private static let recordPlaintext = 16 * 1024
    /// Set while a call runs: catches use from two threads at once.
    private let busy = Atomic<Bool>(false)

    /// A connection for `role`, presenting `identity`'s certificate (required for a server;
    /// a client without one is refused by any PeerLink server) and accepting the peer's
    /// certificate when `pin` does. A client's ClientHello is ready in `takeOutgoing()` at once.
    public init(role: TLSRole, identity: TLSIdentity?, pin: PinPolicy) throws(TLSError) {
        self.role = role
        try OpenSSLLibrary.require()
        OpenSSLErrors.clear()
        context = try SSLSetup.makeContext(role: role, identity: identity)
        ssl = try OpenSSLObject(openSSL.SSL_new(context.pointer), "SSL_new") { openSSL.SSL_free($0) }
        // One BIO both ways; the SSL owns it from here (it holds the buffers until freed).
        let bio = try CiphertextBIO.make(network)
        openSSL.SSL_set_bio(ssl.pointer, bio, bio)
        let box = Unmanaged.passRetained(VerifyBox(pin: pin))
        verify = box
        // Every stored property is set from here on, so a throw runs `deinit`, which gives
        // the box's reference back: no release here.
        guard openSSL.SSL_set_ex_data(ssl.pointer, SSLSetup.exDataIndex, box.toOpaque()) == 1 else {
            throw OpenSSLErrors.error(.library, "SSL_set_ex_data")
        }
        switch role {
        case .client: openSSL.SSL_set_connect_state(ssl.pointer)
        case .server: openSSL.SSL_set_accept_state(ssl.pointer)
        }
        if role == .client { try advance() }
    }

    deinit {
        // The SSL may outlive this body by a moment (stored properties are freed after it):
        // empty the slot first so nothing can reach the box once it is released.
        _ = openSSL.SSL_set_ex_data(ssl.pointer, SSLSetup.exDataIndex, nil)
        verify.release()
    }

    // MARK: Pumping

    /// Hands the connection ciphertext read from the network: it advances the handshake and
    /// decrypts what it can (take it with `readPlaintext()`). Then send `takeOutgoing()`.
    /// Throws the connection's error when it fails (now or before); partial records wait
    /// for the rest.
    public func feed(_ ciphertext: [UInt8]) throws(TLSError) {
        enter()
        defer { leave() }
        if case .failed(let error) = handshakeState { throw error }
        // After the peer's close_notify nothing more is read: kept, it would only pile up.
        if peerClosed { return }
        OpenSSLErrors.clear()
        network.feed(ciphertext)
        try advance()
    }

    /// Encrypts `plaintext` for the peer (send `takeOutgoing()` next). Before the handshake
    /// is done the bytes are buffered, and encrypted as soon as it is.
    public func write(_ plaintext: [UInt8]) throws(TLSError) {
        try write(plaintext[...], then: [])
    }

    /// The same for `head` and then `rest`, slices encrypted from where they lie (bulk data
    /// after the frames before it, without a copy of it after them). Both go or neither: if
    /// `rest` fails after `head` went, what `head` became is dropped and the connection has
    /// failed (a frame cut in two cannot be taken back).
    public func write(_ head: ArraySlice<UInt8>, then rest: ArraySlice<UInt8>) throws(TLSError) {
        enter()
        defer { leave() }
        if case .failed(let error) = handshakeState { throw error }
        if isClosed { throw TLSError(.closed, "write after close()") }
        if head.isEmpty && rest.isEmpty { return }
        if handshakeState == .inProgress {
            pendingWrites += head
            pendingWrites += rest
            return
        }
        OpenSSLErrors.clear()
        try encrypt(head, then: rest)
    }

    /// The plaintext decrypted so far and not yet taken (empty if none).
    public func readPlaintext() -> [UInt8] {
        let pieces = readPlaintextPieces()
        return pieces.count == 1 ? pieces[0] : Array(pieces.joined())
    }

    /// The same as `readPlaintext`, in the pieces it was decrypted in (a record each), so a
    /// caller that appends them to a buffer of its own copies each byte once.
    public func readPlaintextPieces() -> [[UInt8]] {
        enter()
        defer { leave() }
        let out = plaintext
        plaintext = []
        plaintextCount = 0
        return out
    }

    /// How many decrypted bytes wait for `readPlaintext()`: a caller that cannot keep up stops
    /// feeding (and reading its socket) while this is high; nothing here limits it.
    public var bufferedPlaintextCount: Int { plaintextCount }

    /// The ciphertext waiting to be sent to the peer (empty if none).
    public func takeOutgoing() -> [UInt8] {
        enter()
        defer { leave() }
        return network.takeOutput()
    }

    /// Ends our side of the connection: queues close_notify (send `takeOutgoing()`), after
    /// any buffered writes if the handshake is still running. Later writes are refused; what
    /// the peer still sends is decrypted until its own close_notify. Idempotent.
    public func close() {
        enter()
        defer { leave() }
        if isClosed { return }
        isClosed = true
        if handshakeState == .done { shutdown() }
    }

    // MARK: After the handshake

    /// Keying material derived from the session (RFC 8446 §7.5, RFC 5705): both ends get
    /// the same bytes for the same `label`, `context` and `length`, and nobody else can.
    /// The context is always used (an empty one is still a context). Needs a finished handshake.
    public func exportKeyingMaterial(label: String, context: [UInt8], length: Int) throws(TLSError) -> [UInt8] {
        enter()
        defer { leave() }
        guard handshakeState == .done else {
            throw TLSError(.invalidState, "keying material can only be exported after the handshake")
        }
        guard length > 0 else { throw TLSError(.invalidState, "keying material length must be positive, not \(length)") }
        OpenSSLErrors.clear()
        let labelLength = label.utf8.count
        var ok: Int32 = 0
        let material = [UInt8](unsafeUninitializedCapacity: length) { output, count in
            ok = context.withUnsafeBufferPointer { contextBytes in
                openSSL.SSL_export_keying_material(ssl.pointer, output.baseAddress, length, label, labelLength,
                                           contextBytes.baseAddress, contextBytes.count, 1)
            }
            count = ok == 1 ? length : 0
        }
        try check(ok, "SSL_export_keying_material")
        return material
    }

    // MARK: Driving OpenSSL

    /// Runs the handshake as far as the buffered input allows, then decrypts records.
    private func advance() throws(TLSError) {
        if handshakeState == .inProgress {
            let result = openSSL.SSL_do_handshake(ssl.pointer)
            if result != 1 {
                let code = openSSL.SSL_get_error(ssl.pointer, result)
                if code == SSL_ERROR_WANT_READ || code == SSL_ERROR_WANT_WRITE { return }
                throw fail(classify(code, duringHandshake: true))
            }
            try finishHandshake()
        }
        try decrypt()
    }

    /// Records what the handshake established, then sends what waited for it.
    private func finishHandshake() throws(TLSError) {
        guard openSSL.SSL_version(ssl.pointer) == TLS1_3_VERSION else {
            throw fail(TLSError(.protocolVersion, "the handshake did not negotiate TLS 1.3"))
        }
        // The server's flags and the verify callback already insist on a certificate; this
        // makes the rule hold here too, whatever OpenSSL did.
        guard let certificate = openSSL.SSL_get0_peer_certificate(ssl.pointer) else {
            throw fail(TLSError(.peerCertificateMissing, "the peer presented no certificate"))
        }
        let der: [UInt8], fingerprint: [UInt8]
        do throws(TLSError) {
            der = try CertificateInfo.der(certificate)
            fingerprint = try CertificateInfo.sha256(der)
        } catch {
            throw fail(error)
        }
        guard fingerprint == verify.takeUnretainedValue().presentedFingerprint else {
            throw fail(TLSError(.handshakeFailed, "the peer's certificate was not the one the pin policy checked"))
        }
        peerCertificateDER = der
        peerFingerprint = fingerprint
        negotiatedVersion = openSSL.SSL_get_version(ssl.pointer).map { String(cString: $0) }
        cipher = openSSL.SSL_get_current_cipher(ssl.pointer).flatMap { openSSL.SSL_CIPHER_get_name($0) }.map { String(cString: $0) }
        handshakeState = .done
        if !pendingWrites.isEmpty {
            let waiting = pendingWrites
            pendingWrites = []
            try encrypt(waiting[...], then: [])
        }
        if isClosed { shutdown() }
    }

    /// Decrypts every complete record buffered into `plaintext`; notes the peer's close_notify.
    private func decrypt() throws(TLSError) {
        while !peerClosed {
            var result: Int32 = 0
            let piece = [UInt8](unsafeUninitializedCapacity: Self.recordPlaintext) { buffer, initialized in
                var count = 0
                result = openSSL.SSL_read_ex(ssl.pointer, buffer.baseAddress, buffer.count, &count)
                initialized = result == 1 ? count : 0
            }
            if result == 1 {
                if !piece.isEmpty {
                    // A small record's piece is copied to its size: a peer sending tiny
                    // records must not make each hold a whole record's worth of memory.
                    plaintext.append(piece.count < Self.recordPlaintext / 8 ? Self.rightSized(piece) : piece)
                    plaintextCount += piece.count
                }
                continue
            }
            let code = openSSL.SSL_get_error(ssl.pointer, result)
            switch code {
            case SSL_ERROR_WANT_READ, SSL_ERROR_WANT_WRITE:
                return
            case SSL_ERROR_ZERO_RETURN:
                peerClosed = true
            default:
                throw fail(classify(code, duringHandshake: false))
            }
        }
    }

    /// A copy of `bytes` in storage of its own size (`Array(bytes)` may keep the capacity).
    private static func rightSized(_ bytes: [UInt8]) -> [UInt8] {
        [UInt8](unsafeUninitializedCapacity: bytes.count) { buffer, initialized in
            initialized = buffer.initialize(from: bytes).1
        }
    }

    /// Encrypts all of `head`, then all of `rest` (the output buffer never refuses, so it all
    /// fits), with room made once for both.
    private func encrypt(_ head: ArraySlice<UInt8>, then rest: ArraySlice<UInt8>) throws(TLSError) {
        // Each record adds its header (5 bytes), content type (1) and tag (16).
        let total = head.count + rest.count
        network.reserveOutput(total + (total / Self.recordPlaintext + 2) * 22)
        let mark = network.pendingOutput
        try encrypt(head)
        do throws(TLSError) {
            try encrypt(rest)
        } catch {
            guard !head.isEmpty else { throw error }
            network.dropOutput(from: mark)
            throw fail(error)
        }
    }

    private func encrypt(_ bytes: ArraySlice<UInt8>) throws(TLSError) {
        guard !bytes.isEmpty else { return }
        var written = 0
        let result = bytes.withUnsafeBytes { buffer in
            openSSL.SSL_write_ex(ssl.pointer, buffer.baseAddress, buffer.count, &written)
        }
        if result != 1 {
            let error = classify(openSSL.SSL_get_error(ssl.pointer, result), duringHandshake: false)
            // Writing after the peer's close is refused, not fatal: reads may still be pending.
            if error.kind == .closed { throw error }
            throw fail(error)
        }
    }

    /// Queues close_notify. A failure here leaves nothing to send and nothing to report
    /// (the connection is being given up), so the error queue is just emptied.
    private func shutdown() {
        OpenSSLErrors.clear()
        if openSSL.SSL_shutdown(ssl.pointer) < 0 { _ = OpenSSLErrors.drain() }
    }

    /// Records `error` as the connection's final state and returns it for throwing.
    private func fail(_ error: TLSError) -> TLSError {
        handshakeState = .failed(error)
        pendingWrites = []
        return error
    }

    /// Turns a failed call's `SSL_get_error` code and OpenSSL's error queue into one error
    /// (the queue is read here, once, and left empty).
    private func classify(_ code: Int32, duringHandshake: Bool) -> TLSError {
        let entries = OpenSSLErrors.drain()
        let text = OpenSSLErrors.text(entries)
        // Our own verify callback's refusal says more than OpenSSL's "certificate verify failed".
        if let rejection = verify.takeUnretainedValue().rejection { return rejection }
        let detail = text.isEmpty ? "" : ": \(text)"
        for entry in entries where entry.library == ERR_LIB_SSL {
            let reason = entry.reason
            if reason > SSL_AD_REASON_OFFSET {
                let alert = reason - SSL_AD_REASON_OFFSET
                let name = alertName(alert)
                if alert == TLS1_AD_PROTOCOL_VERSION {
                    return TLSError(.protocolVersion, "the peer refused the protocol version (alert \(name))\(detail)")
                }
                return TLSError(.peerAlert(name), "the peer sent a fatal alert: \(name)\(detail)")
            }
            switch reason {
            case SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE:
                return TLSError(.peerCertificateMissing, "the peer presented no certificate\(detail)")
            case SSL_R_UNSUPPORTED_PROTOCOL, SSL_R_WRONG_VERSION_NUMBER, SSL_R_NO_PROTOCOLS_AVAILABLE,
                 SSL_R_UNSUPPORTED_SSL_VERSION, SSL_R_VERSION_TOO_LOW, SSL_R_VERSION_TOO_HIGH:
                return TLSError(.protocolVersion, "the peer does not speak TLS 1.3\(detail)")
            case SSL_R_PROTOCOL_IS_SHUTDOWN:
                return TLSError(.closed, "the connection is shut down\(detail)")
            default:
                continue
            }
        }
        if duringHandshake { return TLSError(.handshakeFailed, "the TLS handshake failed\(detail)") }
        return TLSError(.io, "TLS failed (SSL_get_error \(code))\(detail)")
    }

    // MARK: Confinement check

    private func enter() {
        let (claimed, _) = busy.compareExchange(expected: false, desired: true, ordering: .acquiring)
        precondition(claimed, "a TLSConnection was used from two threads at once; confine it to one serial queue")
    }

    private func leave() { busy.store(false, ordering: .releasing) }
}
