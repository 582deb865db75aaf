internal import COpenSSL

/// SHA-256 over bytes that come in pieces (a resource as it is read or received), through
/// OpenSSL's EVP interface. One digest per resource; `finish` ends it.
public final class SHA256Digest: @unchecked Sendable {
    /// The EVP context (nil once finished).
    private var context: OpaquePointer?
    /// Bytes hashed so far.
    public private(set) var count: UInt64 = 0

    /// A fresh digest.
    public init() throws(TLSError) {
        try OpenSSLLibrary.require()
        guard let ctx = openSSL.EVP_MD_CTX_new() else { throw OpenSSLErrors.error(.library, "EVP_MD_CTX_new") }
        guard openSSL.EVP_DigestInit_ex(ctx, openSSL.EVP_sha256(), nil) == 1 else {
            openSSL.EVP_MD_CTX_free(ctx)
            throw OpenSSLErrors.error(.library, "EVP_DigestInit_ex(SHA-256)")
        }
        context = ctx
    }

    deinit { openSSL.EVP_MD_CTX_free(context) }

    /// Adds `bytes`.
    public func update(_ bytes: some Collection<UInt8>) throws(TLSError) {
        guard let context else { throw TLSError(.invalidState, "SHA-256 digest already finished") }
        let ok = bytes.withContiguousStorageIfAvailable { b in openSSL.EVP_DigestUpdate(context, b.baseAddress, b.count) }
            ?? Array(bytes).withUnsafeBytes { b in openSSL.EVP_DigestUpdate(context, b.baseAddress, b.count) }
        guard ok == 1 else { throw OpenSSLErrors.error(.library, "EVP_DigestUpdate") }
        count += UInt64(bytes.count)
    }

    /// The 32-byte digest of everything added; the digest cannot be used after.
    public func finish() throws(TLSError) -> [UInt8] {
        guard let ctx = context else { throw TLSError(.invalidState, "SHA-256 digest already finished") }
        defer {
            openSSL.EVP_MD_CTX_free(ctx)
            context = nil
        }
        var size: UInt32 = 0
        var ok: Int32 = 0
        let digest = [UInt8](unsafeUninitializedCapacity: Int(EVP_MAX_MD_SIZE)) { buffer, n in
            ok = openSSL.EVP_DigestFinal_ex(ctx, buffer.baseAddress, &size)
            n = ok == 1 ? Int(size) : 0
        }
        guard ok == 1 else { throw OpenSSLErrors.error(.library, "EVP_DigestFinal_ex") }
        return digest
    }

    /// The digest of `bytes` at once.
    public static func hash(_ bytes: [UInt8]) throws(TLSError) -> [UInt8] {
        try CertificateInfo.sha256(bytes)
    }
}
