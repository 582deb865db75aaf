internal import CAvahi
// Linux Dispatch has no Sendable annotations; its sources and queues are thread-safe.
@preconcurrency import Dispatch
import FoundationEssentials
import Logging
import Synchronization

/// The user data of one Avahi callback: which object it is about. Retained when the C object
/// is created, released right after the C object is freed (by us, or by `avahi_client_free`).
final class CallbackBox {
    enum Kind { case client, group, browser, resolver, oneShot, typeBrowser }
    let kind: Kind
    let id: String
    let key: String
    weak var owner: DNSSDClient?

    init(_ kind: Kind, id: String, key: String = "", owner: DNSSDClient) {
        self.kind = kind
        self.id = id
        self.key = key
        self.owner = owner
    }

    func retained() -> UnsafeMutableRawPointer { Unmanaged.passRetained(self).toOpaque() }
    static func from(_ p: UnsafeMutableRawPointer?) -> CallbackBox { Unmanaged<CallbackBox>.fromOpaque(p!).takeUnretainedValue() }
    static func release(_ p: UnsafeMutableRawPointer?) { if let p { Unmanaged<CallbackBox>.fromOpaque(p).release() } }
}

/// A C object and the retained box its callbacks get.
struct COwned {
    let pointer: OpaquePointer
    let box: UnsafeMutableRawPointer
}

/// DNS-SD through avahi-daemon (libavahi-client): publish, browse, resolve, list types.
///
/// Survives avahi-daemon restarts: the client is made with `AVAHI_CLIENT_NO_FAIL`, and when
/// the daemon goes away (Avahi reports a failure with "disconnected") the client is freed
/// and made again, waiting for the daemon; once it runs, every publication is registered
/// again and every browse starts again, and events say so. While it is gone, requests fail
/// at once with `.unavailable`.
///
/// `@unchecked Sendable`: this is the one owner of libavahi-client's objects, and every one
/// of its mutable properties (and every Avahi call) is touched only on `queue`; the public
/// methods hop onto the queue. The only state read from other threads is `availability`, a
/// `Mutex`, and `resolveCache`, a `Mutex` too.
public final class DNSSDClient: @unchecked Sendable {
    let queue = DispatchQueue(label: "peerlink.dnssd")
    let logger: Logger
    let names: NameStore
    let onEvent: @Sendable (DNSSDEvent) -> Void
    private let availability = Mutex<(running: Bool, reason: String)>((false, "not connected to avahi-daemon yet"))
    /// Recent resolve results. Written on the queue; read by `resolve` on the caller's thread,
    /// so that a hit does not wait behind a blocking libavahi-client call on the queue.
    let resolveCache = Mutex(ResolveCache())

    // On the queue only.
    var poll: DispatchPoll?
    var client: COwned?
    var running = false
    var stopped = false
    var wasUnavailable = false
    var connectRetryDelay = 0.0
    var nextID = 1
    var publications: [String: Publication] = [:]
    var browses: [String: Browse] = [:]
    var oneShots: [String: OneShot] = [:]

    /// Seconds on a monotonic clock, for the resolve cache.
    static func monotonicSeconds() -> Double { Double(DispatchTime.now().uptimeNanoseconds) / 1e9 }

    /// Creates a client; `start()` connects. Events go to `onEvent`, on the client's queue.
    public init(logger: Logger, names: NameStore, onEvent: @escaping @Sendable (DNSSDEvent) -> Void) {
        self.logger = logger
        self.names = names
        self.onEvent = onEvent
    }

    /// True while avahi-daemon runs and is reachable.
    public var isAvailable: Bool { availability.withLock { $0.running } }

    /// Why it is not available (meaningful when `isAvailable` is false).
    public var unavailableReason: String { availability.withLock { $0.reason } }

    /// Starts connecting to avahi-daemon (and keeps doing so while it is away).
    public func start() {
        queue.async { [self] in
            if poll == nil { poll = DispatchPoll(queue: queue) }
            connect()
        }
    }

