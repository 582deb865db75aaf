#if canImport(Glibc)
import Glibc
#endif

/// Socket pairs and descriptors passed over Unix sockets (`SCM_RIGHTS`): how the
/// daemon hands a client a data stream next to its JSON-RPC connection.
public enum DescriptorPassing {
    /// A connected pair of `SOCK_SEQPACKET` Unix sockets (close-on-exec): each `send` on one
    /// end is one `recv` on the other, whole and in order.
    public static func packetPair() throws -> (Int32, Int32) {
        var fds: [Int32] = [-1, -1]
        try syscall("socketpair") { socketpair(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &fds) }
        return (fds[0], fds[1])
    }

    /// A connected pair of `SOCK_STREAM` Unix sockets (close-on-exec): a byte stream each way,
    /// for a client that reads or writes a peer's byte stream with ordinary tools.
    public static func streamPair() throws -> (Int32, Int32) {
        var fds: [Int32] = [-1, -1]
        try syscall("socketpair") { socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &fds) }
        return (fds[0], fds[1])
    }

    /// A packet pair whose ends ask for send and receive buffers of `bufferBytes` each, for
    /// packets larger than the default buffers allow (about 208 KiB). The kernel caps the
    /// request at `net.core.wmem_max`/`rmem_max` (and doubles it for its bookkeeping);
    /// `largestPacket` says what was granted.
    public static func packetPair(bufferBytes: Int) throws -> (Int32, Int32) {
        let (a, b) = try packetPair()
        var size = Int32(clamping: bufferBytes)
        for fd in [a, b] {
            _ = setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, 4)
            _ = setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, 4)
        }
        return (a, b)
    }

    /// The largest packet `fd` (a Unix packet socket) can send: its send buffer less the
    /// 32 bytes Linux keeps back (`unix_dgram_sendmsg` refuses `len > sk_sndbuf - 32` with
    /// `EMSGSIZE`). Above 4 MiB a send can also fail with `ENOBUFS` (the kernel cannot build
    /// so large a packet), so the answer is capped there.
    public static func largestPacket(_ fd: Int32) -> Int {
        var size: Int32 = 0
        var length = socklen_t(4)
        guard getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, &length) == 0 else { return 0 }
        return min(Int(size) - 32, 4 * 1_048_576 - 32)
    }

    // cmsghdr is { size_t len; int level; int type; } followed by data aligned to size_t.
    private static let headerSize = MemoryLayout<cmsghdr>.stride
    private static func align(_ n: Int) -> Int { (n + MemoryLayout<Int>.size - 1) & ~(MemoryLayout<Int>.size - 1) }
    private static func space(fds: Int) -> Int { align(headerSize) + align(fds * 4) }

    /// Sends `bytes` with `descriptors` attached (to the first byte), without `SIGPIPE`.
    /// Returns the bytes sent, or nil when the socket is full (`EAGAIN`). The descriptors are
    /// duplicated into the receiver; the caller still owns (and closes) its own.
    public static func send(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, passing descriptors: [Int32]) throws -> Int? {
        precondition(!bytes.isEmpty && !descriptors.isEmpty, "descriptors travel with at least one byte")
        let control = UnsafeMutableRawBufferPointer.allocate(byteCount: space(fds: descriptors.count), alignment: MemoryLayout<Int>.alignment)
        defer { control.deallocate() }
        control.initializeMemory(as: UInt8.self, repeating: 0)
        let h = control.baseAddress!.assumingMemoryBound(to: cmsghdr.self)
        h.pointee.cmsg_len = align(headerSize) + 4 * descriptors.count
        h.pointee.cmsg_level = SOL_SOCKET
        h.pointee.cmsg_type = Int32(SCM_RIGHTS)
        for (i, d) in descriptors.enumerated() {
            control.storeBytes(of: d, toByteOffset: align(headerSize) + 4 * i, as: Int32.self)
        }
        var iov = iovec(iov_base: UnsafeMutableRawPointer(mutating: bytes.baseAddress), iov_len: bytes.count)
        return try withUnsafeMutablePointer(to: &iov) { iovp in
            var msg = msghdr()
            msg.msg_iov = iovp
            msg.msg_iovlen = 1
            msg.msg_control = control.baseAddress
            msg.msg_controllen = control.count
            return try syscallAllowingAgain("sendmsg") { sendmsg(fd, &msg, Int32(MSG_NOSIGNAL)) }
        }
    }

    /// Reads up to `maxBytes` (blocking unless `fd` is non-blocking) with any descriptors
    /// that came along (close-on-exec; the caller owns them). Empty bytes: end of file; nil:
    /// nothing to read now (`EAGAIN`).
    public static func receive(_ fd: Int32, maxBytes: Int = 65_536) throws -> (bytes: [UInt8], descriptors: [Int32])? {
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: maxBytes, alignment: 8)
        defer { buffer.deallocate() }
        guard let (n, fds) = try receive(fd, into: buffer) else { return nil }
        return (Array(UnsafeRawBufferPointer(rebasing: buffer[0..<n])), fds)
    }

    /// The most descriptors one `receive` takes; the kernel closes any beyond them
    /// (`MSG_CTRUNC`), so a sender of too many cannot leave them open here.
    public static let maxReceived = 8

    /// Reads into `buffer` with any descriptors that came along (close-on-exec; the caller
    /// owns them): the count read (0: end of file), or nil when there is nothing to read now.
    /// `flags` are added to `MSG_CMSG_CLOEXEC` (`MSG_DONTWAIT` for a socket left blocking).
    public static func receive(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer, flags: Int32 = 0) throws -> (Int, [Int32])? {
        let control = UnsafeMutableRawBufferPointer.allocate(byteCount: space(fds: maxReceived), alignment: MemoryLayout<Int>.alignment)
        defer { control.deallocate() }
        var msg = msghdr()
        var iov = iovec(iov_base: buffer.baseAddress, iov_len: buffer.count)
        let n: Int? = try withUnsafeMutablePointer(to: &iov) { iovp in
            msg.msg_iov = iovp
            msg.msg_iovlen = 1
            msg.msg_control = control.baseAddress
            msg.msg_controllen = control.count
            do {
                return try syscallAllowingAgain("recvmsg") { recvmsg(fd, &msg, Int32(MSG_CMSG_CLOEXEC) | flags) }
            } catch let e as SystemError where e.code == ECONNRESET {
                return 0
            }
        }
        guard let n else { return nil }
        var fds: [Int32] = []
        // Walk the control messages (CMSG_FIRSTHDR / CMSG_NXTHDR).
        var offset = 0
        let total = Int(msg.msg_controllen)
        while offset + headerSize <= total {
            let h = control.baseAddress!.advanced(by: offset).assumingMemoryBound(to: cmsghdr.self)
            let len = Int(h.pointee.cmsg_len)
            guard len >= headerSize, offset + len <= total else { break }
            if h.pointee.cmsg_level == SOL_SOCKET, h.pointee.cmsg_type == Int32(SCM_RIGHTS) {
                let count = (len - align(headerSize)) / 4
                for i in 0..<count {
                    fds.append(control.load(fromByteOffset: offset + align(headerSize) + 4 * i, as: Int32.self))
                }
            }
            offset += align(len)
        }
        return (n, fds)
    }
}
