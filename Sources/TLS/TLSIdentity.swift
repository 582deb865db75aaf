internal import COpenSSL
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// This device's identity: an ECDSA P-256 key pair and a self-signed X.509 certificate for it.
/// The SHA-256 of the certificate's DER encoding (`fingerprint`) is the peer ID others pin.
///
/// Stored in a directory as two PEM files, `identity.key` (mode 0600) and `identity.crt`
/// (mode 0644), made on first use by `loadOrCreate(directory:)` and never replaced after:
/// a new key would be a new peer ID, and every peer that pinned the old one would refuse us.
///
/// `@unchecked Sendable`: the key and certificate are never modified after `init`, and
/// OpenSSL lets any number of threads use an unmodified `EVP_PKEY` and `X509` at once (each
/// `SSL_CTX` that uses them takes its own reference, atomically), so one identity can serve
/// every connection on every queue.
public final class TLSIdentity: @unchecked Sendable {
    /// The private key's file name inside the identity directory.
    public static let keyFileName = "identity.key"
    /// The certificate's file name inside the identity directory.
    public static let certificateFileName = "identity.crt"
    /// The certificate's subject (and issuer) common name.
    public static let commonName = "peerlink"
    /// How long a new certificate is valid: 20 years. Peers pin the fingerprint and never
    /// check the dates, so the certificate must simply outlive the device.
    public static let validitySeconds = 20 * 365 * 24 * 3600 + 5 * 24 * 3600

    /// The certificate, DER-encoded.
    public let certificateDER: [UInt8]
    /// SHA-256 of `certificateDER` (32 bytes): this device's peer ID.
    public let fingerprint: [UInt8]
    /// The directory the identity was loaded from or created in; nil for `ephemeral()`.
    public let directory: String?

    let key: OpenSSLObject
    let certificate: OpenSSLObject

    private init(key: OpenSSLObject, certificate: OpenSSLObject, directory: String?) throws(TLSError) {
        self.key = key
        self.certificate = certificate
        self.directory = directory
        certificateDER = try CertificateInfo.der(certificate.pointer)
        fingerprint = try CertificateInfo.sha256(certificateDER)
    }

    /// `fingerprint` in lower-case hex (64 characters).
    public var fingerprintHex: String { hex(fingerprint) }

    /// The certificate in PEM, as stored in `identity.crt`.
    public func certificatePEM() throws(TLSError) -> String {
        String(decoding: try Self.pem(certificate: certificate.pointer), as: UTF8.self)
    }

    // MARK: Loading and creating

    /// Loads the identity stored in `directory`, or makes one there if it has none.
    ///
    /// - A missing directory is created (mode 0700, with its parents).
    /// - No `identity.key`: a new identity is made and written, the certificate first and the
    ///   key last, each atomically, so a key on disk always has its certificate beside it.
    ///   A certificate found without a key is what an interrupted first run leaves (no peer
    ///   can have seen it: without its key it was never presented), and it is replaced.
    /// - `identity.key` without `identity.crt`, a file that cannot be read or parsed, a key
    ///   that is not EC, or a certificate that is not the key's: an error of kind
    ///   `.identityFile` naming the file. Nothing is replaced then: a new key would silently
    ///   change this device's peer ID.
    ///
    /// One process at a time per directory (each daemon has its own state directory): two
    /// processes making an identity at the same moment could each write a different one.
    public static func loadOrCreate(directory: String) throws(TLSError) -> TLSIdentity {
        try OpenSSLLibrary.require()
        try IdentityFiles.makeDirectory(directory)
        let keyPath = IdentityFiles.join(directory, keyFileName)
        let certificatePath = IdentityFiles.join(directory, certificateFileName)
        guard let keyPEM = try IdentityFiles.readIfPresent(keyPath) else {
            let identity = try generate(directory: directory)
            try IdentityFiles.writeAtomically(try pem(certificate: identity.certificate.pointer),
                                              to: certificatePath, mode: 0o644)
            try IdentityFiles.writeAtomically(try pem(key: identity.key.pointer), to: keyPath, mode: 0o600)
            return identity
        }
        guard let certificatePEM = try IdentityFiles.readIfPresent(certificatePath) else {
            throw TLSError(.identityFile(path: certificatePath),
                           "\(certificatePath): missing, but \(keyPath) exists; the peer ID is this certificate's "
                           + "fingerprint and cannot be made again: restore the file (or remove both files to "
                           + "start over as a new peer)")
        }
        let key = try parseKey(keyPEM, path: keyPath)
        let certificate = try parseCertificate(certificatePEM, path: certificatePath)
        OpenSSLErrors.clear()
        guard openSSL.X509_check_private_key(certificate.pointer, key.pointer) == 1 else {
            throw TLSError(.identityFile(path: certificatePath),
                           OpenSSLErrors.message("\(certificatePath): not the certificate of the key in \(keyPath)"))
        }
        return try TLSIdentity(key: key, certificate: certificate, directory: directory)
    }

    /// A new identity kept only in memory: for tests and one-off tools (a daemon's peer ID
    /// must survive restarts, so it uses `loadOrCreate(directory:)`).
    public static func ephemeral() throws(TLSError) -> TLSIdentity {
        try generate(directory: nil)
    }

