#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// An error from a system call: which call failed and the `errno` it set.
public struct SystemError: Error, CustomStringConvertible, Equatable, Sendable {
    /// The name of the call that failed, e.g. `connect`.
    public let call: String
    /// The `errno` value.
    public let code: Int32
    /// Extra context, e.g. the path involved.
    public let context: String?

    /// Creates an error for `call` with `errno` value `code`.
    public init(call: String, code: Int32, context: String? = nil) {
        self.call = call
        self.code = code
        self.context = context
    }

    /// The `strerror` text for `code`.
    public var reason: String { String(cString: strerror(code)) }

    /// "connect(/run/x.sock): No such file or directory (errno 2)".
    public var description: String {
        let where_ = context.map { "(\($0))" } ?? ""
        return "\(call)\(where_): \(reason) (errno \(code))"
    }
}

/// Runs a system call, retrying on `EINTR`; throws `SystemError` when it returns -1.
///
/// Every system call in the project goes through this helper (or `syscallAllowingAgain`).
@discardableResult
@inline(__always)
public func syscall<T: FixedWidthInteger>(_ name: String, context: String? = nil, _ body: () -> T) throws -> T {
    while true {
        let r = body()
        if r == -1 {
            let e = errno
            if e == EINTR { continue }
            throw SystemError(call: name, code: e, context: context)
        }
        return r
    }
}

/// Like `syscall`, but returns nil instead of throwing on `EAGAIN`/`EWOULDBLOCK`
/// (for non-blocking descriptors).
@inline(__always)
public func syscallAllowingAgain<T: FixedWidthInteger>(_ name: String, context: String? = nil, _ body: () -> T) throws -> T? {
    while true {
        let r = body()
        if r == -1 {
            let e = errno
            if e == EINTR { continue }
            if e == EAGAIN || e == EWOULDBLOCK { return nil }
            throw SystemError(call: name, code: e, context: context)
        }
        return r
    }
}

/// Sets or clears `O_NONBLOCK` on `fd`.
public func setNonBlocking(_ fd: Int32, _ on: Bool = true) throws {
    let flags = try syscall("fcntl") { fcntl(fd, F_GETFL) }
    let new = on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK)
    if new != flags { try syscall("fcntl") { fcntl(fd, F_SETFL, new) } }
}

/// Sets `FD_CLOEXEC` on `fd`.
public func setCloseOnExec(_ fd: Int32) throws {
    let flags = try syscall("fcntl") { fcntl(fd, F_GETFD) }
    try syscall("fcntl") { fcntl(fd, F_SETFD, flags | FD_CLOEXEC) }
}

/// Closes `fd`, ignoring errors (`close` must not be retried on EINTR on Linux).
public func closeQuietly(_ fd: Int32) {
    if fd >= 0 { _ = close(fd) }
}

/// Duplicates `fd` with `FD_CLOEXEC` set.
public func duplicate(_ fd: Int32) throws -> Int32 {
    try syscall("fcntl(F_DUPFD_CLOEXEC)") { fcntl(fd, F_DUPFD_CLOEXEC, 0) }
}

/// Writes all of `bytes` to a blocking `fd`.
public func writeAll(_ fd: Int32, _ bytes: [UInt8]) throws {
    var off = 0
    while off < bytes.count {
        let n = try bytes.withUnsafeBytes { buf in
            try syscall("write") { write(fd, buf.baseAddress! + off, buf.count - off) }
        }
        off += n
    }
}

/// The process's resident set size in bytes, read from `/proc/self/statm` (0 if unavailable).
public func residentSetSize() -> Int {
    guard let f = fopen("/proc/self/statm", "r") else { return 0 }
    defer { fclose(f) }
    var size = 0, resident = 0
    guard withUnsafeMutablePointer(to: &size, { s in
        withUnsafeMutablePointer(to: &resident) { r in
            withVaList([s, r]) { vfscanf(f, "%ld %ld", $0) }
        }
    }) == 2 else { return 0 }
    return resident * Int(sysconf(Int32(_SC_PAGESIZE)))
}

/// The number of open file descriptors of this process (entries in `/proc/self/fd`), or -1.
public func openFileDescriptorCount() -> Int {
    guard let d = opendir("/proc/self/fd") else { return -1 }
    defer { closedir(d) }
    var n = 0
    while readdir(d) != nil { n += 1 }
    return n - 3  // ".", ".." and the directory's own descriptor
}
