internal import CDBus
import Dispatch
import Synchronization

/// Which bus to connect to.
public enum BusAddress: Sendable, Hashable, CustomStringConvertible {
    /// The system bus (`bluetoothd`, `avahi-daemon`).
    case system
    /// The session bus.
    case session
    /// An explicit address, e.g. `unix:path=/tmp/test-bus`.
    case address(String)

    /// "system bus", "session bus" or the address.
    public var description: String {
        switch self {
        case .system: "system bus"
        case .session: "session bus"
        case .address(let a): a
        }
    }
}

/// A connection to a message bus: libdbus's watches become `DescriptorWatch`es and its
/// timeouts Dispatch timers, on one serial queue, so nothing polls and nothing sleeps.
///
/// `@unchecked Sendable`: this class is the one owner of  Every libdbus call on the
/// connection is made on `queue`; all mutable Swift state lives in `state`, a `Mutex`.
public final class BusConnection: @unchecked Sendable {
    let queue: DispatchQueue
    let conn: OpaquePointer
    let state = Mutex(ConnectionState())
    /// Calls waiting for replies. Touched only on `queue` (the filter, timers and cancellation all run there).
    var pending: [UInt32: PendingCall] = [:]
    let objects = ObjectRegistry()
    private static let queueKey = DispatchSpecificKey<ObjectIdentifier>()

    /// The unique name the bus gave this connection, e.g. `:1.42`.
    public let uniqueName: String
    /// Which bus this is.
    public let address: BusAddress

    // MARK: Connecting

    /// Connects and registers with the bus (`Hello`). Blocking work runs off the caller's thread.
    public static func connect(_ address: BusAddress, label: String = "dbus") async throws -> BusConnection {
        try await withCheckedThrowingContinuation { (cont: CheckedContinuation<BusConnection, Error>) in
            DispatchQueue.global().async {
                cont.resume(with: Result { try BusConnection(connectingTo: address, label: label) })
            }
        }
    }

    private init(connectingTo address: BusAddress, label: String) throws {
        try DBusLibrary.require()
        _ = libdbus.dbus_threads_init_default()
        var err = CDBus.DBusError()
        libdbus.dbus_error_init(&err)
        defer { libdbus.dbus_error_free(&err) }
        let c: OpaquePointer?
        switch address {
        case .system: c = libdbus.dbus_bus_get_private(DBUS_BUS_SYSTEM, &err)
        case .session: c = libdbus.dbus_bus_get_private(DBUS_BUS_SESSION, &err)
        case .address(let a):
            c = libdbus.dbus_connection_open_private(a, &err)
            if let c, libdbus.dbus_bus_register(c, &err) == 0 {
                libdbus.dbus_connection_close(c)
                libdbus.dbus_connection_unref(c)
                throw BusConnection.error(from: &err, fallback: "registering with the bus at \(a)")
            }
        }
        guard let c else { throw BusConnection.error(from: &err, fallback: "connecting to the \(address)") }
        libdbus.dbus_connection_set_exit_on_disconnect(c, 0)
        conn = c
        self.address = address
        uniqueName = libdbus.dbus_bus_get_unique_name(c).map { String(cString: $0) } ?? ""
        queue = DispatchQueue(label: "peerlink.\(label)")
        queue.setSpecific(key: BusConnection.queueKey, value: ObjectIdentifier(self))
        queue.sync { installHooks() }
    }

    static func error(from err: inout CDBus.DBusError, fallback: String) -> BusError {
        if libdbus.dbus_error_is_set(&err) != 0 {
            return BusError(name: err.name.map { String(cString: $0) } ?? BusError.failed,
                            message: err.message.map { String(cString: $0) } ?? fallback)
        }
        return BusError(name: BusError.failed, message: fallback)
    }

    deinit {
        libdbus.dbus_connection_close(conn)
        libdbus.dbus_connection_unref(conn)
    }

    /// Closes the connection: pending calls fail with `Disconnected`, signal streams finish.
    public func close() {
        state.withLock { $0.closedByOwner = true }
        onQueue {
            libdbus.dbus_connection_close(self.conn)
            self.handleDisconnect()
        }
    }

    /// Whether the connection is still open.
    public var isConnected: Bool { state.withLock { !$0.disconnected } }

    /// Whether `close()` was called: the connection was ended on purpose (a shutdown), not
    /// lost, and whoever follows it has nothing to report.
    public var wasClosed: Bool { state.withLock { $0.closedByOwner } }

