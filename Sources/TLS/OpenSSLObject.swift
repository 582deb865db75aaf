internal import COpenSSL

/// One OpenSSL object (an `SSL_CTX`, `SSL`, `BIO`, `X509`, `EVP_PKEY`, `BIGNUM`...) and the
/// function that frees it, called exactly once, in `deinit`.
///
/// Every object this module allocates is held by one of these from the line that made it, so
/// an early `throw` cannot leak it. Not `Sendable`: whoever holds it decides its confinement
/// (`TLSIdentity` shares its key and certificate read-only; a `TLSConnection` keeps its own).
final class OpenSSLObject {
    /// The object; valid until this owner is freed.
    let pointer: OpaquePointer
    private let free: (OpaquePointer) -> Void

    /// Takes ownership of `pointer`; a nil `pointer` throws `kind` naming `what` with the
    /// error queue's text (nothing to free then).
    init(_ pointer: OpaquePointer?, _ what: @autoclosure () -> String, kind: TLSError.Kind = .library,
         free: @escaping (OpaquePointer) -> Void) throws(TLSError) {
        guard let pointer else { throw OpenSSLErrors.error(kind, what()) }
        self.pointer = pointer
        self.free = free
    }

    deinit { free(pointer) }
}

// MARK: Memory BIOs

/// Byte moves in and out of memory BIOs (`BIO_s_mem`), in chunks that fit OpenSSL's `Int32`
/// lengths.
enum MemoryBIO {
    private static let chunk = 1 << 30

    /// A new empty memory BIO whose reads say "retry" (not EOF) while it is empty.
    static func make() throws(TLSError) -> OpenSSLObject {
        try OpenSSLObject(withOpenSSL { peerlink_bio_new_mem($0) }, "BIO_new(BIO_s_mem())") { _ = openSSL.BIO_free($0) }
    }

    /// A read-only memory BIO over a copy of `bytes` (for parsing PEM).
    static func reading(_ bytes: [UInt8]) throws(TLSError) -> OpenSSLObject {
        let bio = try make()
        try append(bytes, to: bio.pointer)
        return bio
    }

    /// Appends all of `bytes` to a memory BIO (it grows; a failure is an allocation failure).
    static func append(_ bytes: [UInt8], to bio: OpaquePointer) throws(TLSError) {
        var offset = 0
        while offset < bytes.count {
            let n = min(chunk, bytes.count - offset)
            let written = bytes.withUnsafeBytes { buffer in
                openSSL.BIO_write(bio, buffer.baseAddress.map { $0 + offset }, Int32(n))
            }
            guard written == Int32(n) else { throw OpenSSLErrors.error(.io, "BIO_write of \(n) bytes") }
            offset += n
        }
    }

    /// Takes every byte a memory BIO holds, leaving it empty.
    static func takeAll(from bio: OpaquePointer) -> [UInt8] {
        var out: [UInt8] = []
        while true {
            let pending = Int(openSSL.BIO_ctrl_pending(bio))
            if pending == 0 { return out }
            let n = min(chunk, pending)
            var got: Int32 = 0
            let bytes = [UInt8](unsafeUninitializedCapacity: n) { buffer, count in
                got = openSSL.BIO_read(bio, buffer.baseAddress, Int32(n))
                count = max(0, Int(got))
            }
            // A memory BIO with bytes pending always gives them; stop rather than spin if not.
            if got <= 0 { return out }
            if out.isEmpty { out = bytes } else { out += bytes }
        }
    }
}

// MARK: Certificates

/// What this module reads from an `X509`: its DER encoding and the SHA-256 of that.
enum CertificateInfo {
    /// The DER encoding of `certificate`.
    static func der(_ certificate: OpaquePointer) throws(TLSError) -> [UInt8] {
        let length = openSSL.i2d_X509(certificate, nil)
        guard length > 0 else { throw OpenSSLErrors.error(.library, "i2d_X509 (length)") }
        var written: Int32 = 0
        let der = [UInt8](unsafeUninitializedCapacity: Int(length)) { buffer, count in
            var cursor = buffer.baseAddress
            written = openSSL.i2d_X509(certificate, &cursor)
            count = written == length ? Int(length) : 0
        }
        guard written == length else { throw OpenSSLErrors.error(.library, "i2d_X509") }
        return der
    }

    /// SHA-256 of `bytes` (32 bytes).
    static func sha256(_ bytes: [UInt8]) throws(TLSError) -> [UInt8] {
        try OpenSSLLibrary.require()
        var size: UInt32 = 0
        var ok: Int32 = 0
        let digest = [UInt8](unsafeUninitializedCapacity: Int(EVP_MAX_MD_SIZE)) { buffer, count in
            ok = bytes.withUnsafeBytes { input in
                openSSL.EVP_Digest(input.baseAddress, input.count, buffer.baseAddress, &size, openSSL.EVP_sha256(), nil)
            }
            count = ok == 1 ? Int(size) : 0
        }
        try check(ok, "EVP_Digest(SHA-256)")
        return digest
    }

    /// SHA-256 of the DER encoding of `certificate`: a peer's ID.
    static func fingerprint(_ certificate: OpaquePointer) throws(TLSError) -> [UInt8] {
        try sha256(der(certificate))
    }
}
