#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Unix-domain datagram sockets: sending `sd_notify` messages, and the receiving end tests use.
///
/// Names follow systemd's `NOTIFY_SOCKET` convention: a name starting with `/` is a file-system
/// path; a name starting with `@` is in Linux's abstract namespace (the `@` stands for the
/// leading NUL byte, and the address length covers exactly the name, with no terminator).
public enum UnixDatagram {
    /// How long a send may block on a full receive queue before it fails with `EAGAIN`.
    public static let sendTimeout = Duration.seconds(2)

    /// Calls `body` with the `sockaddr_un` for `name` and its exact length.
    static func withAddress<R>(_ name: String, _ body: (UnsafePointer<sockaddr>, socklen_t) throws -> R) throws -> R {
        var bytes = Array(name.utf8)
        let abstract = bytes.first == UInt8(ascii: "@")
        if abstract { bytes[0] = 0 }
        var addr = sockaddr_un()
        let capacity = MemoryLayout.size(ofValue: addr.sun_path)
        guard abstract || bytes.first == UInt8(ascii: "/"), bytes.count > 1, !bytes.dropFirst().contains(0) else {
            throw SystemError(call: "datagram address", code: EINVAL, context: name)
        }
        // A path needs room for its terminating NUL; an abstract name does not.
        guard bytes.count <= (abstract ? capacity : capacity - 1) else {
            throw SystemError(call: "datagram address", code: ENAMETOOLONG, context: name)
        }
        addr.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &addr.sun_path) { raw in
            raw.copyBytes(from: bytes)
        }
        let offset = MemoryLayout<sockaddr_un>.offset(of: \.sun_path)!
        let length = offset + bytes.count + (abstract ? 0 : 1)
        return try withUnsafePointer(to: &addr) { p in
            try p.withMemoryRebound(to: sockaddr.self, capacity: 1) { try body($0, socklen_t(length)) }
        }
    }

    /// Sends one datagram holding `bytes` to the socket called `name`.
    ///
    /// A fresh close-on-exec socket is used per call (as `sd_notify` does); a receiver whose
    /// queue stays full makes the send fail after `sendTimeout` instead of blocking forever.
    public static func send(_ bytes: [UInt8], to name: String) throws {
        let fd = try syscall("socket") { socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0) }
        defer { closeQuietly(fd) }
        var timeout = timeval(tv_sec: Int(sendTimeout.components.seconds), tv_usec: 0)
        try syscall("setsockopt(SO_SNDTIMEO)") {
            setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        }
        try withAddress(name) { addr, length in
            let sent = try bytes.withUnsafeBytes { buf in
                try syscall("sendto", context: name) {
                    sendto(fd, buf.baseAddress, buf.count, Int32(MSG_NOSIGNAL), addr, length)
                }
            }
            if sent != bytes.count {
                throw SystemError(call: "sendto", code: EMSGSIZE, context: name)
            }
        }
    }

    /// Creates a datagram socket bound to `name` (close-on-exec, blocking), ready to receive.
    /// For a path name, an existing file there is an `EADDRINUSE` error.
    public static func bind(_ name: String) throws -> Int32 {
        let fd = try syscall("socket") { socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0) }
        do {
            try withAddress(name) { addr, length in
                _ = try syscall("bind", context: name) { Glibc.bind(fd, addr, length) }
            }
        } catch {
            closeQuietly(fd)
            throw error
        }
        return fd
    }

    /// Waits up to `timeout` for a datagram on `fd` and returns it (at most `maxBytes`), or nil
    /// if none arrived in time.
    public static func receive(_ fd: Int32, maxBytes: Int = 4096, timeout: Duration) throws -> [UInt8]? {
        var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        let ready = try syscall("poll") { poll(&pfd, 1, timeout.clampedMilliseconds) }
        if ready == 0 { return nil }
        var buffer = [UInt8](repeating: 0, count: maxBytes)
        let n = try buffer.withUnsafeMutableBytes { buf in
            try syscall("recv") { recv(fd, buf.baseAddress, buf.count, 0) }
        }
        return Array(buffer[..<n])
    }
}
