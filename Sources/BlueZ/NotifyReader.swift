// Linux Dispatch has no Sendable annotations; its sources and queues are thread-safe.
@preconcurrency import Dispatch
import Synchronization
import SystemKit
#if canImport(Glibc)
import Glibc
#endif

/// The receiving end of a remote characteristic's `AcquireNotify` socket: each packet is one
/// notification, delivered in order on one serial queue. bluetoothd closes the socket when
/// the link goes or the subscription ends; that is reported once through `onClose`.
final class NotifyReader: Sendable {
    let fd: Int32
    let mtu: Int
    private let source: DispatchSourceRead
    private let closed = OnceFlag()

    /// Starts reading `fd` (which it owns from now on).
    init(fd: Int32, mtu: Int, label: String, onValues: @escaping @Sendable ([[UInt8]]) -> Void,
         onClose: @escaping @Sendable (String) -> Void) {
        self.fd = fd
        self.mtu = mtu
        let queue = DispatchQueue(label: "peerlink.notify-in.\(label)", target: .global(qos: .userInitiated))
        source = DispatchSource.makeReadSource(fileDescriptor: fd, queue: queue)
        let closed = self.closed
        let src = source
        // One buffer for the life of the reader: a packet is at most one ATT MTU (<= 517).
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 65_536, alignment: 8)
        source.setEventHandler {
            // Edge-triggered on Linux: read until the socket is empty. The packets of one
            // wakeup go out together (at most 64 at a time), in order.
            var batch: [[UInt8]] = []
            defer { if !batch.isEmpty { onValues(batch) } }
            while true {
                let n = recv(fd, buffer.baseAddress, buffer.count, Int32(MSG_DONTWAIT))
                if n > 0 {
                    batch.append(Array(UnsafeRawBufferPointer(rebasing: buffer[0..<n])))
                    if batch.count == 64 {
                        onValues(batch)
                        batch.removeAll(keepingCapacity: true)
                    }
                    continue
                }
                let e = errno
                if n < 0, e == EAGAIN || e == EINTR { return }
                let why = n == 0 ? "bluetoothd closed the notification socket" : SystemError(call: "recv", code: e).description
                // The source is cancelled only here, from its own handler once the socket has
                // ended: cancelling it from outside while bluetoothd hangs up at the same moment
                // crashed libdispatch's epoll backend ("source finalized twice").
                src.cancel()
                if !batch.isEmpty {
                    onValues(batch)
                    batch.removeAll()
                }
                if closed.set() { onClose(why) }
                return
            }
        }
        source.setCancelHandler {
            closeQuietly(fd)
            buffer.deallocate()
        }
        source.activate()
    }

    /// Stops reading and ends the socket (bluetoothd then unsubscribes); no `onClose`.
    /// `shutdown` makes the reader see the end, and the source is cancelled from its handler.
    func close() {
        if closed.set() { _ = shutdown(fd, Int32(SHUT_RDWR)) }
    }

    deinit { close() }
}

/// A flag set once, from any thread.
final class OnceFlag: Sendable {
    private let value = Mutex(false)
    /// Sets the flag; true only for the first caller.
    func set() -> Bool { value.withLock { v in defer { v = true }; return !v } }
}
