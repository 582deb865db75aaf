import Foundation
import TestSupport
import TLS
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// `TLSIdentity`: made once, loaded after; its files (modes, atomic writes, what `openssl`
/// makes of them); every damaged-file case is a named error and replaces nothing.
@Suite struct TLSIdentityTests {
    @Test func createThenReloadGivesTheSameIdentity() throws {
        let directory = try TemporaryDirectory("identity")
        let made = try TLSIdentity.loadOrCreate(directory: directory.path)
        #expect(made.fingerprint.count == 32)
        #expect(made.fingerprintHex.count == 64)
        #expect(made.directory == directory.path)
        let keyBefore = try Data(contentsOf: URL(fileURLWithPath: directory.file("identity.key")))
        let loaded = try TLSIdentity.loadOrCreate(directory: directory.path)
        #expect(loaded.fingerprint == made.fingerprint)
        #expect(loaded.certificateDER == made.certificateDER)
        // Loading rewrote nothing.
        #expect(try Data(contentsOf: URL(fileURLWithPath: directory.file("identity.key"))) == keyBefore)
        // Another directory, another identity.
        let other = try TemporaryDirectory("identity")
        #expect(try TLSIdentity.loadOrCreate(directory: other.path).fingerprint != made.fingerprint)
    }

    @Test func filesHaveTheirModesAndNoTemporaryFileIsLeft() throws {
        let directory = try TemporaryDirectory("identity")
        let nested = directory.file("state/peerlink")
        _ = try TLSIdentity.loadOrCreate(directory: nested)
        #expect(try mode(of: nested + "/identity.key") == 0o600)
        #expect(try mode(of: nested + "/identity.crt") == 0o644)
        #expect(try mode(of: nested) == 0o750, "the group reaches the inbox below it; the key is its owner's alone")
        let names = try FileManager.default.contentsOfDirectory(atPath: nested).sorted()
        #expect(names == ["identity.crt", "identity.key"])
        let key = try String(contentsOfFile: nested + "/identity.key", encoding: .utf8)
        #expect(key.hasPrefix("-----BEGIN PRIVATE KEY-----"))
        let certificate = try String(contentsOfFile: nested + "/identity.crt", encoding: .utf8)
        #expect(certificate.hasPrefix("-----BEGIN CERTIFICATE-----"))
    }

    /// `openssl x509` computes the same SHA-256 fingerprint, and reads the certificate as
    /// described: CN=peerlink, self-signed, ECDSA-SHA256 over P-256, about 20 years.
    @Test  // fails at its #require without openssl
    func opensslAgreesWithTheFingerprint() async throws {
        let openssl = try #require(opensslPath)
        let directory = try TemporaryDirectory("identity")
        let identity = try TLSIdentity.loadOrCreate(directory: directory.path)
        let certificate = directory.file("identity.crt")
        let printed = try await runTool(openssl, ["x509", "-in", certificate, "-noout", "-fingerprint", "-sha256"], timeout: 20)
        #expect(printed.status == 0, "\(printed)")
        // "sha256 Fingerprint=AB:CD:..." (the prefix's spelling varies between versions).
        let line = printed.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let value = try #require(line.split(separator: "=").last.map(String.init), "\(printed)")
        #expect(Fingerprint.parse(value) == identity.fingerprint, "\(line) vs \(identity.fingerprintHex)")

        let text = try await runTool(openssl, ["x509", "-in", certificate, "-noout", "-text"], timeout: 20)
        #expect(text.status == 0, "\(text)")
        #expect(text.stdout.contains("Subject: CN = peerlink"), "\(text.stdout)")
        #expect(text.stdout.contains("Issuer: CN = peerlink"))
        #expect(text.stdout.contains("ecdsa-with-SHA256"))
        #expect(text.stdout.contains("prime256v1") || text.stdout.contains("P-256"))
        #expect(text.stdout.contains("Version: 3"))
        let end = try await runTool(openssl, ["x509", "-in", certificate, "-noout", "-checkend", "\(19 * 365 * 24 * 3600)"],
                                    timeout: 20)
        #expect(end.status == 0, "valid for at least 19 more years: \(end)")

        let key = try await runTool(openssl, ["pkey", "-in", directory.file("identity.key"), "-noout", "-text"], timeout: 20)
        #expect(key.status == 0, "\(key)")
        #expect(key.stdout.contains("prime256v1") || key.stdout.contains("P-256"), "\(key.stdout)")
    }

    /// A key and certificate made by openssl itself (P-256, PKCS#8) load, with the
    /// fingerprint openssl prints; an RSA key is refused by name.
    @Test  // fails at its #require without openssl
    func filesMadeByOpenSSLLoad() async throws {
        let openssl = try #require(opensslPath)
        let directory = try TemporaryDirectory("identity")
        let made = try await runTool(openssl, ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                                               "-nodes", "-keyout", directory.file("identity.key"),
                                               "-out", directory.file("identity.crt"), "-subj", "/CN=made-by-openssl",
                                               "-days", "2"], timeout: 20)
        try #require(made.status == 0, "\(made)")
        let printed = try await runTool(openssl, ["x509", "-in", directory.file("identity.crt"), "-noout",
                                                  "-fingerprint", "-sha256"], timeout: 20)
        let value = try #require(printed.stdout.split(separator: "=").last.map(String.init), "\(printed)")
        let identity = try TLSIdentity.loadOrCreate(directory: directory.path)
        #expect(identity.fingerprint == Fingerprint.parse(value.trimmingCharacters(in: .whitespacesAndNewlines)))

