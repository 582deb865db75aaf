// Linux Dispatch has no Sendable annotations; its sources and queues are thread-safe.
@preconcurrency import Dispatch
import BLE
import Synchronization
import SystemKit
#if canImport(Glibc)
import Glibc
#endif

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

    private let fd: Int32
    private let waiter: ReadinessWaiter
    /// Stopped from outside, and let go by the reader, under one lock: `stop()` never
    /// touches the descriptor once the reader has let it go.
    private let life = HeldDescriptor()
    private let counts = CountsBox()

    final class CountsBox: Sendable {
        private let m = Mutex(Counts())
        func withLock<R>(_ body: (inout Counts) -> R) -> R { m.withLock { body(&$0) } }
    }

    /// Starts reading `fd` (our end of the pair; the stream owns and closes it).
    /// `isRegistered` says whether the characteristic still belongs to a registered application.
    public init(fd: Int32, characteristic c: LocalCharacteristic, device: BluetoothAddress?,
                isRegistered: @escaping @Sendable () -> Bool,
                onEnd: @escaping @Sendable (End, Counts) -> Void) {
        self.fd = fd
        let queue = DispatchQueue(label: "peerlink.notify-stream.\(fd)", target: .global(qos: .userInitiated))
        waiter = ReadinessWaiter(fd: fd, kind: .read, queue: queue)
        // The descriptor is closed once Dispatch is done with the source (its rule).
        waiter.onCancelled { closeQuietly(fd) }
        let waiter = self.waiter
        let counts = self.counts
        let life = self.life
        Task {
            let end = await Self.pump(fd: fd, c, device: device, waiter: waiter, counts: counts, stopped: life, isRegistered: isRegistered)
            life.release()
            _ = shutdown(fd, Int32(SHUT_RDWR))  // the client sees the end now
            waiter.cancel()
            onEnd(end, counts.withLock { $0 })
        }
    }

    /// Ends the stream (the client sees the end of its socket).
    public func stop() {
        // The reader wakes to the end of the socket and stops; only it cancels the waiter
        // (whose cancel handler closes the descriptor).
        life.close { _ = shutdown(fd, Int32(SHUT_RDWR)) }
    }

    /// Packets one wakeup hands to `notify(values:)` at most.
    static let batchLimit = 64

    private static func pump(fd: Int32, _ c: LocalCharacteristic, device: BluetoothAddress?, waiter: ReadinessWaiter,
                             counts: CountsBox, stopped: HeldDescriptor, isRegistered: @Sendable () -> Bool) async -> End {
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 65_536, alignment: 8)
        defer { buffer.deallocate() }
        while true {
            if stopped.isClosed { return .stopped }
            var batch: [[UInt8]] = []
            var ended = false
            while batch.count < batchLimit {
                // MSG_TRUNC: the packet's real length even when it is longer than the buffer.
                let n = recv(fd, buffer.baseAddress, buffer.count, Int32(MSG_DONTWAIT | MSG_TRUNC))
                if n > 0 {
                    if n > buffer.count {
                        batch.append([UInt8](repeating: 0, count: n))  // only its length matters: it is refused below
                    } else {
                        batch.append(Array(UnsafeRawBufferPointer(rebasing: buffer[0..<n])))
                    }
                    continue
                }
                let e = errno
                if n < 0 && (e == EAGAIN || e == EINTR) { break }
                if n < 0 && e != ECONNRESET && !stopped.isClosed { return .failed(SystemError(call: "recv", code: e).description) }
                ended = true  // 0: the client closed its end (a zero-length packet reads the same)
                break
            }
            if !batch.isEmpty {
                if !isRegistered() { return .unregistered }
                counts.withLock { $0.received += batch.count }
                if let end = await send(batch, c, device: device, counts: counts) { return end }
            }
            if stopped.isClosed { return .stopped }
            if ended { return .closed }
            if batch.isEmpty, !(await waiter.wait()) { return .stopped }
        }
    }

    /// Notifies one batch; an `End` when the stream must stop.
    private static func send(_ batch: [[UInt8]], _ c: LocalCharacteristic, device: BluetoothAddress?, counts: CountsBox) async -> End? {
        do throws(GattNotifyError) {
            try await c.notify(values: batch, device: device)
            counts.withLock { $0.sent += batch.count }
            return nil
        } catch {
            switch error {
            case .noSubscribers, .deviceNotSubscribed:
                // Nobody to send to: the values are not sent, the last is what a read returns.
                let max = c.definition.maxLength
                let fitting = batch.prefix { $0.count <= max }
                if let last = fitting.last { try? c.setValue(last) }
                counts.withLock { $0.unsent += fitting.count }
                if fitting.count < batch.count {
                    return .tooLong(GattNotifyError.tooLong(length: batch[fitting.count].count, limit: max, mtu: nil).description)
                }
                return nil
            case .interrupted(let sent, let of, _):
                // A subscriber left part way: the rest went to nobody.
                counts.withLock {
                    $0.sent += sent
                    $0.unsent += of - sent
                }
                return nil
            case .failed:
                counts.withLock { $0.unsent += batch.count }
                return nil
            case .tooLong:
                // Values before the long one still go out, in order.
                let fitting = batch.prefix { fits($0, c, device: device) }
                if !fitting.isEmpty, let end = await send(Array(fitting), c, device: device, counts: counts) { return end }
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
            if case .tooLong = error { return false }
        }
        return true
    }
}
