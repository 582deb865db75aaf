// Linux Dispatch has no Sendable annotations; its sources and queues are thread-safe.
@preconcurrency import Dispatch
import BLE
import Synchronization
import SystemKit
#if canImport(Glibc)
import Glibc
#endif

/// One notification socket handed to bluetoothd by `AcquireNotify`: each packet written is
/// one notification (or indication). The fast path: no D-Bus round trip per value.
///
/// bluetoothd closes its end when the central unsubscribes or disconnects; that is seen here
/// as the end of the socket and reported through `onClose`. BlueZ 5.80+ writes one byte per
/// confirmed indication, reported through `onConfirm`.
final class NotifySession: Sendable {
    let fd: Int32
    let device: BluetoothAddress?
    let mtu: Int
    private let queue: DispatchQueue
    private let readSource: DispatchSourceRead
    /// Wakes the senders waiting for room in the socket. Made once, running only while
    /// someone waits: a full socket is the normal state when values come faster than
    /// bluetoothd takes them, so this is on the hot path.
    private let writable: ReadinessWaiter
    private let closed = Mutex(false)

    /// Wraps our end of a socket pair; `onClose` runs once when bluetoothd closes its end.
    init(fd: Int32, device: BluetoothAddress?, mtu: Int, onConfirm: @escaping @Sendable () -> Void,
         onClose: @escaping @Sendable (NotifySession) -> Void) {
        self.fd = fd
        self.device = device
        self.mtu = mtu
        queue = DispatchQueue(label: "peerlink.notify.\(fd)", target: .global(qos: .userInitiated))
        readSource = DispatchSource.makeReadSource(fileDescriptor: fd, queue: queue)
        writable = ReadinessWaiter(fd: fd, kind: .write, queue: queue)
        readSource.setEventHandler { [weak self] in
            guard let self else { return }
            var buf = [UInt8](repeating: 0, count: 64)
            // Edge-triggered: read until empty.
            while true {
                let n = buf.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
                if n > 0 {
                    for _ in 0..<n { onConfirm() }
                    continue
                }
                if n == 0 || (errno != EAGAIN && errno != EINTR) {
                    self.close()
                    onClose(self)
                }
                return
            }
        }
        // The descriptor is closed once both sources are cancelled (Dispatch's rule).
        let sourcesDone = DispatchGroup()
        sourcesDone.enter()
        sourcesDone.enter()
        readSource.setCancelHandler { sourcesDone.leave() }
        writable.onCancelled { sourcesDone.leave() }
        sourcesDone.notify(queue: queue) { closeQuietly(fd) }
        readSource.activate()
    }

    deinit {
        // Dispatch does not allow releasing a source that is inactive or suspended.
        close()
    }

    /// The longest value one packet carries (MTU minus the 3-byte ATT header).
    var limit: Int { max(mtu - 3, 20) }

    /// Whether the session is closed.
    var isClosed: Bool { closed.withLock { $0 } }

    /// Sends one value, waiting (without blocking a thread) while the socket is full.
    func send(_ value: [UInt8]) async throws(GattNotifyError) {
        while true {
            if isClosed { throw .failed("the central's session is closed") }
            let n = value.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT | MSG_NOSIGNAL)) }
            if n == value.count { return }
            if n >= 0 { throw .failed("short write: \(n) of \(value.count) bytes") }
            let e = errno
            if e == EINTR { continue }
            guard e == EAGAIN || e == EWOULDBLOCK else {
                throw .failed(SystemError(call: "send", code: e).description)
            }
            _ = await writable.wait()
        }
    }

    /// Closes our end (bluetoothd sees the end of the session).
    func close() {
        let first = closed.withLock { c -> Bool in
            if c { return false }
            c = true
            return true
        }
        guard first else { return }
        readSource.cancel()
        // The senders see the session closed and fail.
        writable.cancel()
    }
}