    /// Withdraws everything and disconnects.
    public func stop() async {
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            queue.async { [self] in
                stopped = true
                teardown(reason: "the daemon is stopping")
                poll?.close()
                poll = nil
                c.resume()
            }
        }
    }

    func newID(_ prefix: String) -> String {
        defer { nextID += 1 }
        return "\(prefix)\(nextID)"
    }

    func unavailableError() -> DNSSDError {
        .unavailable(availability.withLock { $0.reason })
    }

    func setAvailability(_ running: Bool, _ reason: String) {
        availability.withLock { $0 = (running, reason) }
    }

    /// Avahi's error text for `code`.
    static func message(_ code: Int32) -> String {
        // Also called when there is no client, perhaps because Avahi could not be loaded.
        guard AvahiLibrary.unavailableReason == nil, let text = libavahi.avahi_strerror(code) else { return "Avahi error \(code)" }
        return String(cString: text)
    }

    /// The client's last error as a `DNSSDError`.
    func avahiError(_ operation: String) -> DNSSDError {
        let code = client.map { libavahi.avahi_client_errno($0.pointer) } ?? Int32(Int32(AVAHI_ERR_DISCONNECTED))
        return .avahi(operation: operation, code: code, message: Self.message(code))
    }

    // MARK: The client

    private func connect() {
        guard !stopped, client == nil, let poll else { return }
        if let reason = AvahiLibrary.unavailableReason {
            // Not retried: the library does not appear by itself (installing it needs a restart).
            setAvailability(false, reason)
            logger.error("DNS-SD is unavailable", ["error": reason])
            return
        }
        let box = CallbackBox(.client, id: "client", owner: self).retained()
        var error: Int32 = 0
        boxInCreation = box
        defer { boxInCreation = nil }
        let c = libavahi.avahi_client_new(UnsafePointer(poll.api), AVAHI_CLIENT_NO_FAIL, { c, state, userdata in
            let box = CallbackBox.from(userdata)
            box.owner?.clientChanged(c!, state)
        }, box, &error)
        guard let c else {
            CallbackBox.release(box)
            // No system bus at all: try again later (a timer on the queue, no sleeping).
            let reason = "cannot reach avahi-daemon over the system bus: \(Self.message(error))"
            setAvailability(false, reason)
            // Said once; then retried quietly, less and less often (2 s doubling to 30 s).
            if connectRetryDelay == 0 {
                logger.warning("cannot create the Avahi client; retrying", ["error": Self.message(error)])
            } else {
                logger.debug("cannot create the Avahi client; retrying", ["error": Self.message(error)])
            }
            connectRetryDelay = min(max(connectRetryDelay * 2, 2), 30)
            queue.asyncAfter(deadline: .now() + connectRetryDelay) { [weak self] in self?.connect() }
            return
        }
        if client == nil { client = COwned(pointer: c, box: box) }
        connectRetryDelay = 0
    }

    /// Avahi's client state changed. On the queue (inside an Avahi call).
    private func clientChanged(_ c: OpaquePointer, _ state: AvahiClientState) {
        // The first calls come from inside avahi_client_new, before it returned.
        if client == nil, let box = boxInCreation { client = COwned(pointer: c, box: box) }
        switch state {
        case AVAHI_CLIENT_S_RUNNING:
            guard !running else { return }
            running = true
            let version = libavahi.avahi_client_get_version_string(c).map { String(cString: $0) }
            setAvailability(true, "")
            logger.notice("avahi-daemon available", ["avahi.version": version ?? "?"])
            onEvent(.avahiAvailable(version: version))
            let again = wasUnavailable
            restoreAll(again: again)
        case AVAHI_CLIENT_S_COLLISION, AVAHI_CLIENT_S_REGISTERING:
            // The host name is being (re)registered: Avahi withdraws our records; publish
            // them again once it runs.
            running = false
            setAvailability(false, "avahi-daemon is registering its host name")
            resolveCache.withLock { $0.removeAll() }
            for p in publications.values { dropGroup(p, free: true, state: .waiting) }
        case AVAHI_CLIENT_CONNECTING:
            running = false
            setAvailability(false, "avahi-daemon is not running (waiting for it)")
            logger.info("waiting for avahi-daemon")
        case AVAHI_CLIENT_FAILURE:
            let code = libavahi.avahi_client_errno(c)
            let reason = "avahi-daemon went away (\(Self.message(code)))"
            logger.warning("Avahi client failed; reconnecting", ["error": Self.message(code)])
            // Free and re-create outside Avahi's own call stack.
            queue.async { [weak self] in
                guard let self else { return }
                self.teardown(reason: reason)
                self.connect()
            }
        default:
            break
        }
    }

    // avahi_client_new reports states before it returns the pointer; the box passed in is
    // remembered here so that the first callback can record the client.
    private var boxInCreation: UnsafeMutableRawPointer?

    /// Frees the client and with it every Avahi object; publications and browses are kept
    /// to be restored. On the queue.
    func teardown(reason: String) {
        let wasRunning = running
        running = false
        setAvailability(false, stopped ? "the daemon is stopping" : reason)
        for p in publications.values { dropGroup(p, free: false, state: .waiting) }
        for b in browses.values { dropBrowser(b, free: false) }
        for o in oneShots.values { finishOneShot(o, .failure(.unavailable(reason)), free: false) }
        resolveCache.withLock { $0.removeAll() }
        if let c = client {
            libavahi.avahi_client_free(c.pointer)  // frees every group, browser and resolver it made
            CallbackBox.release(c.box)
            client = nil
        }
        if wasRunning || !wasUnavailable {
            wasUnavailable = true
            if !stopped {
                onEvent(.avahiUnavailable(reason: reason))
                for b in browses.values { onEvent(.browseInterrupted(browseID: b.id)) }
            }
        }
    }

    /// Publishes and browses everything again. On the queue, in the running state.
    private func restoreAll(again: Bool) {
        for p in publications.values.sorted(by: { $0.order < $1.order }) where p.group == nil {
            p.republishing = again
            if let e = register(p) {
                p.state = .failed
                p.error = e.description
                onEvent(.publishFailed(p.info, error: e.description))
            }
        }
        for b in browses.values.sorted(by: { $0.order < $1.order }) where b.browser == nil {
            if let e = startBrowser(b) {
                onEvent(.browseFailed(browseID: b.id, error: e.description))
            } else if again {
                onEvent(.browseResumed(browseID: b.id))
            }
        }
    }

    /// Runs `body` on the queue and returns its result.
    func onQueue<T: Sendable>(_ body: @escaping @Sendable () -> Result<T, DNSSDError>) async throws(DNSSDError) -> T {
        let r = await withCheckedContinuation { (c: CheckedContinuation<Result<T, DNSSDError>, Never>) in
            queue.async { c.resume(returning: body()) }
        }
        return try r.get()
    }

    /// Runs `body` on the queue; it calls `done` (once) when the answer is known.
    func onQueueAwaiting<T: Sendable>(_ body: @escaping @Sendable (@escaping (Result<T, DNSSDError>) -> Void) -> Void) async throws(DNSSDError) -> T {
        let r = await withCheckedContinuation { (c: CheckedContinuation<Result<T, DNSSDError>, Never>) in
            queue.async {
                var done = false
                body { result in
                    guard !done else { return }
                    done = true
                    c.resume(returning: result)
                }
            }
        }
        return try r.get()
    }
}
