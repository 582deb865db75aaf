internal import CAvahi
// Linux Dispatch has no Sendable annotations; its timers and queues are thread-safe.
@preconcurrency import Dispatch
import SystemKit
#if canImport(Glibc)
import Glibc
#endif

/// Avahi's main-loop interface (`AvahiPoll`) served by `DescriptorWatch`es and Dispatch timers
/// on one serial queue: no thread of its own, no sleeping, no `avahi_simple_poll`.
///
/// Everything here runs on `queue`. The Swift methods (`addWatch`, `addTimeout`, ...) hold
/// the logic and are what the tests drive; the C table in `api` is a thin layer over them.
/// An `AvahiWatch*`/`AvahiTimeout*` handed to Avahi is a retained `Watch`/`Timeout`,
/// released by `watch_free`/`timeout_free`.
///
/// `@unchecked Sendable`: it owns the C `AvahiPoll` table, and all of its state is touched
/// only on `queue` (closures queued there capture it weakly and find watches by number).
final class DispatchPoll: @unchecked Sendable {
    /// The queue every callback runs on.
    let queue: DispatchQueue
    /// The table passed to `avahi_client_new`; valid until `close()`.
    private(set) var api: UnsafeMutablePointer<AvahiPoll>
    /// Live watches by number, for work queued on their behalf.
    private var watches: [Int: Watch] = [:]
    private var nextWatch = 1

    /// A descriptor Avahi wants to hear about.
    final class Watch {
        let fd: Int32
        fileprivate var number = 0
        /// POLLIN and/or POLLOUT.
        fileprivate(set) var events: Int16
        /// What happened, while the handler runs (`watch_get_events`); 0 otherwise.
        fileprivate(set) var firedEvents: Int16 = 0
        fileprivate(set) var freed = false
        fileprivate let handler: (Watch, Int16) -> Void
        fileprivate weak var poll: DispatchPoll?
        /// Readiness, on a duplicate: Avahi closes `fd` right after `watch_free`.
        fileprivate let descriptor: DescriptorWatch

        fileprivate init(fd: Int32, descriptor: DescriptorWatch, events: Int16, handler: @escaping (Watch, Int16) -> Void) {
            self.fd = fd
            self.descriptor = descriptor
            self.events = events
            self.handler = handler
        }
    }

    /// A point in time Avahi wants to be called at.
    final class Timeout {
        fileprivate let timer: DispatchSourceTimer
        fileprivate let handler: (Timeout) -> Void
        fileprivate(set) var armed = false
        fileprivate(set) var freed = false

        fileprivate init(timer: DispatchSourceTimer, handler: @escaping (Timeout) -> Void) {
            self.timer = timer
            self.handler = handler
        }
    }

    /// Creates the adapter; its C table's user data is this object (unretained: the owner
    /// keeps it alive until after `avahi_client_free`, then calls `close()`).
    init(queue: DispatchQueue) {
        self.queue = queue
        api = .allocate(capacity: 1)
        api.initialize(to: AvahiPoll())
        api.pointee.userdata = Unmanaged.passUnretained(self).toOpaque()
        api.pointee.watch_new = { api, fd, event, callback, userdata in
            let poll = Unmanaged<DispatchPoll>.fromOpaque(api!.pointee.userdata).takeUnretainedValue()
            guard let w = poll.addWatch(fd: fd, events: Int16(truncatingIfNeeded: event.rawValue), handler: { w, revents in
                callback?(DispatchPoll.pointer(w), w.fd, AvahiWatchEvent(rawValue: UInt32(UInt16(bitPattern: revents))), userdata)
            }) else { return nil }
            return DispatchPoll.pointer(Unmanaged.passRetained(w))  // released in watch_free
        }
        api.pointee.watch_update = { w, event in
            guard let w = DispatchPoll.watch(w) else { return }
            w.poll?.updateWatch(w, events: Int16(truncatingIfNeeded: event.rawValue))
        }
        api.pointee.watch_get_events = { w in
            AvahiWatchEvent(rawValue: UInt32(UInt16(bitPattern: DispatchPoll.watch(w)?.firedEvents ?? 0)))
        }
        api.pointee.watch_free = { w in
            guard let w else { return }
            let u = Unmanaged<Watch>.fromOpaque(UnsafeRawPointer(w))
            let watch = u.takeUnretainedValue()
            watch.poll?.freeWatch(watch)
            u.release()
        }
        api.pointee.timeout_new = { api, tv, callback, userdata in
            let poll = Unmanaged<DispatchPoll>.fromOpaque(api!.pointee.userdata).takeUnretainedValue()
            let t = poll.addTimeout(at: tv.map { DispatchPoll.deadline($0.pointee) }) { t in
                callback?(OpaquePointer(Unmanaged.passUnretained(t).toOpaque()), userdata)
            }
            return OpaquePointer(Unmanaged.passRetained(t).toOpaque())  // released in timeout_free
        }
        api.pointee.timeout_update = { t, tv in
            guard let t else { return }
            let timeout = Unmanaged<Timeout>.fromOpaque(UnsafeRawPointer(t)).takeUnretainedValue()
            DispatchPoll.updateTimeout(timeout, at: tv.map { DispatchPoll.deadline($0.pointee) })
        }
        api.pointee.timeout_free = { t in
            guard let t else { return }
            let u = Unmanaged<Timeout>.fromOpaque(UnsafeRawPointer(t))
            DispatchPoll.freeTimeout(u.takeUnretainedValue())
            u.release()
        }
    }

