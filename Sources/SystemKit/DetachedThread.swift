#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Runs `body` on a new thread of its own, detached (nobody joins it; it ends with `body`).
///
/// For blocking work that must not sit on the cooperative pool or on a Dispatch global
/// queue: on Linux those run only a few blocks at once, so a blocking call there holds up
/// unrelated work queued behind it (a name lookup that hangs, hashing a large file, waiting
/// for a child process). Throws when the system has no thread to give (`EAGAIN`).
public func detachThread(_ body: @escaping @Sendable () -> Void) throws {
    let box = Unmanaged.passRetained(ThreadBody(body)).toOpaque()
    var thread = pthread_t()
    let rc = pthread_create(&thread, nil, { argument in
        Unmanaged<ThreadBody>.fromOpaque(argument!).takeRetainedValue().body()
        return nil
    }, box)
    guard rc == 0 else {
        Unmanaged<ThreadBody>.fromOpaque(box).release()
        throw SystemError(call: "pthread_create", code: rc)
    }
    pthread_detach(thread)
}

/// Runs blocking `body` on a thread of its own (`detachThread`) and awaits its result.
public func onOwnThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        do { try detachThread { continuation.resume(with: Result { try body() }) } } catch { continuation.resume(throwing: error) }
    }
}

private final class ThreadBody {
    let body: @Sendable () -> Void
    init(_ body: @escaping @Sendable () -> Void) { self.body = body }
}