        let rsa = try TemporaryDirectory("identity")
        let madeRSA = try await runTool(openssl, ["req", "-x509", "-newkey", "rsa:2048", "-nodes",
                                                  "-keyout", rsa.file("identity.key"), "-out", rsa.file("identity.crt"),
                                                  "-subj", "/CN=rsa", "-days", "2"], timeout: 30)
        try #require(madeRSA.status == 0, "\(madeRSA)")
        let error = try #require(throws: TLSError.self) { try TLSIdentity.loadOrCreate(directory: rsa.path) }
        #expect(error.kind == .identityFile(path: rsa.file("identity.key")), "\(error)")
    }

    @Test func aCorruptKeyIsANamedErrorAndIsNotReplaced() throws {
        let directory = try TemporaryDirectory("identity")
        _ = try TLSIdentity.loadOrCreate(directory: directory.path)
        let keyPath = directory.file("identity.key")
        let garbage = Data("-----BEGIN PRIVATE KEY-----\nnot base64 at all!\n-----END PRIVATE KEY-----\n".utf8)
        try garbage.write(to: URL(fileURLWithPath: keyPath))
        let error = try #require(throws: TLSError.self) { try TLSIdentity.loadOrCreate(directory: directory.path) }
        #expect(error.kind == .identityFile(path: keyPath))
        #expect(error.message.contains(keyPath), "\(error)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: keyPath)) == garbage)
    }

    @Test func aTruncatedCertificateIsANamedError() throws {
        let directory = try TemporaryDirectory("identity")
        _ = try TLSIdentity.loadOrCreate(directory: directory.path)
        let certificatePath = directory.file("identity.crt")
        let whole = try Data(contentsOf: URL(fileURLWithPath: certificatePath))
        try whole.prefix(whole.count / 2).write(to: URL(fileURLWithPath: certificatePath))
        let error = try #require(throws: TLSError.self) { try TLSIdentity.loadOrCreate(directory: directory.path) }
        #expect(error.kind == .identityFile(path: certificatePath), "\(error)")
        #expect(error.message.contains(certificatePath))
    }

    @Test func aKeyWithoutItsCertificateIsANamedError() throws {
        let directory = try TemporaryDirectory("identity")
        _ = try TLSIdentity.loadOrCreate(directory: directory.path)
        let keyBefore = try Data(contentsOf: URL(fileURLWithPath: directory.file("identity.key")))
        try FileManager.default.removeItem(atPath: directory.file("identity.crt"))
        let error = try #require(throws: TLSError.self) { try TLSIdentity.loadOrCreate(directory: directory.path) }
        #expect(error.kind == .identityFile(path: directory.file("identity.crt")), "\(error)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: directory.file("identity.key"))) == keyBefore)
        #expect(!FileManager.default.fileExists(atPath: directory.file("identity.crt")))
    }

    @Test func aCertificateOfAnotherKeyIsANamedError() throws {
        let first = try TemporaryDirectory("identity")
        let second = try TemporaryDirectory("identity")
        _ = try TLSIdentity.loadOrCreate(directory: first.path)
        _ = try TLSIdentity.loadOrCreate(directory: second.path)
        try FileManager.default.removeItem(atPath: first.file("identity.crt"))
        try FileManager.default.copyItem(atPath: second.file("identity.crt"), toPath: first.file("identity.crt"))
        let error = try #require(throws: TLSError.self) { try TLSIdentity.loadOrCreate(directory: first.path) }
        #expect(error.kind == .identityFile(path: first.file("identity.crt")), "\(error)")
        #expect(error.message.contains("identity.key"))
    }

    /// An unreadable key file (here a directory in its place, which even root cannot read as
    /// a file) is a named error.
    @Test func anUnreadableKeyIsANamedError() throws {
        let directory = try TemporaryDirectory("identity")
        try FileManager.default.createDirectory(atPath: directory.file("identity.key"), withIntermediateDirectories: false)
        let error = try #require(throws: TLSError.self) { try TLSIdentity.loadOrCreate(directory: directory.path) }
        #expect(error.kind == .identityFile(path: directory.file("identity.key")), "\(error)")
    }

    /// A certificate without a key is what an interrupted first run leaves (the key is written
    /// last): a new identity is made over it.
    @Test func aCertificateWithoutAKeyIsReplaced() throws {
        let directory = try TemporaryDirectory("identity")
        try Data("left over".utf8).write(to: URL(fileURLWithPath: directory.file("identity.crt")))
        let identity = try TLSIdentity.loadOrCreate(directory: directory.path)
        #expect(try TLSIdentity.loadOrCreate(directory: directory.path).fingerprint == identity.fingerprint)
    }

    @Test func aPathThatIsAFileIsNotADirectory() throws {
        let directory = try TemporaryDirectory("identity")
        try Data().write(to: URL(fileURLWithPath: directory.file("plain")))
        let error = try #require(throws: TLSError.self) { try TLSIdentity.loadOrCreate(directory: directory.file("plain")) }
        #expect(error.kind == .identityFile(path: directory.file("plain")))
    }

    @Test func ephemeralIdentitiesAreDistinctAndExportPEM() throws {
        let a = try TLSIdentity.ephemeral()
        let b = try TLSIdentity.ephemeral()
        #expect(a.fingerprint != b.fingerprint)
        #expect(a.directory == nil)
        #expect(try a.certificatePEM().hasPrefix("-----BEGIN CERTIFICATE-----"))
    }

    private func mode(of path: String) throws -> mode_t {
        var info = stat()
        guard stat(path, &info) == 0 else { throw TestSupportError("stat \(path) failed") }
        return info.st_mode & 0o7777
    }
}
