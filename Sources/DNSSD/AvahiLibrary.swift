internal import CAvahi
import SystemKit

/// libavahi-client, loaded with `dlopen` the first time this module is used (CAvahi's shim.h
/// says why: the `peerlink` CLI, the same binary, never uses Avahi).
///
/// `DNSSDClient` asks `loaded` before it creates its Avahi client: if the library cannot be
/// loaded, DNS-SD is unavailable with the loader's reason (the rest of the daemon runs), and
/// nothing else in the module calls Avahi without a client.
enum AvahiLibrary {
    /// The outcome of the one load (a Swift global is initialised once, thread-safely): the
    /// functions, or why they cannot be had.
    static let loaded: Result<peerlink_libavahi, SharedLibrary.LoadFailure> =
        SharedLibrary.functions(peerlink_libavahi.self, soname: PEERLINK_LIBAVAHI_SONAME,
                                symbols: peerlink_libavahi_symbols())
            .mapError { .init(reason: "cannot load libavahi-client (libavahi-client3): \($0.reason)") }

    /// Nil when the library is loaded (or loads now); otherwise why it cannot be.
    static var unavailableReason: String? {
        if case .failure(let failure) = loaded { return failure.reason }
        return nil
    }
}

/// Avahi's functions, each under its own name: `libavahi.avahi_client_new(...)`. Only reached
/// once `AvahiLibrary.loaded` succeeded (`DNSSDClient.connect` checks it before anything else).
let libavahi: peerlink_libavahi = {
    switch AvahiLibrary.loaded {
    case .success(let functions): return functions
    case .failure(let failure): fatalError("Avahi used although it could not be loaded: \(failure.reason)")
    }
}()

/// A table of C function pointers, filled once by the loader before any thread sees it and
/// never changed: safe to share.
extension peerlink_libavahi: @retroactive @unchecked Sendable {}
