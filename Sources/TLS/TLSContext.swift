internal import COpenSSL

/// Which end of the handshake a connection is.
public enum TLSRole: Sendable, Equatable {
    /// Sends the ClientHello (the side that dialled).
    case client
    /// Answers it (the side that accepted); it requires a client certificate.
    case server
}

/// What the C verify callback needs from its connection, reached through the `SSL`'s ex_data.
///
/// Ownership: `TLSConnection.init` stores `Unmanaged.passRetained(box)` in the `SSL`'s ex_data
/// slot `SSLSetup.exDataIndex`, so the `SSL` holds one reference for as long as it may call the
/// callback; `TLSConnection.deinit` clears the slot and releases that reference. The callback
/// only borrows it (`takeUnretainedValue`). It runs synchronously inside `SSL_do_handshake`, on
/// the thread of the connection's caller, so the box is as confined as the connection.
final class VerifyBox {
    let pin: PinPolicy
    /// The fingerprint of the certificate the peer presented, once the callback has seen it.
    var presentedFingerprint: [UInt8]?
    /// Why the callback refused the peer (nil while it has not).
    var rejection: TLSError?

    init(pin: PinPolicy) { self.pin = pin }
}

/// Making the `SSL_CTX` every connection uses, and the verify callback.
enum SSLSetup {
    /// The ex_data slot holding a connection's `VerifyBox` (-1 if OpenSSL had none to give).
    /// Allocated once per process (a Swift global is initialised once, thread-safely).
    static let exDataIndex: Int32 = withOpenSSL { peerlink_ssl_ex_new_index($0) }

    /// The TLS 1.3 cipher suites offered and accepted, most preferred first (OpenSSL's
    /// default puts AES-256-GCM first). AES-128-GCM first: 10 rounds a block, not 14 (`openssl
    /// speed`, 16 KiB blocks, on the development host: 1.2 to 1.45 times AES-256-GCM's rate),
    /// and bulk transfers spend a pass over every byte in it on each side; 128-bit keys are
    /// what TLS 1.3 requires every implementation to support (RFC 8446 §9.1). The others stay
    /// for peers that prefer them (both ends here are ours, but `openssl s_client` and other
    /// clients may ask for them).
    static let cipherSuites = "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256"

    /// A context for `role`: TLS 1.3 only, the identity's certificate and key (a server must
    /// have one; a client without one sends an empty certificate and is refused), no session
    /// cache or tickets (every handshake verifies the peer's certificate), and the peer's
    /// certificate required and checked by `verifyCertificate` alone.
    static func makeContext(role: TLSRole, identity: TLSIdentity?) throws(TLSError) -> OpenSSLObject {
        guard exDataIndex >= 0 else { throw OpenSSLErrors.error(.library, "SSL_get_ex_new_index") }
        let context = try OpenSSLObject(openSSL.SSL_CTX_new(openSSL.TLS_method()), "SSL_CTX_new") { openSSL.SSL_CTX_free($0) }
        let ctx = context.pointer
        try check(withOpenSSL { peerlink_ctx_set_tls13_only($0, ctx) }, "setting TLS 1.3 as the only version")
        withOpenSSL { peerlink_ctx_disable_session_cache($0, ctx) }
        try check(openSSL.SSL_CTX_set_num_tickets(ctx, 0), "SSL_CTX_set_num_tickets")
        try check(openSSL.SSL_CTX_set_ciphersuites(ctx, cipherSuites), "SSL_CTX_set_ciphersuites")
        if let identity {
            // Each takes its own reference: the identity's objects stay shared and unmodified.
            try check(openSSL.SSL_CTX_use_certificate(ctx, identity.certificate.pointer), "SSL_CTX_use_certificate")
            try check(openSSL.SSL_CTX_use_PrivateKey(ctx, identity.key.pointer), "SSL_CTX_use_PrivateKey")
            try check(openSSL.SSL_CTX_check_private_key(ctx), "SSL_CTX_check_private_key")
        } else if role == .server {
            throw TLSError(.invalidState, "a TLS server needs an identity: clients require its certificate")
        }
        // A server asks for the client's certificate and fails the handshake without one
        // (TLS 1.3 alert "certificate required"); a client verifies the server's. Either way
        // the chain check is replaced by `verifyCertificate`, which accepts a self-signed
        // certificate and then asks the pin policy.
        let mode = role == .server ? SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT : SSL_VERIFY_PEER
        openSSL.SSL_CTX_set_verify(ctx, mode, nil)
        openSSL.SSL_CTX_set_cert_verify_callback(ctx, verifyCertificate, nil)
        return context
    }

    /// Replaces OpenSSL's whole chain verification (`SSL_CTX_set_cert_verify_callback`): called
    /// once per handshake with the peer's certificates, it returns 1 to go on, 0 to fail.
    ///
    /// A certificate authority would reject our self-signed certificates ("self-signed
    /// certificate"), and none vouches for a peer anyway: trust comes from the pin. So: a
    /// certificate must have been presented, its fingerprint (SHA-256 of the DER) is computed
    /// and handed to the connection's `PinPolicy`, and its answer decides. The handshake itself
    /// proves the peer holds the certificate's private key (CertificateVerify), so pinning the
    /// certificate pins the key. A refusal is recorded in the `VerifyBox` for the connection to
    /// report, and OpenSSL sends the peer a "handshake failure" alert
    /// (`X509_V_ERR_APPLICATION_VERIFICATION`).
    private static let verifyCertificate: @convention(c) (OpaquePointer?, UnsafeMutableRawPointer?) -> Int32 = { store, _ in
        guard let store else { return 0 }
        guard let sslPointer = openSSL.X509_STORE_CTX_get_ex_data(store, openSSL.SSL_get_ex_data_X509_STORE_CTX_idx()),
              let boxPointer = openSSL.SSL_get_ex_data(OpaquePointer(sslPointer), SSLSetup.exDataIndex) else {
            // Not one of our connections' handshakes: refuse rather than guess.
            openSSL.X509_STORE_CTX_set_error(store, X509_V_ERR_APPLICATION_VERIFICATION)
            return 0
        }
        let box = Unmanaged<VerifyBox>.fromOpaque(boxPointer).takeUnretainedValue()
        func refuse(_ error: TLSError) -> Int32 {
            box.rejection = error
            openSSL.X509_STORE_CTX_set_error(store, X509_V_ERR_APPLICATION_VERIFICATION)
            return 0
        }
        guard let certificate = openSSL.X509_STORE_CTX_get0_cert(store) else {
            return refuse(TLSError(.peerCertificateMissing, "the peer presented no certificate"))
        }
        let fingerprint: [UInt8]
        do throws(TLSError) {
            fingerprint = try CertificateInfo.fingerprint(certificate)
        } catch {
            return refuse(error)
        }
        box.presentedFingerprint = fingerprint
        switch box.pin.check(fingerprint) {
        case .accept:
            openSSL.X509_STORE_CTX_set_error(store, X509_V_OK)
            return 1
        case .reject(let reason):
            return refuse(TLSError(.pinRejected(reason: reason), "certificate pin rejected: \(reason)"))
        }
    }
}
