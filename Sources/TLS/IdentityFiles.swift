import SystemKit
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The file operations of `TLSIdentity`: reading a whole small file, writing one atomically,
/// making the directory. Every failure is a `TLSError` of kind `.identityFile` naming the path.
enum IdentityFiles {
    /// Identity files are a few hundred bytes; anything far larger is not one of ours.
    static let maximumSize = 64 * 1024

    /// Runs a system call through SystemKit's `syscall` (EINTR retried) and turns its error
    /// into one naming `path`.
    @discardableResult
    static func call<T: FixedWidthInteger>(_ name: String, _ path: String, _ body: () -> T) throws(TLSError) -> T {
        do {
            return try syscall(name, context: path, body)
        } catch {
            throw TLSError(.identityFile(path: path), "\(path): \(error)")
        }
    }

    /// The contents of `path`, or nil when it does not exist. Any other failure (permission,
    /// a directory, an over-long file) is an error naming it.
    static func readIfPresent(_ path: String) throws(TLSError) -> [UInt8]? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        if fd < 0 {
            let code = errno
            if code == ENOENT { return nil }
            throw TLSError(.identityFile(path: path), "\(path): \(SystemError(call: "open", code: code, context: path))")
        }
        defer { closeQuietly(fd) }
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = try call("read", path) { buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) } }
            if n == 0 { return bytes }
            bytes += buffer[0..<n]
            if bytes.count > maximumSize {
                throw TLSError(.identityFile(path: path), "\(path): longer than \(maximumSize) bytes, not an identity file")
            }
        }
    }

    /// Replaces (or creates) `path` with `bytes` so that a crash at any moment leaves either
    /// the old file or the whole new one, never a part: the bytes go to a temporary file in the
    /// same directory (created with `mode`, so a key is never readable by others, not even
    /// briefly), are flushed with `fsync`, and the file is renamed over `path`; then the
    /// directory is flushed so the rename itself survives a power cut.
    static func writeAtomically(_ bytes: [UInt8], to path: String, mode: mode_t) throws(TLSError) {
        let directory = parent(of: path)
        let temporary = "\(path).tmp-\(getpid())-\(UInt32.random(in: 0 ... .max))"
        let fd = try call("open", temporary) { open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode) }
        var renamed = false
        defer { if !renamed { unlink(temporary) } }
        do {
            defer { closeQuietly(fd) }
            // The umask may have taken bits away from `mode`; say exactly what we mean.
            try call("fchmod", temporary) { fchmod(fd, mode) }
            do {
                try writeAll(fd, bytes)
            } catch {
                throw TLSError(.identityFile(path: temporary), "\(temporary): \(error)")
            }
            try call("fsync", temporary) { fsync(fd) }
        }
        try call("rename", path) { rename(temporary, path) }
        renamed = true
        try syncDirectory(directory)
    }

    /// Flushes a directory's entries (after a rename into it).
    static func syncDirectory(_ directory: String) throws(TLSError) {
        let fd = try call("open", directory) { open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC) }
        defer { closeQuietly(fd) }
        try call("fsync", directory) { fsync(fd) }
    }

    /// Makes `directory` (and missing parents) with mode 0700 if it does not exist; an existing
    /// path that is not a directory is an error.
    static func makeDirectory(_ directory: String) throws(TLSError) {
        var info = stat()
        if stat(directory, &info) == 0 {
            if (info.st_mode & S_IFMT) != S_IFDIR {
                throw TLSError(.identityFile(path: directory), "\(directory): exists and is not a directory")
            }
            return
        }
        let up = parent(of: directory)
        if up != directory && up != "." && up != "/" { try makeDirectory(up) }
        if mkdir(directory, 0o700) != 0 {
            let code = errno
            // Made meanwhile by someone else: fine.
            if code == EEXIST { return }
            throw TLSError(.identityFile(path: directory),
                           "\(directory): \(SystemError(call: "mkdir", code: code, context: directory))")
        }
    }

    /// The directory part of `path` ("." for a bare name).
    static func parent(of path: String) -> String {
        var trimmed = Substring(path)
        while trimmed.count > 1 && trimmed.hasSuffix("/") { trimmed.removeLast() }
        guard let slash = trimmed.lastIndex(of: "/") else { return "." }
        return slash == trimmed.startIndex ? "/" : String(trimmed[..<slash])
    }

    /// `directory` joined with `name`.
    static func join(_ directory: String, _ name: String) -> String {
        directory.hasSuffix("/") ? directory + name : directory + "/" + name
    }
}