    /// Returns when the connection is lost (or at once if it already is).
    public func waitUntilDisconnected() async {
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            let now = state.withLock { s -> Bool in
                if s.disconnected { return true }
                s.disconnectWaiters.append(c)
                return false
            }
            if now { c.resume() }
        }
    }

    /// The socket's descriptor (libdbus owns it), nil once closed. For tests.
    var socketDescriptor: Int32? {
        onQueueSync {
            var fd: Int32 = -1
            return libdbus.dbus_connection_get_unix_fd(self.conn, &fd) != 0 ? fd : nil
        }
    }

    /// Whether the connection can carry Unix file descriptors.
    public var canPassFileDescriptors: Bool {
        onQueueSync { libdbus.dbus_connection_can_send_type(self.conn, DBUS_TYPE_UNIX_FD) != 0 }
    }

    // MARK: Queue helpers

    /// Runs `body` on the connection's queue: inline if already there.
    func onQueue(_ body: @escaping @Sendable () -> Void) {
        if DispatchQueue.getSpecific(key: BusConnection.queueKey) == ObjectIdentifier(self) { body() } else { queue.async(execute: body) }
    }

    func onQueueSync<T>(_ body: () -> T) -> T {
        if DispatchQueue.getSpecific(key: BusConnection.queueKey) == ObjectIdentifier(self) { return body() }
        return queue.sync(execute: body)
    }

    // MARK: Sending

    /// Sends a message without waiting for any reply; returns the serial it got.
    @discardableResult
    public func send(_ message: BusMessage) throws -> UInt32 {
        let encoded = QueuePointer(try Codec.encode(message))
        let result = onQueueSync { () -> Result<UInt32, BusError> in
            defer { libdbus.dbus_message_unref(encoded.pointer) }
            if state.withLock({ $0.disconnected }) {
                return .failure(BusError(name: BusError.disconnected, message: "not connected to the \(address)"))
            }
            var serial: UInt32 = 0
            guard libdbus.dbus_connection_send(conn, encoded.pointer, &serial) != 0 else {
                return .failure(BusError(name: BusError.noMemory, message: "dbus_connection_send"))
            }
            return .success(serial)
        }
        return try result.get()
    }

    /// Sends a method call and waits for its reply, at most `timeout`.
    ///
    /// Throws `BusError` for an error reply (its D-Bus name and message), `NoReply` on timeout,
    /// `Disconnected` when the connection goes, or `CancellationError` when the task is cancelled.
    public func call(_ message: BusMessage, timeout: Duration = .seconds(25)) async throws -> BusMessage {
        precondition(message.kind == .methodCall, "call() sends method calls")
        let encoded = QueuePointer(try Codec.encode(message))
        let token = CallToken()
        let what = "\(message.interface.map { $0 + "." } ?? "")\(message.member ?? "") on \(message.path?.rawValue ?? "?") of \(message.destination ?? "?")"
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (cont: CheckedContinuation<BusMessage, Error>) in
                queue.async {
                    self.startCall(encoded, what: what, timeout: timeout, token: token) { cont.resume(with: $0) }
                }
            }
        } onCancel: {
            queue.async {
                if let s = token.cancel() { self.completePending(s, .failure(CancellationError())) }
            }
        }
    }

    /// Sends the method call `encoded` (and releases it) and runs `complete` on the queue with its
    /// reply, error, timeout or disconnection, exactly once. On the queue.
    ///
    /// Work that must happen in order with incoming messages (bookkeeping for match rules and
    /// name owners) goes in `complete`, which runs before any message that arrived after the reply.
    func startCall(_ encoded: QueuePointer, what: String, timeout: Duration, token: CallToken? = nil,
                   complete: @escaping (Result<BusMessage, Error>) -> Void) {
        defer { libdbus.dbus_message_unref(encoded.pointer) }
        if token?.isCancelled == true {
            complete(.failure(CancellationError()))
            return
        }
        if state.withLock({ $0.disconnected }) {
            complete(.failure(BusError(name: BusError.disconnected, message: "not connected to the \(address)")))
            return
        }
        var serial: UInt32 = 0
        guard libdbus.dbus_connection_send(conn, encoded.pointer, &serial) != 0 else {
            complete(.failure(BusError(name: BusError.noMemory, message: "dbus_connection_send")))
            return
        }
        let timer = DispatchSource.makeTimerSource(queue: queue)
        timer.schedule(deadline: .now() + timeout.timeInterval)
        timer.setEventHandler { [weak self] in
            self?.completePending(serial, .failure(BusError(name: BusError.noReply, message: "no reply to \(what) within \(timeout.secondsText)")))
        }
        timer.activate()
        pending[serial] = PendingCall(complete: complete, timer: timer)
        token?.set(serial: serial)
    }

    /// Sends a method call; `completion` runs on the connection's queue with the reply (or the
    /// error: an error reply, `NoReply` after `timeout`, `Disconnected`). For code that answers
    /// from the queue without a task, e.g. a method handler that must call back first.
    public func call(_ message: BusMessage, timeout: Duration = .seconds(25),
                     completion: @escaping @Sendable (Result<BusMessage, Error>) -> Void) {
        precondition(message.kind == .methodCall, "call() sends method calls")
        let encoded: QueuePointer
        do {
            encoded = QueuePointer(try Codec.encode(message))
        } catch {
            completion(.failure(error))
            return
        }
        let what = "\(message.interface.map { $0 + "." } ?? "")\(message.member ?? "") on \(message.path?.rawValue ?? "?") of \(message.destination ?? "?")"
        onQueue { self.startCall(encoded, what: what, timeout: timeout, complete: completion) }
    }

    /// Calls a method and returns the reply's body.
    public func call(destination: String, path: ObjectPath, interface: String, member: String,
                     _ body: [DBusValue] = [], timeout: Duration = .seconds(25)) async throws -> [DBusValue] {
        try await call(.methodCall(destination: destination, path: path, interface: interface, member: member, body: body),
                       timeout: timeout).body
    }

    /// Resumes the call waiting for `serial`. On the queue.
    func completePending(_ serial: UInt32, _ result: Result<BusMessage, Error>) {
        guard let p = pending.removeValue(forKey: serial) else { return }
        p.timer.cancel()
        p.complete(result)
    }

    /// The number of calls waiting for a reply (for leak checks).
    public var pendingCallCount: Int { onQueueSync { pending.count } }
}

