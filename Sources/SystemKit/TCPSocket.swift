#if canImport(Glibc)
import Glibc
#endif

/// An IPv4 or IPv6 socket address (numeric), as the kernel takes it.
public struct SocketAddress: Sendable, Hashable, CustomStringConvertible {
    /// The address as text: `192.0.2.1` or `fe80::1%eth0`.
    public let host: String
    /// The port.
    public let port: UInt16
    /// `sockaddr_in` or `sockaddr_in6` bytes.
    let raw: [UInt8]

    /// `192.0.2.1:7000` or `[::1]:7000`; an IPv4-mapped address as IPv4 (what a person
    /// expects to read for a peer that came over IPv4 to a dual-stack listener).
    public var description: String {
        let h = unmappedHost
        return h.contains(":") ? "[\(h)]:\(port)" : "\(h):\(port)"
    }

    /// Whether this is an IPv6 address.
    public var isIPv6: Bool { raw.count == MemoryLayout<sockaddr_in6>.size }

    init?(_ sa: UnsafePointer<sockaddr>, _ length: socklen_t) {
        let family = Int32(sa.pointee.sa_family)
        guard family == AF_INET || family == AF_INET6 else { return nil }
        var text = [CChar](repeating: 0, count: Int(NI_MAXHOST))
        var service = [CChar](repeating: 0, count: Int(NI_MAXSERV))
        guard getnameinfo(sa, length, &text, socklen_t(text.count), &service, socklen_t(service.count),
                          NI_NUMERICHOST | NI_NUMERICSERV) == 0,
              let port = UInt16(String(decoding: service.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
        else { return nil }
        host = String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        self.port = port
        raw = Array(UnsafeRawBufferPointer(start: UnsafeRawPointer(sa), count: Int(length)))
    }

    func withPointer<R>(_ body: (UnsafePointer<sockaddr>, socklen_t) throws -> R) rethrows -> R {
        try raw.withUnsafeBytes { b in
            try body(b.baseAddress!.assumingMemoryBound(to: sockaddr.self), socklen_t(b.count))
        }
    }

    /// An IPv4-mapped IPv6 address (`::ffff:192.0.2.1`, what a dual-stack listener sees) as IPv4 text.
    public var unmappedHost: String { host.hasPrefix("::ffff:") && host.contains(".") ? String(host.dropFirst(7)) : host }
}

/// Where to connect: `HOST:PORT`, `[IPV6]:PORT`, as a user types it.
public struct HostPort: Sendable, Hashable, CustomStringConvertible {
    /// A name or a numeric address (brackets removed).
    public let host: String
    /// The port (1 to 65535).
    public let port: UInt16

    /// Parses `host:port`, `[v6]:port` (a bare IPv6 address needs the brackets, since its colons
    /// would be ambiguous). The error says what is wrong.
    public init(_ text: String) throws(SystemError) {
        func bad(_ why: String) -> SystemError { SystemError(call: "address", code: EINVAL, context: "'\(text)': \(why)") }
        var host: Substring, port: Substring
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]") else { throw bad("no ']' after the IPv6 address") }
            host = text[text.index(after: text.startIndex)..<close]
            let rest = text[text.index(after: close)...]
            guard rest.hasPrefix(":") else { throw bad("expected ':PORT' after ']'") }
            port = rest.dropFirst()
        } else {
            guard let colon = text.lastIndex(of: ":") else { throw bad("expected HOST:PORT") }
            host = text[..<colon]
            port = text[text.index(after: colon)...]
            if host.contains(":") { throw bad("an IPv6 address goes in brackets: [ADDRESS]:PORT") }
        }
        guard !host.isEmpty else { throw bad("the host is empty") }
        guard host.utf8.count <= 253, host.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7f }) else {
            throw bad("the host must be at most 253 printable ASCII characters")
        }
        guard let p = UInt16(port), p > 0 else { throw bad("the port must be a number from 1 to 65535") }
        self.host = String(host)
        self.port = p
    }

    /// `host:port`, or `[v6]:port`.
    public var description: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }
}

