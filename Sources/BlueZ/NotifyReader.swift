import SystemKit

/// The receiving end of a remote characteristic's `AcquireNotify` socket: each packet is one
/// notification, delivered in order. bluetoothd closes the socket when the link goes or the
/// subscription ends; that is reported once through `onClose`.
///
/// After the first packet of a burst the channel waits `coalesce` for more, so packets that
/// arrive close together are delivered together (at most 64 at a time): fewer wakeups and
/// events downstream for a fast stream, and at most that much added latency for a slow one.
final class NotifyReader: Sendable {
    let mtu: Int
    private let channel: Channel
    /// How long to gather a burst after its first packet.
    static let coalesce: Duration = .milliseconds(2)

    /// Starts reading `fd` (which it owns from now on).
    init(fd: Int32, mtu: Int, label: String, onValues: @escaping @Sendable ([[UInt8]]) -> Void,
         onClose: @escaping @Sendable (String) -> Void) {
        self.mtu = mtu
        // Nothing is written: an outbox of one is never used.
        channel = Channel(fd: fd, mode: .packet, label: "notify-in.\(label)", outboxLimit: 1, batchLimit: 64, gather: Self.coalesce)
        let channel = self.channel
        channel.start(onInput: onValues, onEnd: { end in
            channel.close()
            switch end {
            case .peerClosed: onClose("bluetoothd closed the notification socket")
            case .failed(let e): onClose(e.description)
            }
        })
    }

    /// Stops reading and ends the socket (bluetoothd then unsubscribes); no `onClose`.
    func close() { channel.close() }

    deinit { close() }
}

extension Channel {
    /// A central's stream subscriber's socket: values go out as packets, never blocking the
    /// caller; beyond `maxQueued` waiting packets `send` answers `.full` and the caller drops
    /// (counted as `counts.refused`). The client closing its end (or an error) is reported
    /// once through `onEnd`, and closes the channel.
    public static func packetWriter(fd: Int32, label: String, maxQueued: Int = 4096,
                                    onEnd: @escaping @Sendable (String) -> Void) -> Channel {
        let c = Channel(fd: fd, mode: .packet, label: "packets.\(label)", outboxLimit: maxQueued, readLimit: 512)
        // The client sends nothing on this socket: data is discarded; the end is the signal.
        c.start(onInput: { _ in }, onEnd: { [weak c] end in
            c?.close()
            switch end {
            case .peerClosed: onEnd("the client closed its socket")
            case .failed(let e): onEnd(e.description)
            }
        })
        return c
    }
}
