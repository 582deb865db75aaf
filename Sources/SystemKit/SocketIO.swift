#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Stream- and packet-socket I/O for clients such as the CLI: blocking with timeouts, or at
/// once (`sendNow`, `receiveNow`) for a client that polls several descriptors.
///
/// Writes use `send(MSG_NOSIGNAL)`, so a peer that has gone away is an `EPIPE` error
/// rather than a `SIGPIPE` that kills the process.
public enum SocketIO {
    /// Waits until `fd` is readable (data, end of file or an error is pending).
    ///
    /// `timeoutMilliseconds` < 0 waits forever. Returns false when the time ran out.
    public static func waitReadable(_ fd: Int32, timeoutMilliseconds: Int32) throws -> Bool {
        var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        let n = try syscall("poll") { poll(&pfd, 1, timeoutMilliseconds) }
        return n > 0
    }

    /// Reads what is available, up to `maxBytes`; an empty array means end of file.
    ///
    /// `ECONNRESET` is reported as end of file: for a stream client both mean the peer is gone.
    public static func receive(_ fd: Int32, maxBytes: Int = 65_536) throws -> [UInt8] {
        var buffer = [UInt8](repeating: 0, count: maxBytes)
        let n: Int
        do {
            n = try buffer.withUnsafeMutableBytes { raw in
                try syscall("read") { read(fd, raw.baseAddress!, raw.count) }
            }
        } catch let error as SystemError where error.code == ECONNRESET {
            return []
        }
        buffer.removeSubrange(n...)
        return buffer
    }

    /// Sends all of `bytes` on a blocking socket without raising `SIGPIPE`.
    public static func sendAll(_ fd: Int32, _ bytes: [UInt8]) throws {
        try sendAll(fd, bytes, passing: [])
    }

    /// `sendAll`, with `descriptors` passed (SCM_RIGHTS) with the first byte; the caller
    /// still owns (and closes) its own.
    public static func sendAll(_ fd: Int32, _ bytes: [UInt8], passing descriptors: [Int32]) throws {
        var offset = 0
        if !descriptors.isEmpty, !bytes.isEmpty {
            // A blocking socket: sendmsg waits for room, and may take only part of the bytes.
            while true {
                if let n = try bytes.withUnsafeBytes({ try DescriptorPassing.send(fd, $0, passing: descriptors) }) {
                    offset = n
                    break
                }
                var pfd = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
                _ = try syscall("poll") { poll(&pfd, 1, -1) }
            }
        }
        while offset < bytes.count {
            let n = try bytes.withUnsafeBytes { raw in
                try syscall("send") { send(fd, raw.baseAddress! + offset, raw.count - offset, Int32(MSG_NOSIGNAL)) }
            }
            offset += n
        }
    }

    /// Sends `bytes` as one packet (`SOCK_SEQPACKET`: whole or not at all; empty is a packet
    /// too) on a blocking socket without raising `SIGPIPE`.
    public static func sendPacket(_ fd: Int32, _ bytes: [UInt8]) throws {
        try bytes.withUnsafeBytes { raw in
            _ = try syscall("send") { send(fd, raw.baseAddress, raw.count, Int32(MSG_NOSIGNAL)) }
        }
    }

    /// Sends what the socket takes of `bytes` now (`MSG_DONTWAIT`, no `SIGPIPE`): how many
    /// bytes went, or nil when it is full. A packet socket takes a packet whole or not at all.
    public static func sendNow(_ fd: Int32, _ bytes: ArraySlice<UInt8>) throws -> Int? {
        try bytes.withUnsafeBytes { raw in
            try syscallAllowingAgain("send") { send(fd, raw.baseAddress, raw.count, Int32(MSG_NOSIGNAL | MSG_DONTWAIT)) }
        }
    }

    /// Reads what waits now (`MSG_DONTWAIT`), up to `maxBytes` (one packet on a packet
    /// socket): nil when nothing does, empty at the end (`ECONNRESET` included).
    public static func receiveNow(_ fd: Int32, maxBytes: Int) throws -> [UInt8]? {
        var buffer = [UInt8](repeating: 0, count: maxBytes)
        let n: Int?
        do {
            n = try buffer.withUnsafeMutableBytes { raw in
                try syscallAllowingAgain("recv") { recv(fd, raw.baseAddress, raw.count, Int32(MSG_DONTWAIT)) }
            }
        } catch let error as SystemError where error.code == ECONNRESET {
            return []
        }
        guard let n else { return nil }
        buffer.removeSubrange(n...)
        return buffer
    }

    /// True when `error` means the peer closed the connection (`EPIPE`, `ECONNRESET`).
    public static func isDisconnect(_ error: SystemError) -> Bool {
        error.code == EPIPE || error.code == ECONNRESET
    }
}
