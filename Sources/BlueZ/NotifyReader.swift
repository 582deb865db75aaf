import Foundation
import Synchronization
import SystemKit
#if canImport(Glibc)
import Glibc
#endif

/// The receiving end of a remote characteristic's `AcquireNotify` socket: each packet is one
/// notification, delivered in order from one thread of its own. bluetoothd closes the socket
/// when the link goes or the subscription ends; that is reported once through `onClose`.
///
/// A thread blocked in `poll` wakes once per burst, where a Dispatch source costs several
/// thread hand-offs per packet (expensive on a small board, and ruinous under emulation).
/// After the first packet of a burst it waits `coalesce` for more, so packets that arrive
/// close together are delivered together (at most 64 at a time): fewer wakeups and events
/// downstream for a fast stream, and at most that much added latency for a slow one.
final class NotifyReader: Sendable {
    let fd: Int32
    let mtu: Int
    /// Closed (by either side) and whether the thread still holds the descriptor, under one
    /// lock: `close()` never shuts down a descriptor the thread has already closed.
    private let life = HeldDescriptor()
    /// How long to gather a burst after its first packet.
    static let coalesce: Duration = .milliseconds(2)

    /// Starts reading `fd` (which it owns from now on).
    init(fd: Int32, mtu: Int, label: String, onValues: @escaping @Sendable ([[UInt8]]) -> Void,
         onClose: @escaping @Sendable (String) -> Void) {
        self.fd = fd
        self.mtu = mtu
        let life = self.life
        let thread = Thread {
            // One buffer for the life of the reader: a packet is at most one ATT MTU (<= 517).
            let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 65_536, alignment: 8)
            defer {
                buffer.deallocate()
                life.release { closeQuietly(fd) }
            }
            let gather = timespec(tv_sec: 0, tv_nsec: Int(NotifyReader.coalesce.components.attoseconds / 1_000_000_000))
            var batch: [[UInt8]] = []
            while true {
                var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                let r = poll(&p, 1, -1)
                if r < 0 && errno == EINTR { continue }
                if r > 0 && p.revents & Int16(POLLIN) != 0 && p.revents & Int16(POLLHUP) == 0 {
                    var t = gather, left = timespec()
                    while nanosleep(&t, &left) != 0 && errno == EINTR { t = left }
                }
                // Read until the socket is empty; the packets of one wakeup go out together.
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
                    if !batch.isEmpty {
                        onValues(batch)
                        batch.removeAll(keepingCapacity: true)
                    }
                    if n < 0, e == EAGAIN || e == EINTR { break }
                    let why = n == 0 ? "bluetoothd closed the notification socket" : SystemError(call: "recv", code: e).description
                    if life.close() { onClose(why) }
                    return
                }
            }
        }
        thread.name = "notify-in"
        thread.start()
    }

    /// Stops reading and ends the socket (bluetoothd then unsubscribes); no `onClose`.
    /// `shutdown` makes the reader thread see the end; it closes the descriptor.
    func close() {
        _ = life.close { _ = shutdown(fd, Int32(SHUT_RDWR)) }
    }

    deinit { close() }
}