    /// Frees the C table and cancels any watch still open. On the queue, only after the client using the table was freed.
    func close() {
        for w in watches.values { freeWatch(w) }
        api.deinitialize(count: 1)
        api.deallocate()
    }

    private static func pointer(_ w: Watch) -> OpaquePointer { OpaquePointer(Unmanaged.passUnretained(w).toOpaque()) }
    private static func pointer(_ u: Unmanaged<Watch>) -> OpaquePointer { OpaquePointer(u.toOpaque()) }
    private static func watch(_ p: OpaquePointer?) -> Watch? {
        guard let p else { return nil }
        return Unmanaged<Watch>.fromOpaque(UnsafeRawPointer(p)).takeUnretainedValue()
    }

    /// An absolute `gettimeofday` time (Avahi's clock) as a Dispatch deadline.
    static func deadline(_ tv: timeval) -> DispatchTime {
        var now = timeval()
        gettimeofday(&now, nil)
        let micros = Int64(tv.tv_sec - now.tv_sec) * 1_000_000 + Int64(tv.tv_usec - now.tv_usec)
        return micros <= 0 ? .now() : .now() + .microseconds(Int(micros))
    }

    // MARK: Watches

    /// Starts watching `fd` for `events` (POLLIN/POLLOUT); `handler` gets what happened. Nil when
    /// `fd` cannot be duplicated for the watch (out of descriptors): Avahi then fails the call.
    func addWatch(fd: Int32, events: Int16, handler: @escaping (Watch, Int16) -> Void) -> Watch? {
        // Watched on a duplicate, closed once the watch is cancelled: Avahi closes `fd` itself
        // right after `watch_free`, and the number must not be reused while we still watch it.
        guard let d = try? DescriptorWatch(duplicating: fd, queue: queue) else { return nil }
        let w = Watch(fd: fd, descriptor: d, events: 0, handler: handler)
        w.poll = self
        w.number = nextWatch
        nextWatch += 1
        // The handlers find the watch by number (it is the queue's, not Sendable): a freed
        // watch is no longer in the table.
        d.setHandlers(onReadable: { [weak self, n = w.number] in
            if let self, let w = self.watches[n] { self.fire(w, Int16(POLLIN)) }
        }, onWritable: { [weak self, n = w.number] in
            if let self, let w = self.watches[n] { self.fire(w, Int16(POLLOUT)) }
        })
        watches[w.number] = w
        updateWatch(w, events: events)
        return w
    }

    /// Changes the events `w` waits for.
    func updateWatch(_ w: Watch, events: Int16) {
        guard !w.freed else { return }
        w.events = events
        w.descriptor.want(read: events & Int16(POLLIN) != 0, write: events & Int16(POLLOUT) != 0)
    }

    /// Stops watching; `w` is never called again.
    func freeWatch(_ w: Watch) {
        guard !w.freed else { return }
        w.freed = true
        watches[w.number] = nil
        w.descriptor.cancel()
    }

    /// The descriptor may be ready for `kind`: ask poll(2) what it really is, call the handler,
    /// then look again. Avahi (through libdbus) may take only part of the input in one call:
    /// while the watch still wants the descriptor and it is still ready, come back (after
    /// other queued work). libdispatch re-arms the source after the handler and would fire
    /// again too; looking here keeps the rest of a burst from waiting behind that round trip.
    private func fire(_ w: Watch, _ kind: Int16) {
        guard !w.freed else { return }
        let wanted = w.events & kind
        guard wanted != 0 else { return }
        var p = pollfd(fd: w.fd, events: wanted, revents: 0)
        guard poll(&p, 1, 0) == 1 else { return }
        let revents = p.revents & (wanted | Int16(POLLERR) | Int16(POLLHUP) | Int16(POLLNVAL))
        guard revents != 0 else { return }
        w.firedEvents = revents
        w.handler(w, revents)
        w.firedEvents = 0
        guard !w.freed, w.events & kind != 0 else { return }
        var again = pollfd(fd: w.fd, events: w.events & kind, revents: 0)
        // Only data still waiting brings us back; an error or hang-up alone is reported once.
        if poll(&again, 1, 0) == 1, again.revents & (w.events & kind) != 0 {
            later(w, kind)
        }
    }

    /// Runs `fire(w, kind)` after the work already queued.
    private func later(_ w: Watch, _ kind: Int16) {
        let n = w.number
        queue.async { [weak self] in
            guard let self, let w = self.watches[n] else { return }
            self.fire(w, kind)
        }
    }

    // MARK: Timeouts

    /// A timeout calling `handler` once at `deadline` (nil: disarmed until updated).
    func addTimeout(at deadline: DispatchTime?, handler: @escaping (Timeout) -> Void) -> Timeout {
        let timer = DispatchSource.makeTimerSource(queue: queue)
        let t = Timeout(timer: timer, handler: handler)
        timer.setEventHandler { [weak t] in
            guard let t, !t.freed, t.armed else { return }
            t.armed = false  // one shot: Avahi re-arms with timeout_update
            t.handler(t)
        }
        timer.schedule(deadline: .distantFuture, repeating: .never)
        timer.activate()
        Self.updateTimeout(t, at: deadline)
        return t
    }

    /// Re-arms (or with nil disarms) `t`.
    static func updateTimeout(_ t: Timeout, at deadline: DispatchTime?) {
        guard !t.freed else { return }
        t.armed = deadline != nil
        t.timer.schedule(deadline: deadline ?? .distantFuture, repeating: .never)
    }

    /// Stops `t` for good.
    static func freeTimeout(_ t: Timeout) {
        guard !t.freed else { return }
        t.freed = true
        t.armed = false
        t.timer.cancel()
    }
}