// MARK: - State

struct PendingCall {
    /// Runs on the queue with the outcome.
    let complete: (Result<BusMessage, Error>) -> Void
    let timer: DispatchSourceTimer
}

struct Subscription {
    let rule: MatchRule
    /// Where matching signals go; nil for an internal owner-tracking subscription, which only
    /// keeps its rule on the bus so that `deliverSignal` sees the owner changes.
    let continuation: AsyncStream<BusMessage>.Continuation?
    /// The internal owner-tracking subscription that ends with this one.
    let linked: UInt64?
    /// The well-known name whose owner changes this stream also gets (`followingOwner`).
    let followsOwner: String?
}

/// One match rule on the bus, shared by the subscriptions that use its text.
struct BusRule {
    /// How many subscriptions use it: the rule is on the bus while this is > 0.
    var refs = 0
    /// Whether `AddMatch` has been answered.
    var onBus = false
    /// Subscriptions waiting for the `AddMatch` answer (each counts in `refs`).
    var waiters: [(id: UInt64, continuation: CheckedContinuation<UInt64, Error>)] = []
}

struct ConnectionState {
    var disconnected = false
    var closedByOwner = false
    var subscriptions: [UInt64: Subscription] = [:]
    var nextSubscriptionID: UInt64 = 1
    /// The rules this connection has on the bus, by rule text.
    var matchRefs: [String: BusRule] = [:]
    /// Current owners of the well-known names that subscriptions name as sender.
    var nameOwners: [String: String] = [:]
    var disconnectWaiters: [CheckedContinuation<Void, Never>] = []
}

/// A libdbus pointer (a message or a watch) handed to the queue. `@unchecked Sendable`: it is
/// only ever used on the connection's queue, by one owner at a time.
struct QueuePointer: @unchecked Sendable {
    let pointer: OpaquePointer
    init(_ p: OpaquePointer) { pointer = p }
}

/// Links a `call` to its serial so cancellation can find it.
final class CallToken: Sendable {
    private let state = Mutex<(serial: UInt32?, cancelled: Bool)>((nil, false))
    var isCancelled: Bool { state.withLock { $0.cancelled } }
    func set(serial: UInt32) { state.withLock { $0.serial = serial } }
    /// Marks cancelled; returns the serial if the call was already sent.
    func cancel() -> UInt32? { state.withLock { $0.cancelled = true; return $0.serial } }
}

extension Duration {
    /// The duration in seconds, as a Double.
    public var timeInterval: Double {
        let (s, atto) = components
        return Double(s) + Double(atto) / 1e18
    }

    /// "5 s", "0.25 s".
    public var secondsText: String {
        let t = timeInterval
        return t == t.rounded() ? "\(Int(t)) s" : "\((t * 1000).rounded() / 1000) s"
    }
}
