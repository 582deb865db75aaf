import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Small state files (identities, trusted peers, names): read whole, written so that a crash
/// at any moment leaves the old file or the whole new one, never a part.
public enum AtomicFile {
    /// The contents of `path`, or nil when it does not exist. Any other failure (permission, a
    /// directory, a file longer than `maximumSize`) is an error naming it.
    public static func readIfPresent(_ path: String, maximumSize: Int) throws -> [UInt8]? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        if fd < 0 {
            let code = errno
            if code == ENOENT { return nil }
            throw SystemError(call: "open", code: code, context: path)
        }
        defer { closeQuietly(fd) }
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = try syscall("read", context: path) { buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) } }
            if n == 0 { return bytes }
            bytes += buffer[0..<n]
            if bytes.count > maximumSize {
                throw SystemError(call: "read", code: EFBIG, context: "\(path): longer than \(maximumSize) bytes")
            }
        }
    }

    /// Replaces (or creates) `path` with `bytes`: they go to a temporary file in the same
    /// directory (created with `mode`, so a key is never readable by others, not even
    /// briefly), are flushed with `fsync`, and the file is renamed over `path`; then the
    /// directory is flushed so the rename itself survives a power cut.
    public static func write(_ bytes: [UInt8], to path: String, mode: mode_t) throws {
        let suffix = ".tmp-\(getpid())-\(UInt32.random(in: 0 ... .max))"
        let temporary = path + suffix
        let name = lastComponent(of: path) + suffix
        // Marked as this process's own while it exists: `removeAbandonedTemporaries` keeps it.
        inFlight.withLock { _ = $0.insert(name) }
        defer { inFlight.withLock { _ = $0.remove(name) } }
        let fd = try syscall("open", context: temporary) { open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode) }
        var renamed = false
        defer { if !renamed { unlink(temporary) } }
        do {
            defer { closeQuietly(fd) }
            // The umask may have taken bits away from `mode`; say exactly what we mean.
            try syscall("fchmod", context: temporary) { fchmod(fd, mode) }
            try writeAll(fd, bytes)
            try syscall("fsync", context: temporary) { fsync(fd) }
        }
        beforeRenaming.withLock { $0 }?(temporary)
        try syscall("rename", context: path) { rename(temporary, path) }
        renamed = true
        try FileSystem.syncDirectory(parent(of: path))
    }

    /// Names of the temporaries this process's `write`s have open now.
    static let inFlight = Mutex<Set<String>>([])

    /// Tests only: called with a `write`'s temporary just before it is renamed.
    static let beforeRenaming = Mutex<(@Sendable (String) -> Void)?>(nil)

    /// Removes the temporary files `write` left in `directory` because their process died
    /// between making and renaming them (`kill -9`, a power cut): names
    /// `<file>.tmp-<pid>-<number>` that are not a `write` of this process under way, and
    /// - carry this process's pid (an earlier process had the same pid: a container's first
    ///   process, restarted), or
    /// - carry the pid of no running process, or
    /// - were last written before this boot (after a power cut their pid may be anyone's).
    /// Called where a directory of state files is opened, so such leftovers do not pile up.
    /// Returns how many it removed; a directory it cannot read removes none.
    @discardableResult
    public static func removeAbandonedTemporaries(in directory: String) -> Int {
        guard let names = try? FileSystem.names(in: directory) else { return 0 }
        let boot = bootTimeNanoseconds()
        var removed = 0
        for name in names {
            guard let pid = temporaryOwner(name), !inFlight.withLock({ $0.contains(name) }) else { continue }
            let path = join(directory, name)
            if pid != getpid() {
                // EPERM: the process runs under another user; only ESRCH says it is gone.
                let gone = kill(pid, 0) != 0 && errno == ESRCH
                // Opened for its time only when its process may still run.
                guard gone || (try? RegularFile.openForReading(path).status().modified).map({ $0 < boot }) == true else { continue }
            }
            if unlink(path) == 0 { removed += 1 }
        }
        return removed
    }

    /// When this boot began on the wall clock (nanoseconds since 1970): now less the time
    /// since boot (`CLOCK_BOOTTIME` counts suspended time too).
    static func bootTimeNanoseconds() -> Int64 {
        var wall = timespec(), up = timespec()
        clock_gettime(CLOCK_REALTIME, &wall)
        clock_gettime(CLOCK_BOOTTIME, &up)
        return (Int64(wall.tv_sec) - Int64(up.tv_sec)) * 1_000_000_000 + Int64(wall.tv_nsec) - Int64(up.tv_nsec)
    }

    /// What follows the last '/' of `path` (all of it when there is none).
    static func lastComponent(of path: String) -> String {
        guard let slash = path.utf8.lastIndex(of: UInt8(ascii: "/")) else { return path }
        return String(decoding: path.utf8[path.utf8.index(after: slash)...], as: UTF8.self)
    }

    /// The process id in a temporary file's name (`<file>.tmp-<pid>-<number>`), or nil when
    /// the name is not one `write` makes.
    static func temporaryOwner(_ name: String) -> pid_t? {
        let bytes = Array(name.utf8)
        let marker = Array(".tmp-".utf8)
        // The last marker, with a file name before it.
        guard bytes.count > marker.count,
              let at = (1...(bytes.count - marker.count)).reversed().first(where: { bytes[$0..<($0 + marker.count)].elementsEqual(marker) })
        else { return nil }
        let fields = bytes[(at + marker.count)...].split(separator: UInt8(ascii: "-"), omittingEmptySubsequences: false)
        guard fields.count == 2, fields.allSatisfy({ (1...10).contains($0.count) && $0.allSatisfy { (0x30...0x39).contains($0) } }),
              let pid = pid_t(String(decoding: fields[0], as: UTF8.self)), pid > 0 else { return nil }
        return pid
    }

    /// Makes `directory` (and missing parents) with `mode` if it does not exist; an existing
    /// path that is not a directory is an error.
    public static func makeDirectory(_ directory: String, mode: mode_t = 0o700) throws {
        var info = stat()
        if stat(directory, &info) == 0 {
            if (info.st_mode & S_IFMT) != S_IFDIR { throw SystemError(call: "mkdir", code: ENOTDIR, context: "\(directory) exists and is not a directory") }
            return
        }
        let up = parent(of: directory)
        if up != directory && up != "." && up != "/" { try makeDirectory(up, mode: mode) }
        if mkdir(directory, mode) != 0 {
            let code = errno
            if code == EEXIST { return }  // made meanwhile by someone else
            throw SystemError(call: "mkdir", code: code, context: directory)
        }
    }

    /// Gives `directory` mode `to` if it is this process's and has exactly mode `from` (what
    /// an earlier version made it with); anything else is left alone. Errors are ignored: the
    /// old mode only keeps others out.
    public static func widenOwnDirectory(_ directory: String, from: mode_t, to: mode_t) {
        var info = stat()
        guard stat(directory, &info) == 0, (info.st_mode & S_IFMT) == S_IFDIR, info.st_uid == geteuid(),
              info.st_mode & 0o7777 == from else { return }
        _ = chmod(directory, to)
    }

    /// The directory part of `path` ("." for a bare name).
    public static func parent(of path: String) -> String {
        var trimmed = Substring(path)
        while trimmed.count > 1 && trimmed.hasSuffix("/") { trimmed.removeLast() }
        guard let slash = trimmed.lastIndex(of: "/") else { return "." }
        return slash == trimmed.startIndex ? "/" : String(trimmed[..<slash])
    }

    /// `directory` joined with `name`.
    public static func join(_ directory: String, _ name: String) -> String {
        directory.hasSuffix("/") ? directory + name : directory + "/" + name
    }
}
