import BLE
import SystemKit

/// One notification socket handed to bluetoothd by `AcquireNotify`: each packet written is
/// one notification (or indication). The fast path: no D-Bus round trip per value.
///
/// bluetoothd closes its end when the central unsubscribes or disconnects; that is seen here
/// as the end of the socket and reported through `onClose`. BlueZ 5.80+ writes one byte per
/// confirmed indication, reported through `onConfirm`.
final class NotifySession: Sendable {
    let device: BluetoothAddress?
    let mtu: Int
    /// Values wait here while bluetoothd's socket is full: a full socket is the normal state
    /// when values come faster than bluetoothd takes them, so this is on the hot path.
    private let channel: Channel
    /// Packets that may wait for room before senders wait (or the quick path gives up).
    static let outboxLimit = 64

    /// Wraps our end of a socket pair; `onClose` runs once when bluetoothd closes its end.
    init(fd: Int32, device: BluetoothAddress?, mtu: Int, onConfirm: @escaping @Sendable () -> Void,
         onClose: @escaping @Sendable (NotifySession) -> Void) {
        self.device = device
        self.mtu = mtu
        channel = Channel(fd: fd, mode: .packet, label: "notify.\(fd)", outboxLimit: Self.outboxLimit, readLimit: 64)
        channel.start(onInput: { packets in
            for p in packets { for _ in 0..<p.count { onConfirm() } }
        }, onEnd: { [weak self] _ in
            guard let self else { return }
            self.close()
            onClose(self)
        })
    }

    deinit { close() }

    /// The longest value one packet carries (MTU minus the 3-byte ATT header).
    var limit: Int { max(mtu - 3, 20) }

    /// Whether the session is closed.
    var isClosed: Bool { channel.isClosed }

    /// Queues all of `values` at once, or none: `.full` when they must wait for room.
    func offer(_ values: [[UInt8]]) -> Channel.Offer { channel.send(contentsOf: values) }

    /// Sends one value, waiting (without blocking a thread) while the socket is full.
    func send(_ value: [UInt8]) async throws(GattNotifyError) {
        if !(await channel.write(value)) { throw .failed("the central's session is closed") }
    }

    /// Closes our end (bluetoothd sees the end of the session; the senders fail).
    func close() { channel.close() }
}
