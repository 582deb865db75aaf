import SystemKit
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The file operations of `TLSIdentity`, through SystemKit's `AtomicFile` (the project's one
/// way to keep small state files): every failure is a `TLSError` of kind `.identityFile`
/// naming the path.
enum IdentityFiles {
    /// Identity files are a few hundred bytes; anything far larger is not one of ours.
    static let maximumSize = 64 * 1024

    /// The contents of `path`, or nil when it does not exist. Any other failure (permission,
    /// a directory, an over-long file) is an error naming it.
    static func readIfPresent(_ path: String) throws(TLSError) -> [UInt8]? {
        do {
            return try AtomicFile.readIfPresent(path, maximumSize: maximumSize)
        } catch let e as SystemError where e.code == EFBIG {
            throw TLSError(.identityFile(path: path), "\(path): longer than \(maximumSize) bytes, not an identity file")
        } catch {
            throw TLSError(.identityFile(path: path), "\(path): \(error)")
        }
    }

    /// Replaces (or creates) `path` with `bytes` so that a crash at any moment leaves either
    /// the old file or the whole new one (`AtomicFile.write`: a temporary file created with
    /// `mode`, so a key is never readable by others, fsync, rename, the directory flushed).
    static func writeAtomically(_ bytes: [UInt8], to path: String, mode: mode_t) throws(TLSError) {
        do {
            try AtomicFile.write(bytes, to: path, mode: mode)
        } catch {
            throw TLSError(.identityFile(path: path), "\(path): \(error)")
        }
    }

    /// Makes `directory` (and missing parents) with mode 0750 if it does not exist (the key is
    /// 0600 itself; the group reaches the inbox below it); an existing path that is not a
    /// directory is an error.
    static func makeDirectory(_ directory: String) throws(TLSError) {
        do {
            try AtomicFile.makeDirectory(directory, mode: 0o750)
        } catch let e as SystemError where e.code == ENOTDIR {
            throw TLSError(.identityFile(path: directory), "\(directory): exists and is not a directory")
        } catch {
            throw TLSError(.identityFile(path: directory), "\(directory): \(error)")
        }
    }

    /// The directory part of `path` ("." for a bare name).
    static func parent(of path: String) -> String { AtomicFile.parent(of: path) }

    /// `directory` joined with `name`.
    static func join(_ directory: String, _ name: String) -> String { AtomicFile.join(directory, name) }
}
