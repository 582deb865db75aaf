internal import CDBus
import Dispatch
import Synchronization
import SystemKit
#if canImport(Glibc)
import Glibc
#endif

/// One libdbus watch (a descriptor libdbus wants to read or write) as a `DescriptorWatch`.
///
/// `@unchecked Sendable`: touched only on the connection's queue. `removed` is set when
/// libdbus removes the watch; after that `watch` points to freed memory and is never used.
final class WatchBox: @unchecked Sendable {
    let watch: OpaquePointer
    /// DBUS_WATCH_READABLE and/or DBUS_WATCH_WRITABLE: what libdbus watches for.
    let flags: UInt32
    var descriptor: DescriptorWatch?
    var active = false
    var removed = false

    init(watch: OpaquePointer, flags: UInt32) {
        self.watch = watch
        self.flags = flags
    }

    func setActive(_ on: Bool) {
        guard on != active else { return }
        active = on
        descriptor?.want(read: on && flags & UInt32(DBUS_WATCH_READABLE.rawValue) != 0,
                         write: on && flags & UInt32(DBUS_WATCH_WRITABLE.rawValue) != 0)
    }

    func cancel() {
        descriptor?.cancel()
        descriptor = nil
    }
}

/// One libdbus timeout as a Dispatch timer. Touched only on the connection's queue.
final class TimeoutBox {
    let timeout: OpaquePointer
    let timer: DispatchSourceTimer
    var active = false

    init(timeout: OpaquePointer, timer: DispatchSourceTimer) {
        self.timeout = timeout
        self.timer = timer
    }

    func setActive(_ on: Bool) {
        if on {
            let ms = Int(libdbus.dbus_timeout_get_interval(timeout))
            timer.schedule(deadline: .now() + .milliseconds(ms), repeating: .milliseconds(max(ms, 1)))
        }
        guard on != active else { return }
        active = on
        if on { timer.resume() } else { timer.suspend() }
    }

    func cancel() {
        timer.cancel()
        if !active { timer.resume() }
    }
}

// The C callbacks get the connection as an unretained pointer: they only run inside libdbus
// calls made on the queue, and the connection clears them before it goes away.
private func owner(_ data: UnsafeMutableRawPointer?) -> BusConnection {
    Unmanaged<BusConnection>.fromOpaque(data!).takeUnretainedValue()
}

extension BusConnection {
    /// Installs the watch, timeout, dispatch-status and filter hooks. On the queue.
    func installHooks() {
        let me = Unmanaged.passUnretained(self).toOpaque()
        _ = libdbus.dbus_connection_set_watch_functions(conn, { w, d in owner(d).addWatch(w!) ? 1 : 0 },
                                                { w, d in owner(d).removeWatch(w!) },
                                                { w, d in owner(d).toggleWatch(w!) }, me, nil)
        _ = libdbus.dbus_connection_set_timeout_functions(conn, { t, d in owner(d).addTimeout(t!) ? 1 : 0 },
                                                  { t, _ in BusConnection.removeTimeout(t!) },
                                                  { t, _ in BusConnection.toggleTimeout(t!) }, me, nil)
        libdbus.dbus_connection_set_dispatch_status_function(conn, { _, status, d in
            if status == DBUS_DISPATCH_DATA_REMAINS {
                let c = owner(d)
                c.queue.async { [weak c] in c?.dispatchAll() }
            }
        }, me, nil)
        libdbus.dbus_connection_set_wakeup_main_function(conn, { d in
            let c = owner(d)
            c.queue.async { [weak c] in c?.dispatchAll() }
        }, me, nil)
        _ = libdbus.dbus_connection_add_filter(conn, { _, msg, d in owner(d).filter(msg!) }, me, nil)
        dispatchAll()
    }

    /// Dispatches every message libdbus has read. On the queue.
    func dispatchAll() {
        while libdbus.dbus_connection_get_dispatch_status(conn) == DBUS_DISPATCH_DATA_REMAINS {
            _ = libdbus.dbus_connection_dispatch(conn)
        }
    }

    // MARK: Watches

