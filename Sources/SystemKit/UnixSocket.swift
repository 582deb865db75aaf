#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Unix-domain stream sockets: the control socket's server and client ends.
public enum UnixSocket {
    /// The longest path a `sockaddr_un` holds (107 bytes plus the terminator on Linux).
    public static let maxPathLength = 107

    private static func withAddress<R>(_ path: String, _ body: (UnsafePointer<sockaddr>, socklen_t) throws -> R) throws -> R {
        let bytes = Array(path.utf8)
        guard !bytes.isEmpty, bytes.count <= maxPathLength else {
            throw SystemError(call: "socket path", code: ENAMETOOLONG, context: path)
        }
        var addr = sockaddr_un()
        addr.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &addr.sun_path) { raw in
            raw.copyBytes(from: bytes)
            raw[bytes.count] = 0
        }
        return try withUnsafePointer(to: &addr) { p in
            try p.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                try body($0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
    }

    /// Opens a stream socket connected to `path` (blocking, close-on-exec).
    public static func connect(path: String) throws -> Int32 {
        let fd = try syscall("socket") { socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0) }
        do {
            try withAddress(path) { addr, len in
                _ = try syscall("connect", context: path) { Glibc.connect(fd, addr, len) }
            }
        } catch {
            closeQuietly(fd)
            throw error
        }
        return fd
    }

    /// Creates a listening, non-blocking socket at `path`.
    ///
    /// A stale socket file (nobody listening) is replaced; a live one is an `EADDRINUSE` error,
    /// so two daemons never share a socket. `mode` is applied with `chmod`; `group`, when
    /// given, with `chown`.
    public static func listen(path: String, mode: mode_t = 0o660, group: gid_t? = nil, backlog: Int32 = 128) throws -> Int32 {
        var st = stat()
        if lstat(path, &st) == 0 {
            guard (st.st_mode & S_IFMT) == S_IFSOCK else {
                throw SystemError(call: "bind", code: EEXIST, context: "\(path) exists and is not a socket")
            }
            if let probe = try? connect(path: path) {
                closeQuietly(probe)
                throw SystemError(call: "bind", code: EADDRINUSE, context: "\(path): another process is listening")
            }
            _ = unlink(path)
        }
        let fd = try syscall("socket") { socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0) }
        do {
            try withAddress(path) { addr, len in
                _ = try syscall("bind", context: path) { bind(fd, addr, len) }
            }
            try syscall("chmod", context: path) { chmod(path, mode) }
            if let group { try syscall("chown", context: path) { chown(path, uid_t.max, group) } }
            try syscall("listen", context: path) { Glibc.listen(fd, backlog) }
            try setNonBlocking(fd)
        } catch {
            closeQuietly(fd)
            throw error
        }
        return fd
    }

    /// Accepts one pending connection from a non-blocking listener; nil when none is pending.
    /// The new descriptor is non-blocking and close-on-exec.
    public static func accept(_ listener: Int32) throws -> Int32? {
        // accept4 is not exported by the Glibc module: accept, then set the flags.
        guard let fd = try syscallAllowingAgain("accept", { Glibc.accept(listener, nil, nil) }) else { return nil }
        do {
            try setCloseOnExec(fd)
            try setNonBlocking(fd)
        } catch {
            closeQuietly(fd)
            throw error
        }
        return fd
    }

    /// Looks up a group id by name (nil if there is no such group).
    public static func groupID(named name: String) -> gid_t? {
        guard let g = getgrnam(name) else { return nil }
        return g.pointee.gr_gid
    }

    /// Whether this process may give a file to group `gid` (`chown`): root, or a member of it
    /// (its own group or a supplementary one). Under a user namespace that does not map the
    /// group (systemd's PrivateUsers=), it is not one of these either.
    public static func mayGiveFiles(to gid: gid_t) -> Bool {
        if geteuid() == 0 || getegid() == gid { return true }
        let n = getgroups(0, nil)
        guard n > 0 else { return false }
        var groups = [gid_t](repeating: 0, count: Int(n))
        let got = getgroups(n, &groups)
        return got > 0 && groups.prefix(Int(got)).contains(gid)
    }
}
