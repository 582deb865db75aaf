import BLE
import Synchronization
import SystemKit

/// A stream of notifications fed through a packet socket: each packet a client writes to its
/// end is one value, notified in order to the characteristic's subscribers (or one device)
/// exactly as `notify(values:)` would, with no JSON or base64 per value. Back-pressure is the
/// socket's: while bluetoothd's notification socket is full the stream stops reading, so the
/// client's writes block (or return `EAGAIN`) instead of values being dropped.
///
/// With no subscriber (or the chosen device not subscribed) a value becomes the stored value
/// and is counted as `unsent`. A value longer than one notification carries ends the stream
/// (nothing after it is read); so do the client closing its end, `stop()` and the
/// application going away. `onEnd` runs once with the reason and the counts.
public final class NotifyStream: Sendable {
    /// Why a stream ended.
    public enum End: Sendable, Equatable {
        /// The client closed its end of the socket.
        case closed
        /// `stop()` (the client's control connection closed, or the daemon stops).
        case stopped
        /// A value did not fit in one notification: the message says how long and the limit.
        case tooLong(String)
        /// The characteristic's application was unregistered.
        case unregistered
        /// Reading the socket failed.
        case failed(String)

        /// A short name for events.
        public var name: String {
            switch self {
            case .closed: "closed"
            case .stopped: "stopped"
            case .tooLong: "too-long"
            case .unregistered: "unregistered"
            case .failed: "failed"
            }
        }

        /// A sentence for users.
        public var message: String {
            switch self {
            case .closed: "the client closed the stream"
            case .stopped: "the stream was stopped (its control connection closed)"
            case .tooLong(let why): why
            case .unregistered: "the characteristic's application was unregistered"
            case .failed(let why): why
            }
        }
    }

    /// Values read, notified, and stored without a subscriber to send them to; `dropped`: read
    /// but not sent because the stream ended on an error first (the too-long value and those
    /// read with it after it).
    public struct Counts: Sendable, Equatable {
        public var received = 0
        public var sent = 0
        public var unsent = 0
        public var dropped: Int { received - sent - unsent }
    }

    private let channel: Channel
    private let onEnd: @Sendable (End, Counts) -> Void
    private let state = Mutex(State())

    private struct State {
        var counts = Counts()
        /// A batch is being notified (reading is paused meanwhile).
        var busy = false
        /// How the stream ends once the batch in flight is done.
        var pendingEnd: End?
        var ended = false
    }

    /// Starts reading `fd` (our end of the pair; the stream owns and closes it).
    /// `isRegistered` says whether the characteristic still belongs to a registered application.
    public init(fd: Int32, characteristic c: LocalCharacteristic, device: BluetoothAddress?,
                isRegistered: @escaping @Sendable () -> Bool,
                onEnd: @escaping @Sendable (End, Counts) -> Void) {
        // Nothing is written to the client: an outbox of one is never used.
        channel = Channel(fd: fd, mode: .packet, label: "notify-stream.\(fd)", outboxLimit: 1, batchLimit: Self.batchLimit)
        self.onEnd = onEnd
        channel.start(onInput: { [weak self] batch in
            guard let self else { return }
            // Back-pressure: nothing more is read until this batch is notified.
            self.channel.pauseReading()
            self.state.withLock { $0.busy = true }
            Task {
                let end: End?
                if !isRegistered() {
                    // Read, and not sent: counted received (so dropped), as the end says.
                    self.state.withLock { $0.counts.received += batch.count }
                    end = .unregistered
                } else {
                    self.state.withLock { $0.counts.received += batch.count }
                    end = await Self.send(batch, c, device: device, stream: self)
                }
                let finish = self.state.withLock { s -> End? in
                    s.busy = false
                    return end ?? s.pendingEnd
                }
                if let finish { return self.finish(finish) }
                self.channel.resumeReading()
            }
        }, onEnd: { [weak self] end in
            guard let self else { return }
            let reason: End
            switch end {
            case .peerClosed: reason = .closed
            case .failed(let e): reason = .failed(e.description)
            }
            let now = self.state.withLock { s -> Bool in
                if s.busy { s.pendingEnd = reason }
                return !s.busy
            }
            if now { self.finish(reason) }
        })
        // `stop()` closes the channel, which reports nothing: the stream says so itself.
        channel.whenDescriptorClosed { [weak self] in self?.finish(.stopped) }
    }

    private func finish(_ end: End) {
        let counts = state.withLock { s -> Counts? in
            if s.ended { return nil }
            s.ended = true
            return s.counts
        }
        channel.close()  // the client sees the end now
        if let counts { onEnd(end, counts) }
    }

    /// Ends the stream (the client sees the end of its socket), with `end` as its reason.
    public func stop(_ end: End = .stopped) {
        let busy = state.withLock { s -> Bool in
            if s.busy && s.pendingEnd == nil { s.pendingEnd = end }
            return s.busy
        }
        // A batch in flight finishes first (its counts are part of the end).
        if !busy { finish(end) }
    }

    /// Packets one wakeup hands to `notify(values:)` at most.
    static let batchLimit = 64

    private func count(_ body: (inout Counts) -> Void) { state.withLock { body(&$0.counts) } }

    /// Notifies one batch; an `End` when the stream must stop.
    private static func send(_ batch: [[UInt8]], _ c: LocalCharacteristic, device: BluetoothAddress?, stream: NotifyStream) async -> End? {
        do throws(GattNotifyError) {
            try await c.notify(values: batch, device: device)
            stream.count { $0.sent += batch.count }
            return nil
        } catch {
            switch error {
            case .noSubscribers, .deviceNotSubscribed:
                // Nobody to send to: the values are not sent, the last is what a read returns.
                let max = c.definition.maxLength
                let fitting = batch.prefix { $0.count <= max }
                if let last = fitting.last { try? c.setValue(last) }
                stream.count { $0.unsent += fitting.count }
                if fitting.count < batch.count {
                    return .tooLong(GattNotifyError.overMaxLength(length: batch[fitting.count].count, maxLength: max).description)
                }
                return nil
            case .interrupted(let sent, let of, _):
                // A subscriber left part way: the rest went to nobody.
                stream.count {
                    $0.sent += sent
                    $0.unsent += of - sent
                }
                return nil
            case .failed:
                stream.count { $0.unsent += batch.count }
                return nil
            case .tooLong, .overMaxLength:
                // Values before the long one still go out, in order.
                let fitting = batch.prefix { fits($0, c, device: device) }
                if !fitting.isEmpty, let end = await send(Array(fitting), c, device: device, stream: stream) { return end }
                return .tooLong(error.description)
            case .unknownCharacteristic, .notNotifiable:
                return .failed(error.description)
            }
        }
    }

    /// Whether `v` fits in one notification to the targets.
    private static func fits(_ v: [UInt8], _ c: LocalCharacteristic, device: BluetoothAddress?) -> Bool {
        do throws(GattNotifyError) {
            try c.checkNotifyLength(v.count, device: device)
        } catch {
            switch error {
            case .tooLong, .overMaxLength: return false
            default: break
            }
        }
        return true
    }
}
