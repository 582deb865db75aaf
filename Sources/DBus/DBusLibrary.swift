internal import CDBus
import SystemKit

/// libdbus-1, loaded with `dlopen` the first time this module is used (CDBus's shim.h says
/// why: the `peerlink` CLI, the same binary, never uses D-Bus and should not pay for loading
/// libdbus-1 and libsystemd at every start).
///
/// `BusConnection.connect` calls `require()` first, so a missing or unusable libdbus-1-3 is a
/// `BusError` there, naming the library and what the loader said. Anything else in this
/// module (the name validators, the message codec) reaches the functions through `libdbus`,
/// which loads them on first use; a process that may run those before it connects (the
/// daemon parses its configuration first) calls `require()` at start.
public enum DBusLibrary {
    /// The outcome of the one load (a Swift global is initialised once, thread-safely).
    static let loaded: Result<peerlink_libdbus, BusError> =
        SharedLibrary.functions(peerlink_libdbus.self, soname: PEERLINK_LIBDBUS_SONAME, symbols: peerlink_libdbus_symbols())
            .mapError { BusError(name: BusError.failed, message: "cannot load libdbus-1 (libdbus-1-3): \($0.reason)") }

    /// Loads libdbus-1 if it is not loaded yet; throws if it cannot be (every later call
    /// fails the same way: the loader is not asked twice).
    public static func require() throws(BusError) {
        _ = try loaded.get()
    }
}

/// libdbus's functions, each under its own name: `libdbus.dbus_message_new(type)`.
let libdbus: peerlink_libdbus = {
    switch DBusLibrary.loaded {
    case .success(let functions): return functions
    case .failure(let error): fatalError("\(error) (call DBusLibrary.require() at start to report this cleanly)")
    }
}()

/// A table of C function pointers, filled once by the loader before any thread sees it and
/// never changed: safe to share.
extension peerlink_libdbus: @retroactive @unchecked Sendable {}
