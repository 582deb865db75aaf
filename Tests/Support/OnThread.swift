import SystemKit

/// Runs blocking `body` (a socket read that waits, a child process run to its end) on a
/// thread of its own and awaits its result.
///
/// Not on Swift's cooperative pool (two threads on a two-core machine: one blocked body
/// stalls every test's tasks), and not on a Dispatch global queue either: on Linux those
/// run only a few blocks at once, so blocking bodies of tests running side by side wait in
/// line behind each other for seconds — long enough for a peer that answers nothing to be
/// judged dead by the node it talks to.
public func onThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await onOwnThread(body)
}

/// `onThread` for a body that cannot throw (a test machine out of threads is a failed test).
public func onThread<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> T {
    do { return try await onOwnThread(body) } catch { fatalError("onThread: \(error)") }
}
