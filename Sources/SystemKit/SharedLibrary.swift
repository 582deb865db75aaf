#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A C library loaded at run time with `dlopen`, its functions read into a table.
///
/// Why at run time: the package ships one binary that is both the daemon and the `peerlink`
/// CLI, and the CLI uses none of OpenSSL, libdbus-1 or Avahi; linked, the dynamic loader
/// relocated all three (and what they pull in) at every CLI start. So the modules that own
/// those libraries (TLS, DBus, DNSSD) call them through a table their C shim declares: a struct
/// of non-null function pointers, each typed by the library's own declaration, and a list of
/// the same names in the same order. This is the one loader that fills such a table.
public enum SharedLibrary {
    /// Why a library or one of its functions could not be had: the dynamic loader's message,
    /// or the function the library lacks.
    public struct LoadFailure: Error, Sendable, Equatable {
        public let reason: String

        public init(reason: String) {
            self.reason = reason
        }
    }

    /// Loads `soname` (`RTLD_NOW`: every symbol the library needs is resolved here, not at
    /// some later call) and returns a `Table` whose fields hold, in order, the functions named
    /// in `symbols`: a C string list of names, each ended by a NUL, the list ended by an empty
    /// name (what the shims' `..._symbols()` functions return). Every function is looked up on
    /// the library's handle, which also finds those of the libraries it depends on. The
    /// library stays loaded for the life of the process.
    ///
    /// `Table` must consist of exactly one function pointer per name (the shims build both
    /// from one macro list); anything else is a programming error and stops the process.
    public static func functions<Table>(
        _ table: Table.Type,
        soname: String,
        symbols: UnsafePointer<CChar>
    ) -> Result<Table, LoadFailure> {
        let names = nameList(symbols)
        let slot = MemoryLayout<UnsafeRawPointer>.stride
        precondition(names.count * slot == MemoryLayout<Table>.size
                        && MemoryLayout<Table>.alignment == MemoryLayout<UnsafeRawPointer>.alignment,
                     "\(Table.self) is not a table of \(names.count) function pointers")
        guard let library = dlopen(soname, RTLD_NOW | RTLD_LOCAL) else {
            let message = dlerror().map { String(cString: $0) } ?? "cannot load \(soname)"
            return .failure(LoadFailure(reason: message))
        }
        let storage = UnsafeMutableRawPointer.allocate(byteCount: MemoryLayout<Table>.size,
                                                       alignment: MemoryLayout<Table>.alignment)
        defer { storage.deallocate() }
        for (index, name) in names.enumerated() {
            guard let function = dlsym(library, name) else {
                return .failure(LoadFailure(reason: "\(soname) has no function \(name)"))
            }
            storage.storeBytes(of: UnsafeRawPointer(function), toByteOffset: index * slot, as: UnsafeRawPointer.self)
        }
        return .success(storage.load(as: Table.self))
    }

    /// The names in a NUL-separated list ended by an empty name.
    static func nameList(_ symbols: UnsafePointer<CChar>) -> [String] {
        var names: [String] = []
        var cursor = symbols
        while cursor.pointee != 0 {
            let name = String(cString: cursor)
            names.append(name)
            cursor += name.utf8.count + 1
        }
        return names
    }
}