    /// An ephemeral identity whose certificate is valid from `start` seconds from now for
    /// `duration` seconds: for tests of certificates that expired or are not yet valid.
    static func ephemeral(validFrom start: Int, for duration: Int) throws(TLSError) -> TLSIdentity {
        try generate(directory: nil, validFrom: start, for: duration)
    }

    // MARK: Making a key and certificate

    /// A new P-256 key and a self-signed certificate for it: X.509 v3, subject and issuer
    /// CN=peerlink, a random positive 16-byte serial (126 random bits), valid from now for
    /// `validitySeconds`, signed with ECDSA-SHA256.
    private static func generate(directory: String?, validFrom start: Int = 0,
                                 for duration: Int = validitySeconds) throws(TLSError) -> TLSIdentity {
        try OpenSSLLibrary.require()
        OpenSSLErrors.clear()
        let key = try OpenSSLObject(withOpenSSL { peerlink_generate_p256_key($0) }, "generating a P-256 key") { openSSL.EVP_PKEY_free($0) }
        let certificate = try OpenSSLObject(openSSL.X509_new(), "X509_new") { openSSL.X509_free($0) }
        let x509 = certificate.pointer
        try check(openSSL.X509_set_version(x509, 2), "X509_set_version")  // 2 means v3

        var serial = [UInt8](repeating: 0, count: 16)
        try check(openSSL.RAND_bytes(&serial, Int32(serial.count)), "RAND_bytes")
        serial[0] = (serial[0] & 0x7f) | 0x40  // positive, and always 16 bytes long
        let number = try OpenSSLObject(openSSL.BN_bin2bn(serial, Int32(serial.count), nil), "BN_bin2bn") { openSSL.BN_free($0) }
        _ = try check(openSSL.BN_to_ASN1_INTEGER(number.pointer, openSSL.X509_get_serialNumber(x509)), "BN_to_ASN1_INTEGER")

        _ = try check(openSSL.X509_gmtime_adj(openSSL.X509_getm_notBefore(x509), start), "X509_gmtime_adj(notBefore)")
        _ = try check(openSSL.X509_gmtime_adj(openSSL.X509_getm_notAfter(x509), start + duration), "X509_gmtime_adj(notAfter)")

        let name = try check(openSSL.X509_get_subject_name(x509), "X509_get_subject_name")
        let cn = Array(commonName.utf8)
        try check(openSSL.X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, cn, Int32(cn.count), -1, 0),
                  "X509_NAME_add_entry_by_txt(CN)")
        try check(openSSL.X509_set_issuer_name(x509, name), "X509_set_issuer_name")
        try check(openSSL.X509_set_pubkey(x509, key.pointer), "X509_set_pubkey")
        // X509_sign returns the signature's length, 0 on failure.
        guard openSSL.X509_sign(x509, key.pointer, openSSL.EVP_sha256()) > 0 else {
            throw OpenSSLErrors.error(.library, "X509_sign")
        }
        return try TLSIdentity(key: key, certificate: certificate, directory: directory)
    }

    // MARK: PEM

    /// The private key as unencrypted PKCS#8 PEM ("BEGIN PRIVATE KEY").
    static func pem(key: OpaquePointer) throws(TLSError) -> [UInt8] {
        let bio = try MemoryBIO.make()
        try check(openSSL.PEM_write_bio_PrivateKey(bio.pointer, key, nil, nil, 0, nil, nil), "PEM_write_bio_PrivateKey")
        return MemoryBIO.takeAll(from: bio.pointer)
    }

    /// The certificate as PEM ("BEGIN CERTIFICATE").
    static func pem(certificate: OpaquePointer) throws(TLSError) -> [UInt8] {
        let bio = try MemoryBIO.make()
        try check(openSSL.PEM_write_bio_X509(bio.pointer, certificate), "PEM_write_bio_X509")
        return MemoryBIO.takeAll(from: bio.pointer)
    }

    /// A password callback that has no password: an encrypted key fails to load instead of
    /// OpenSSL's default, which would prompt on the daemon's terminal.
    private static let noPassword: @convention(c) (UnsafeMutablePointer<CChar>?, Int32, Int32,
                                                   UnsafeMutableRawPointer?) -> Int32 = { _, _, _, _ in 0 }

    /// Parses a PEM private key read from `path`; it must be an EC key.
    static func parseKey(_ pem: [UInt8], path: String) throws(TLSError) -> OpenSSLObject {
        OpenSSLErrors.clear()
        let bio = try MemoryBIO.reading(pem)
        let key = try OpenSSLObject(openSSL.PEM_read_bio_PrivateKey(bio.pointer, nil, noPassword, nil),
                                    "\(path): reading a PEM private key", kind: .identityFile(path: path)) { openSSL.EVP_PKEY_free($0) }
        guard openSSL.EVP_PKEY_is_a(key.pointer, "EC") == 1 else {
            throw TLSError(.identityFile(path: path), "\(path): not an EC (P-256) private key")
        }
        return key
    }

    /// Parses a PEM certificate read from `path`.
    static func parseCertificate(_ pem: [UInt8], path: String) throws(TLSError) -> OpenSSLObject {
        OpenSSLErrors.clear()
        let bio = try MemoryBIO.reading(pem)
        return try OpenSSLObject(openSSL.PEM_read_bio_X509(bio.pointer, nil, noPassword, nil),
                                 "\(path): reading a PEM certificate", kind: .identityFile(path: path)) { openSSL.X509_free($0) }
    }
}
