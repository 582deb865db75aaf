import Synchronization

/// Hands every event to any number of subscribers, each through its own ordered stream.
///
/// One stream per consumer, read by one loop, is what keeps a consumer's view in the order
/// the events happened: a consumer that started a task per event (as `Central`, `GattServer`
/// and `Advertiser` once did) could apply `adapterRemoved` before the `adapterAdded` that
/// preceded it, because those tasks race to the consumer's actor and interleave at its awaits.
///
/// Streams buffer without bound: the producer (the `BlueZClient` actor) must never wait for a
/// slow consumer, and the events (adapters and bluetoothd coming and going) are few.
final class EventFanOut<Event: Sendable>: Sendable {
    private struct State {
        var next: UInt64 = 0
        var subscribers: [UInt64: AsyncStream<Event>.Continuation] = [:]
        /// Set by `finish()`: later subscribers get a stream that is already over.
        var finished = false
    }

    private let state = Mutex(State())

    /// Creates a fan-out with no subscribers.
    init() {}

    /// A stream of every event yielded after this call returns, in the order yielded. The
    /// subscription is taken synchronously, so nothing yielded between this call and the
    /// first read of the stream is lost. It ends on `finish()`, or when the reading task is
    /// cancelled or the stream is dropped (which also unsubscribes it).
    func subscribe() -> AsyncStream<Event> {
        let (stream, continuation) = AsyncStream<Event>.makeStream()
        let id = state.withLock { s -> UInt64? in
            guard !s.finished else { return nil }
            defer { s.next += 1 }
            s.subscribers[s.next] = continuation
            return s.next
        }
        guard let id else {
            continuation.finish()
            return stream
        }
        // Installed after the lock is released: finish() calls onTermination synchronously.
        continuation.onTermination = { [weak self] _ in
            _ = self?.state.withLock { $0.subscribers.removeValue(forKey: id) }
        }
        return stream
    }

    /// Hands `event` to every subscriber. Callers yield from one serial context (an actor):
    /// the order of their calls is the order every subscriber sees.
    func yield(_ event: Event) {
        // Yielded outside the lock: a yield can run nothing of ours, but termination can.
        for c in state.withLock({ Array($0.subscribers.values) }) { c.yield(event) }
    }

    /// Ends every stream (after the events already yielded) and every later subscription.
    func finish() {
        let all = state.withLock { s -> [AsyncStream<Event>.Continuation] in
            s.finished = true
            defer { s.subscribers.removeAll() }
            return Array(s.subscribers.values)
        }
        for c in all { c.finish() }
    }

    /// How many streams are subscribed now (for tests and diagnostics).
    var subscriberCount: Int { state.withLock { $0.subscribers.count } }
}

extension BlueZClient {
    /// Hands every later event to `handle`, one at a time and in order, from one task: the
    /// next event is taken only when `handle` has returned, so a handler that awaits (a bus
    /// call, the consumer's actor) is never overtaken by a later event.
    ///
    /// The subscription is taken before this returns (nothing emitted after the call is
    /// missed). The task ends when it is cancelled (a consumer's `detach`) or when this client
    /// stops following BlueZ; an event already taken when it is cancelled is not handed on.
    public nonisolated func follow(_ handle: @escaping @Sendable (BlueZEvent) async -> Void) -> Task<Void, Never> {
        let stream = events()
        return Task {
            for await event in stream {
                if Task.isCancelled { return }
                await handle(event)
            }
        }
    }
}
