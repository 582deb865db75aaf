import BLE
import Synchronization
import SystemKit

/// The notifications of one remote characteristic, shared by every subscription to it
/// (BlueZ gives one AcquireNotify socket per characteristic and client). Values are sent
/// to the subscribers straight from the socket's queue, without a hop through the actor.
final class NotifySource: Sendable {
    struct Subscriber: Sendable {
        let id: String
        let owner: UInt64
        var count: UInt64
        let batch: Bool
        /// A stream subscriber's socket (values as packets instead of events).
        let writer: Channel?

        /// Closes its stream; (values delivered, values its stream dropped).
        func finish() -> (UInt64, UInt64) {
            guard let w = writer else { return (count, 0) }
            w.close()
            let dropped = w.counts.refused
            return (count - dropped, dropped)
        }
    }
    let key: DeviceKey
    let uuid: BluetoothUUID
    private let onEvent: @Sendable (CentralEvent) -> Void
    private struct State {
        var subscribers: [Subscriber] = []
        var reader: NotifyReader?
        var mtu: Int?
    }
    private let state = Mutex(State())

    init(key: DeviceKey, uuid: BluetoothUUID, onEvent: @escaping @Sendable (CentralEvent) -> Void) {
        self.key = key
        self.uuid = uuid
        self.onEvent = onEvent
    }

    var acquired: Bool { state.withLock { $0.reader != nil } }
    var via: String { acquired ? "acquire-notify" : "start-notify" }
    var mtu: Int? {
        get { state.withLock { $0.mtu } }
        set { state.withLock { $0.mtu = newValue } }
    }
    var isEmpty: Bool { state.withLock { $0.subscribers.isEmpty } }

    func startReading(fd: Int32, mtu: Int, onClose: @escaping @Sendable (String) -> Void) {
        let reader = NotifyReader(fd: fd, mtu: mtu, label: "\(key.device)-\(uuid.uuidString)",
                                  onValues: { [weak self] v in self?.deliver(v) }, onClose: onClose)
        state.withLock {
            $0.reader = reader
            $0.mtu = mtu
        }
    }

    func add(_ id: String, owner: UInt64, batch: Bool, writer: Channel?) {
        state.withLock { $0.subscribers.append(Subscriber(id: id, owner: owner, count: 0, batch: batch, writer: writer)) }
    }

    /// Removes a subscriber (closing its stream); returns how many values it got and how
    /// many its stream dropped.
    func remove(_ id: String) -> (UInt64, UInt64) {
        let sub = state.withLock { s -> Subscriber? in
            guard let i = s.subscribers.firstIndex(where: { $0.id == id }) else { return nil }
            return s.subscribers.remove(at: i)
        }
        guard let sub else { return (0, 0) }
        return sub.finish()
    }

    /// Removes every subscriber; returns them with their counts.
    func drain() -> [(String, UInt64, UInt64, UInt64)] {
        let subs = state.withLock { s in
            defer { s.subscribers = [] }
            return s.subscribers
        }
        return subs.map { sub in
            let (count, dropped) = sub.finish()
            return (sub.id, sub.owner, count, dropped)
        }
    }

    /// Sends values (in order) to every subscriber, numbered per subscription.
    func deliver(_ values: [[UInt8]]) {
        let n = UInt64(values.count)
        let targets = state.withLock { s -> [(Subscriber, UInt64)] in
            for i in s.subscribers.indices { s.subscribers[i].count += n }
            return s.subscribers.map { ($0, $0.count - n + 1) }
        }
        for (sub, first) in targets {
            if let w = sub.writer {
                // Beyond its bound a slow client's values are dropped (and counted).
                for v in values { w.send(v) }
            } else {
                onEvent(.notifications(subscription: sub.id, owner: sub.owner, device: key.device, characteristic: uuid,
                                       values: values, firstSequence: first, batch: sub.batch))
            }
        }
    }

    /// Closes the socket (bluetoothd then stops the notifications).
    func stop() {
        let r = state.withLock { s -> NotifyReader? in defer { s.reader = nil }; return s.reader }
        r?.close()
    }
}

/// The result of a D-Bus call made with a completion, readable from predicates.
final class CallOutcome: Sendable {
    private let value = Mutex<Result<Void, Error>?>(nil)
    func set(_ r: Result<Void, Error>) { value.withLock { $0 = r } }
    var result: Result<Void, Error>? { value.withLock { $0 } }
    var isSet: Bool { result != nil }
}