    func addWatch(_ w: OpaquePointer) -> Bool {
        let box = WatchBox(watch: w, flags: libdbus.dbus_watch_get_flags(w))
        // libdbus closes its socket right after removing the watch: the watch is on a
        // duplicate that stays open until the watch is done with it.
        guard let d = try? DescriptorWatch(duplicating: libdbus.dbus_watch_get_unix_fd(w), queue: queue) else { return false }
        d.setHandlers(onReadable: { [weak self, weak box] in
            if let box { self?.handleWatch(box, UInt32(DBUS_WATCH_READABLE.rawValue)) }
        }, onWritable: { [weak self, weak box] in
            if let box { self?.handleWatch(box, UInt32(DBUS_WATCH_WRITABLE.rawValue)) }
        })
        box.descriptor = d
        box.setActive(libdbus.dbus_watch_get_enabled(w) != 0)
        // libdbus owns the box through the watch's data and releases it with the free function.
        libdbus.dbus_watch_set_data(w, Unmanaged.passRetained(box).toOpaque(), { p in
            Unmanaged<WatchBox>.fromOpaque(p!).release()
        })
        return true
    }

    private func box(for w: OpaquePointer) -> WatchBox? {
        guard let p = libdbus.dbus_watch_get_data(w) else { return nil }
        return Unmanaged<WatchBox>.fromOpaque(p).takeUnretainedValue()
    }

    func removeWatch(_ w: OpaquePointer) {
        guard let b = box(for: w) else { return }
        b.removed = true
        b.cancel()
        libdbus.dbus_watch_set_data(w, nil, nil)  // runs the free function: releases the box
    }

    func toggleWatch(_ w: OpaquePointer) {
        box(for: w)?.setActive(libdbus.dbus_watch_get_enabled(w) != 0)
    }

    private func handleWatch(_ box: WatchBox, _ flag: UInt32) {
        // The watch may have been removed while this event was queued.
        guard !box.removed else { return }
        _ = libdbus.dbus_watch_handle(box.watch, flag)
        dispatchAll()
        // libdbus reads and writes in bounded chunks: while the watch still wants the
        // descriptor and it is still ready, handle it again (after other work queued
        // meanwhile). libdispatch re-arms the source after this handler and would fire again
        // too; looking here keeps the rest of a burst from waiting behind that round trip.
        // Handling may have removed the watch (a disconnect): check before touching it.
        guard !box.removed, libdbus.dbus_watch_get_enabled(box.watch) != 0 else { return }
        let events = Int16(flag == UInt32(DBUS_WATCH_READABLE.rawValue) ? POLLIN : POLLOUT)
        var p = pollfd(fd: libdbus.dbus_watch_get_unix_fd(box.watch), events: events, revents: 0)
        if poll(&p, 1, 0) == 1, p.revents & events != 0 {
            queue.async { [weak self, weak box] in
                if let box { self?.handleWatch(box, flag) }
            }
        }
    }

    // MARK: Timeouts

    func addTimeout(_ t: OpaquePointer) -> Bool {
        let timer = DispatchSource.makeTimerSource(queue: queue)
        let box = TimeoutBox(timeout: t, timer: timer)
        timer.setEventHandler { [weak self] in
            guard libdbus.dbus_timeout_get_data(t) != nil else { return }
            _ = libdbus.dbus_timeout_handle(t)
            self?.dispatchAll()
        }
        let ms = Int(libdbus.dbus_timeout_get_interval(t))
        timer.schedule(deadline: .now() + .milliseconds(ms), repeating: .milliseconds(max(ms, 1)))
        timer.activate()
        box.active = true
        if libdbus.dbus_timeout_get_enabled(t) == 0 { box.setActive(false) }
        // libdbus owns the box through the timeout's data and releases it with the free function.
        libdbus.dbus_timeout_set_data(t, Unmanaged.passRetained(box).toOpaque(), { p in
            Unmanaged<TimeoutBox>.fromOpaque(p!).release()
        })
        return true
    }

    static func timeoutBox(_ t: OpaquePointer) -> TimeoutBox? {
        guard let p = libdbus.dbus_timeout_get_data(t) else { return nil }
        return Unmanaged<TimeoutBox>.fromOpaque(p).takeUnretainedValue()
    }