/// TCP sockets for peer sessions: a dual-stack listener, accepting, non-blocking connects.
public enum TCPSocket {
    /// Opens a non-blocking listener on `port` (0: one the kernel picks) on every address: IPv6
    /// with IPv4 mapped in (one socket for both), or IPv4 alone where IPv6 is off. `loopback`:
    /// `127.0.0.1` only (tests; IPv4's loopback is there even where IPv6 is off). Returns the
    /// descriptor and the port it listens on.
    ///
    /// The accept queue is as long as the kernel allows (it caps `backlog` at
    /// `net.core.somaxconn`, 4096 by default since Linux 5.4): a handshake completed while the
    /// queue is full is dropped, and after a SYN cookie the client then believes it is connected
    /// while the listener never sees it, so a burst of peers must fit the queue.
    public static func listen(port: UInt16, loopback: Bool = false, backlog: Int32 = 4096) throws -> (fd: Int32, port: UInt16) {
        if loopback { return try listen(family: AF_INET, port: port, loopback: true, backlog: backlog) }
        do {
            return try listen(family: AF_INET6, port: port, loopback: loopback, backlog: backlog)
        } catch let e as SystemError where e.code == EAFNOSUPPORT || e.code == EADDRNOTAVAIL {
            return try listen(family: AF_INET, port: port, loopback: loopback, backlog: backlog)
        }
    }

