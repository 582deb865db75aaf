import Synchronization

/// Wakes async waiters without blocking a thread of the cooperative pool (tests run there
/// side by side: a blocked thread would starve the others' tasks). A handler calls `fire`;
/// a test awaits `wait(until:)`, which checks its condition at each fire.
public final class AsyncSignal: Sendable {
    private let state = Mutex<(generation: UInt64, waiters: [CheckedContinuation<Void, Never>])>((0, []))

    /// A signal.
    public init() {}

    /// Wakes every waiter (they check their condition again).
    public func fire() {
        let waiters = state.withLock { s -> [CheckedContinuation<Void, Never>] in
            s.generation += 1
            defer { s.waiters = [] }
            return s.waiters
        }
        for c in waiters { c.resume() }
    }

    private func next(after generation: UInt64) async {
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            let now = state.withLock { s -> Bool in
                if s.generation != generation { return true }
                s.waiters.append(c)
                return false
            }
            if now { c.resume() }
        }
    }

    /// Waits until `condition` holds (checked at each `fire`); false after `timeout`.
    public func wait(timeout: Duration = .seconds(5), until condition: () -> Bool) async -> Bool {
        let deadline = ContinuousClock.now + timeout
        let timer = Task { [self] in
            try? await Task.sleep(until: deadline)
            fire()
        }
        defer { timer.cancel() }
        while true {
            let g = state.withLock { $0.generation }
            if condition() { return true }
            if ContinuousClock.now >= deadline { return false }
            await next(after: g)
        }
    }
}
