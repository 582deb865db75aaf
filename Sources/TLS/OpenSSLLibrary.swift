internal import COpenSSL
import SystemKit

/// OpenSSL, loaded with `dlopen` the first time this module is used (COpenSSL's shim.h says
/// why: the `peerlink` CLI, the same binary, never uses TLS and should not pay for loading
/// libssl and libcrypto at every start).
///
/// Every entry point that makes an OpenSSL object (`TLSIdentity.loadOrCreate` and
/// `ephemeral`, `TLSConnection.init`, `SHA256Digest`) calls `require()` first, so a missing or
/// unusable libssl3 is a `TLSError` there, naming the library and what the loader said; the
/// daemon loads its identity at start, so that is where it shows. Code that holds an object
/// made by one of those reaches the functions through `openSSL`, loaded by then.
public enum OpenSSLLibrary {
    /// The outcome of the one load (a Swift global is initialised once, thread-safely).
    static let loaded: Result<peerlink_openssl, TLSError> =
        SharedLibrary.functions(peerlink_openssl.self, soname: PEERLINK_OPENSSL_SONAME, symbols: peerlink_openssl_symbols())
            .mapError { TLSError(.library, "cannot load OpenSSL 3 (libssl3): \($0.reason)") }

    /// Loads OpenSSL if it is not loaded yet; throws if it cannot be (every later call fails
    /// the same way: the loader is not asked twice).
    public static func require() throws(TLSError) {
        _ = try loaded.get()
    }
}

/// OpenSSL's functions, each under its own name: `openSSL.SSL_new(ctx)`. Only reached with an
/// object some `require()`d entry point made, so the load has succeeded by then.
let openSSL: peerlink_openssl = {
    switch OpenSSLLibrary.loaded {
    case .success(let functions): return functions
    case .failure(let error): fatalError("OpenSSL used before OpenSSLLibrary.require(): \(error)")
    }
}()

/// Calls one of shim.h's wrappers, which take the function table by pointer.
@inline(__always)
func withOpenSSL<R>(_ body: (UnsafePointer<peerlink_openssl>) -> R) -> R {
    withUnsafePointer(to: openSSL, body)
}

/// A table of C function pointers, filled once by the loader before any thread sees it and
/// never changed: safe to share.
extension peerlink_openssl: @retroactive @unchecked Sendable {}
