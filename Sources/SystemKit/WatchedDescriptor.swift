import Dispatch
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Dispatch sources on a descriptor that is closed only once every source on it has been
/// cancelled (Dispatch's rule). Two uses: a descriptor that a C library owns (libdbus's bus
/// socket, Avahi's sockets), watched through a private duplicate; and one the caller hands
/// over (`Channel`'s socket), closed itself.
///
/// Why a duplicate: libdispatch on Linux keeps one epoll registration per descriptor *number*,
/// and a cancelled source gives its registration up only when it is next invoked (on its own
/// queue, then on Dispatch's manager queue). A C library closes its descriptor as soon as it has
/// told us to stop watching, so a socket opened meanwhile on the same number joined the stale
/// registration, was never added to epoll, and nothing sent to it was ever read (a D-Bus reply
/// lost until the call's timeout). The duplicate's number stays taken until the cancel
/// handlers have run, so no new descriptor can meet a stale registration. Dispatch's own rule
/// is the same: close a descriptor only after its sources' cancellation handlers ran.
///
/// `@unchecked Sendable`: `sources` is written only before `closeWhenCancelled()` (by the one
/// owner that creates them) and never after; `fd` is immutable.
public final class WatchedDescriptor: @unchecked Sendable {
    /// The descriptor the sources watch: the duplicate, or the one handed over.
    public let fd: Int32
    private let cancelled = DispatchGroup()
    private var sealed = false

    /// Duplicates `fd` (close-on-exec) for sources; the original stays its owner's.
    public init(duplicating fd: Int32) throws {
        self.fd = try syscall("fcntl", context: "F_DUPFD_CLOEXEC") { fcntl(fd, F_DUPFD_CLOEXEC, 0) }
    }

    /// Takes `fd` over: it is closed by `closeWhenCancelled()`, not by the caller.
    public init(owning fd: Int32) {
        self.fd = fd
    }

    /// A read source on the duplicate, on `queue`. Before `closeWhenCancelled()` only.
    public func makeReadSource(queue: DispatchQueue) -> DispatchSourceRead {
        let s = DispatchSource.makeReadSource(fileDescriptor: fd, queue: queue)
        track(s)
        return s
    }

    /// A write source on the duplicate, on `queue`. Before `closeWhenCancelled()` only.
    public func makeWriteSource(queue: DispatchQueue) -> DispatchSourceWrite {
        let s = DispatchSource.makeWriteSource(fileDescriptor: fd, queue: queue)
        track(s)
        return s
    }

    private func track(_ s: DispatchSourceProtocol) {
        precondition(!sealed, "WatchedDescriptor: a source made after closeWhenCancelled()")
        cancelled.enter()
        s.setCancelHandler { [cancelled] in cancelled.leave() }
    }

    /// Closes the descriptor once every source made so far is cancelled (at once if none
    /// was), then runs `closed` on `queue`. Call once, after making the sources.
    public func closeWhenCancelled(on queue: DispatchQueue = .global(), then closed: (@Sendable () -> Void)? = nil) {
        precondition(!sealed, "WatchedDescriptor: closeWhenCancelled() called twice")
        sealed = true
        cancelled.notify(queue: queue) { [fd] in
            closeQuietly(fd)
            closed?()
        }
    }
}