    private static func listen(family: Int32, port: UInt16, loopback: Bool, backlog: Int32) throws -> (fd: Int32, port: UInt16) {
        let fd = try syscall("socket") { socket(family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0) }
        do {
            var one: Int32 = 1, zero: Int32 = 0
            try syscall("setsockopt", context: "SO_REUSEADDR") { setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, 4) }
            if family == AF_INET6 {
                try syscall("setsockopt", context: "IPV6_V6ONLY") { setsockopt(fd, Int32(IPPROTO_IPV6), IPV6_V6ONLY, &zero, 4) }
                var a = sockaddr_in6()
                a.sin6_family = sa_family_t(AF_INET6)
                a.sin6_port = port.bigEndian
                if loopback { a.sin6_addr = in6addr_loopback }
                try withUnsafePointer(to: &a) { p in
                    try p.withMemoryRebound(to: sockaddr.self, capacity: 1) { sa in
                        _ = try syscall("bind", context: "[\(loopback ? "::1" : "::")]:\(port)") { bind(fd, sa, socklen_t(MemoryLayout<sockaddr_in6>.size)) }
                    }
                }
            } else {
                var a = sockaddr_in()
                a.sin_family = sa_family_t(AF_INET)
                a.sin_port = port.bigEndian
                a.sin_addr.s_addr = (loopback ? UInt32(0x7f00_0001) : 0).bigEndian
                try withUnsafePointer(to: &a) { p in
                    try p.withMemoryRebound(to: sockaddr.self, capacity: 1) { sa in
                        _ = try syscall("bind", context: "\(loopback ? "127.0.0.1" : "0.0.0.0"):\(port)") { bind(fd, sa, socklen_t(MemoryLayout<sockaddr_in>.size)) }
                    }
                }
            }
            try syscall("listen") { Glibc.listen(fd, backlog) }
            try setNonBlocking(fd)
            return (fd, try localAddress(fd).port)
        } catch {
            closeQuietly(fd)
            throw error
        }
    }

    /// Accepts one pending connection (non-blocking, close-on-exec, no Nagle delay) and says
    /// who it is from; nil when none is pending.
    public static func accept(_ listener: Int32) throws -> (fd: Int32, from: SocketAddress)? {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let accepted = try withUnsafeMutablePointer(to: &storage) { p in
            try p.withMemoryRebound(to: sockaddr.self, capacity: 1) { sa in
                try syscallAllowingAgain("accept") { Glibc.accept(listener, sa, &length) }
            }
        }
        guard let fd = accepted else { return nil }
        do {
            try setCloseOnExec(fd)
            try setNonBlocking(fd)
            setNoDelay(fd)
            let from = withUnsafePointer(to: &storage) { p in
                p.withMemoryRebound(to: sockaddr.self, capacity: 1) { SocketAddress($0, length) }
            }
            guard let from else { throw SystemError(call: "accept", code: EAFNOSUPPORT, context: "not an IP peer") }
            return (fd, from)
        } catch {
            closeQuietly(fd)
            throw error
        }
    }

    /// The addresses of `host` (a numeric address or a name, through getaddrinfo: this may
    /// block on a name server, so call it off the cooperative pool).
    public static func resolve(_ target: HostPort) throws -> [SocketAddress] {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_flags = AI_NUMERICSERV | AI_ADDRCONFIG
        var list: UnsafeMutablePointer<addrinfo>?
        let r = getaddrinfo(target.host, String(target.port), &hints, &list)
        guard r == 0, let list else {
            let why = r == 0 ? "no address" : String(cString: gai_strerror(r))
            throw SystemError(call: "getaddrinfo", code: EHOSTUNREACH, context: "\(target.host): \(why)")
        }
        defer { freeaddrinfo(list) }
        var out: [SocketAddress] = []
        var p: UnsafeMutablePointer<addrinfo>? = list
        while let a = p {
            if let sa = a.pointee.ai_addr, let addr = SocketAddress(sa, a.pointee.ai_addrlen), !out.contains(addr) { out.append(addr) }
            p = a.pointee.ai_next
        }
        return out
    }

    /// Starts a non-blocking connect to `address`: the descriptor is connecting (wait until it
    /// is writable, then ask `connectResult`) or already connected.
    public static func startConnect(to address: SocketAddress) throws -> Int32 {
        let family = address.isIPv6 ? AF_INET6 : AF_INET
        let fd = try syscall("socket") { socket(family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0) }
        do {
            try setNonBlocking(fd)
            setNoDelay(fd)
            let r = address.withPointer { sa, len in Glibc.connect(fd, sa, len) }
            if r == -1 && errno != EINPROGRESS && errno != EINTR {
                throw SystemError(call: "connect", code: errno, context: address.description)
            }
            return fd
        } catch {
            closeQuietly(fd)
            throw error
        }
    }

    /// The outcome of a connect started by `startConnect`, once the socket is writable.
    public static func connectResult(_ fd: Int32, to address: SocketAddress) throws {
        var err: Int32 = 0
        var len = socklen_t(4)
        try syscall("getsockopt", context: "SO_ERROR") { getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) }
        if err != 0 { throw SystemError(call: "connect", code: err, context: address.description) }
    }

    /// The local address of a socket.
    public static func localAddress(_ fd: Int32) throws -> SocketAddress {
        try socketAddress(fd, call: "getsockname") { getsockname(fd, $0, $1) }
    }

    /// The peer's address of a connected socket.
    public static func peerAddress(_ fd: Int32) throws -> SocketAddress {
        try socketAddress(fd, call: "getpeername") { getpeername(fd, $0, $1) }
    }

    private static func socketAddress(_ fd: Int32, call: String, _ body: (UnsafeMutablePointer<sockaddr>, UnsafeMutablePointer<socklen_t>) -> Int32) throws -> SocketAddress {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        return try withUnsafeMutablePointer(to: &storage) { p in
            try p.withMemoryRebound(to: sockaddr.self, capacity: 1) { sa in
                try syscall(call) { body(sa, &length) }
                guard let a = SocketAddress(sa, length) else { throw SystemError(call: call, code: EAFNOSUPPORT) }
                return a
            }
        }
    }

    /// Turns Nagle's delay off: frames are whole when written, and a small message must not
    /// wait for the previous one's acknowledgement.
    public static func setNoDelay(_ fd: Int32) {
        var one: Int32 = 1
        _ = setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, 4)
    }
}