    static func removeTimeout(_ t: OpaquePointer) {
        guard let b = timeoutBox(t) else { return }
        b.cancel()
        libdbus.dbus_timeout_set_data(t, nil, nil)  // runs the free function: releases the box
    }

    static func toggleTimeout(_ t: OpaquePointer) {
        timeoutBox(t)?.setActive(libdbus.dbus_timeout_get_enabled(t) != 0)
    }

    // MARK: Incoming messages

    /// The filter every incoming message passes through. On the queue.
    func filter(_ msg: OpaquePointer) -> DBusHandlerResult {
        // A message type this side does not know is ignored, as the specification says.
        guard Codec.kind(of: msg) != nil else { return DBUS_HANDLER_RESULT_NOT_YET_HANDLED }
        let header = Codec.decodeHeader(msg)
        switch header.kind {
        case .methodReturn, .error:
            if let r = header.replySerial, pending[r] != nil {
                let m = Codec.decode(msg)
                completePending(r, m.kind == .error ? .failure(m.asError!) : .success(m))
                return DBUS_HANDLER_RESULT_HANDLED
            }
            return DBUS_HANDLER_RESULT_NOT_YET_HANDLED
        case .signal:
            if header.interface == "org.freedesktop.DBus.Local", header.member == "Disconnected" {
                handleDisconnect()
                return DBUS_HANDLER_RESULT_HANDLED
            }
            deliverSignal(header, msg)
            return DBUS_HANDLER_RESULT_NOT_YET_HANDLED
        case .methodCall:
            handleMethodCall(Codec.decode(msg))
            return DBUS_HANDLER_RESULT_HANDLED
        }
    }

    private func deliverSignal(_ header: BusMessage, _ msg: OpaquePointer) {
        let ownerChange = header.sender == "org.freedesktop.DBus" && header.member == "NameOwnerChanged"
        // Cheap test on the header first: most signals on a busy bus match nothing of ours.
        let candidate = state.withLock { s in
            s.subscriptions.values.contains { sub in
                sub.rule.matches(header, senderOwner: sub.rule.wellKnownSender.flatMap { s.nameOwners[$0] }, checkArguments: false)
            }
        }
        guard candidate || ownerChange else { return }
        let m = Codec.decode(msg)
        let targets = state.withLock { s -> [AsyncStream<BusMessage>.Continuation] in
            // Keep the owners of watched well-known names current before matching.
            if ownerChange, m.body.count == 3, let name = m.body[0].string, let new = m.body[2].string,
               s.nameOwners[name] != nil || s.matchRefs[MatchRule.nameOwnerChanged(name).description] != nil {
                s.nameOwners[name] = new.isEmpty ? nil : new
            }
            let changedName = ownerChange ? m.body.first?.string : nil
            return s.subscriptions.values.filter { sub in
                (changedName != nil && sub.followsOwner == changedName)
                    || sub.rule.matches(m, senderOwner: sub.rule.wellKnownSender.flatMap { s.nameOwners[$0] })
            }.compactMap(\.continuation)
        }
        for c in targets { c.yield(m) }
    }

    func handleDisconnect() {
        let calls = Array(pending.values)
        pending.removeAll()
        let (subs, subscribing, waiters) = state.withLock { s in
            if s.disconnected { return ([Subscription](), [CheckedContinuation<UInt64, Error>](), [CheckedContinuation<Void, Never>]()) }
            s.disconnected = true
            let subs = Array(s.subscriptions.values)
            s.subscriptions.removeAll()
            let subscribing = s.matchRefs.values.flatMap { $0.waiters.map(\.continuation) }
            s.matchRefs.removeAll()
            s.nameOwners.removeAll()
            let w = s.disconnectWaiters
            s.disconnectWaiters.removeAll()
            return (subs, subscribing, w)
        }
        let err = BusError(name: BusError.disconnected, message: "the connection to the \(address) was lost")
        for p in calls {
            p.timer.cancel()
            p.complete(.failure(err))
        }
        for c in subscribing { c.resume(throwing: err) }
        for s in subs { s.continuation?.finish() }
        for w in waiters { w.resume() }
    }
}
