// Linux Dispatch has no Sendable annotations; its sources and queues are thread-safe.
@preconcurrency import Dispatch
import Control
import FoundationEssentials
import Glibc
import Logging
import Synchronization
import SystemKit

/// Limits and placement of the control socket.
public struct ControlServerOptions: Sendable {
    /// Socket path.
    public var path: String
    /// Socket file mode.
    public var mode: UInt32 = 0o660
    /// Group owning the socket file (nil: the daemon's).
    public var group: UInt32?
    /// Clients served at once; more are told so and closed.
    public var maxClients = 256
    /// Longest request line.
    public var maxLineBytes = ControlDefaults.maxLineBytes
    /// Seconds a client may take to finish a line it started.
    public var requestTimeout = 30.0
    /// Bytes of replies and events waiting for a client that does not read, before it is dropped.
    public var maxOutboundBytes = 16 * 1_048_576

    /// Options for a socket at `path`, other values at their defaults.
    public init(path: String) { self.path = path }
}

/// What a method handler knows about the request it serves.
public struct RequestContext: Sendable {
    /// The client's number.
    public let clientID: UInt64
    let client: ClientConnection
    let attachments: ReplyAttachments
    let passed: PassedDescriptors?

    /// Sets the topics this client receives events for (nil: none).
    public func setEventTopics(_ topics: [String]?) { client.setTopics(topics) }

    /// The topics this client receives events for.
    public var eventTopics: [String]? { client.topics }

    /// Runs `handler` when this client's connection closes, to end something the client
    /// made and owns, while `alive` says that thing still exists (ask the table it is kept
    /// in; it must say true from before this call until the thing ends). Handlers of things
    /// that ended by themselves are dropped as the next is added. Where the capability ends
    /// a client's things by its id when it goes (`DaemonContext.onClientClose`), check
    /// `connectionClosed` once made instead.
    public func onConnectionClose(while alive: @escaping @Sendable () -> Bool, _ handler: @escaping @Sendable () -> Void) {
        client.addCloseHandler(while: alive, handler)
    }

    /// The close handlers this client's connection keeps now (a client's things still open,
    /// and the last one added if it has ended since).
    public var closeHandlerCount: Int { client.closeHandlerCount }

    /// Whether this client's connection has closed or is closing. Something made for the
    /// client and registered under its id before this is read, and found not closed, is
    /// ended by the capability's `onClientClose` (which runs after the connection is marked
    /// closing); found closed, that may have run already: the handler ends it itself.
    public var connectionClosed: Bool { client.isClosed }

    /// Passes `fd` to the client with the reply to this request (SCM_RIGHTS, attached to the
    /// first byte of the reply's line). The server owns it from now on: it closes its copy once
    /// sent, or at once when the method fails or the client is gone.
    public func passWithReply(_ fd: Int32) { attachments.add(fd) }

    /// The next descriptor the client passed with this request's line (SCM_RIGHTS, with
    /// bytes of that line), nil when none is left; the caller owns it (and closes it). Those
    /// the line's requests do not take are closed once it is answered: a descriptor never
    /// goes to another line's request.
    public func takeDescriptor() -> Int32? { passed?.take() }
}

/// Descriptors a method hands back with its reply.
final class ReplyAttachments: Sendable {
    private let fds = Mutex<[Int32]>([])
    func add(_ fd: Int32) { fds.withLock { $0.append(fd) } }
    func take() -> [Int32] { fds.withLock { f in defer { f = [] }; return f } }
    /// Closes what was attached (the reply is an error).
    func discard() { for fd in take() { closeQuietly(fd) } }
}

/// Descriptors a client passed with one request line (SCM_RIGHTS): its requests take them
/// in order; `finish` closes the rest once the line is answered (or will not be), and tells
/// the connection how many it no longer holds.
final class PassedDescriptors: Sendable {
    private let fds: Mutex<[Int32]?>
    private let count: Int
    private let released: @Sendable (Int) -> Void

    init(_ fds: [Int32], released: @escaping @Sendable (Int) -> Void) {
        self.fds = Mutex(fds)
        count = fds.count
        self.released = released
    }

    func take() -> Int32? {
        fds.withLock { f in f?.isEmpty == false ? f!.removeFirst() : nil }
    }

    /// Closes those not taken; only the first call does anything.
    func finish() {
        guard let rest = fds.withLock({ f -> [Int32]? in defer { f = nil }; return f }) else { return }
        for fd in rest { closeQuietly(fd) }
        released(count)
    }
}

/// A JSON-RPC method: named parameters in, a result out, or an `RPCError`.
public typealias MethodHandler = @Sendable (RPCParams, RequestContext) async throws(RPCError) -> JSONValue

/// What a quick method answers on the client's queue: the result now, or the rest of the
/// work to await (it then runs as a task, and the client's later requests wait for it).
public enum QuickReply: Sendable {
    /// The result, now.
    case reply(JSONValue)
    /// The rest, awaited off the client's queue.
    case later(@Sendable () async throws(RPCError) -> JSONValue)
}

/// A method that answers on the client's own queue, as its line is read, without a hop to
/// the cooperative pool: for methods that do not wait on the bus. It must not block.
public typealias QuickMethodHandler = @Sendable (RPCParams, RequestContext) throws(RPCError) -> QuickReply

/// A registered method.
enum Method: Sendable {
    case quick(QuickMethodHandler)
    case async(MethodHandler)
}

/// The control socket: a Unix stream socket speaking JSON-RPC 2.0, one object per line.
public final class ControlServer: Sendable {
    private let options: ControlServerOptions
    private let logger: Logger
    private let methods: Mutex<[String: Method]> = Mutex([:])
    private let state = Mutex(ServerState())
    private let closeHandlers = Mutex<[@Sendable (UInt64) -> Void]>([])
    private let queue = DispatchQueue(label: "peerlink.control.accept")

    private struct ServerState {
        var listener: Int32 = -1
        var acceptWatch: DescriptorWatch?
        var clients: [UInt64: ClientConnection] = [:]
        var nextID: UInt64 = 1
    }

    /// Creates a server; register methods, then `start()`.
    public init(options: ControlServerOptions, logger: Logger) {
        self.options = options
        self.logger = logger
    }

    /// Registers a method (replacing one of the same name).
    public func register(_ name: String, _ handler: @escaping MethodHandler) {
        methods.withLock { $0[name] = .async(handler) }
    }

    /// Registers a quick method (replacing one of the same name): see `QuickMethodHandler`.
    public func register(_ name: String, quick handler: @escaping QuickMethodHandler) {
        methods.withLock { $0[name] = .quick(handler) }
    }

    /// The registered method names, sorted.
    public var methodNames: [String] { methods.withLock { $0.keys.sorted() } }

    /// Creates the socket (its directory too) and starts accepting clients.
    public func start() throws {
        try AtomicFile.makeDirectory(AtomicFile.parent(of: options.path), mode: 0o755)
        let fd = try UnixSocket.listen(path: options.path, mode: mode_t(options.mode), group: options.group.map { gid_t($0) })
        let watch = DescriptorWatch(owning: fd, queue: queue)
        watch.setHandlers(onReadable: { [weak self] in self?.acceptAll() }, onWritable: {})
        state.withLock {
            $0.listener = fd
            $0.acceptWatch = watch
        }
        watch.want(read: true)
        logger.info("control socket listening", ["socket.path": options.path])
    }

    /// Stops accepting, closes every client and removes the socket file.
    public func stop() {
        let (watch, clients) = state.withLock { s -> (DescriptorWatch?, [ClientConnection]) in
            let r = (s.acceptWatch, Array(s.clients.values))
            s.acceptWatch = nil
            s.clients.removeAll()
            return r
        }
        guard let watch else { return }
        watch.cancel()
        for c in clients { c.close() }
        unlink(options.path)
    }

    /// Clients connected now.
    public var clientCount: Int { state.withLock { $0.clients.count } }

    private func acceptAll() {
        while true {
            let listener = state.withLock { $0.listener }
            let fd: Int32?
            do {
                fd = try UnixSocket.accept(listener)
            } catch {
                logger.warning("accept failed", ["error": "\(error)"])
                return
            }
            guard let fd else { return }
            let (id, full) = state.withLock { s -> (UInt64, Bool) in
                let id = s.nextID
                s.nextID += 1
                return (id, s.clients.count >= options.maxClients)
            }
            let client = ClientConnection(id: id, fd: fd, limits: options, logger: logger) { [weak self] id in
                guard let self else { return }
                _ = self.state.withLock { $0.clients.removeValue(forKey: id) }
                for h in self.closeHandlers.withLock({ $0 }) { h(id) }
            }
            if full {
                logger.warning("refusing client: too many clients", ["limit": "\(options.maxClients)"])
                client.send(RPCResponse(id: .null, error: RPCError(
                    code: RPCErrorCode.busy, message: "too many clients: the limit is \(options.maxClients)",
                    data: ["limit": .int(Int64(options.maxClients))])).encodedLine(), thenClose: true)
                continue
            }
            state.withLock { $0.clients[id] = client }
            logger.debug("client connected", ["client.id": "\(id)"])
            let pipeline = RequestPipeline(client: client, server: self, logger: logger)
            client.start(onLines: { pipeline.take($0) }, onInputEnd: { pipeline.inputEnded() })
        }
    }

    // MARK: Requests

    /// An answer: now (nil: no reply, a notification), or the rest to await.
    enum Answer {
        case done(JSONValue?)
        case pending(@Sendable () async -> JSONValue?)
    }

    /// Answers what can be answered on the client's queue (quick methods, errors); hands back
    /// the rest of a request (or of a batch, from its first waiting item) to await.
    func answerNow(_ incoming: RPCIncoming, _ client: ClientConnection, _ attachments: ReplyAttachments,
                   _ passed: PassedDescriptors?) -> Answer {
        switch incoming {
        case .invalid(let id, let error):
            return .done(RPCResponse(id: id, error: error).json)
        case .request(let r):
            switch call(r, client, attachments, passed) {
            case .done(let result):
                // Careful: JSONValue is ExpressibleByNilLiteral, so a bare `nil` here would be `.null`.
                return .done(r.isNotification ? JSONValue?.none : RPCResponse(id: r.id ?? .null, outcome: result).json)
            case .pending(let rest):
                return .pending {
                    let result = await rest()
                    return r.isNotification ? JSONValue?.none : RPCResponse(id: r.id ?? .null, outcome: result).json
                }
            }
        case .batch(let items):
            var replies: [JSONValue] = []
            for (i, item) in items.enumerated() {
                switch answerNow(item, client, attachments, passed) {
                case .done(let reply):
                    if let reply { replies.append(reply) }
                case .pending(let rest):
                    let later = Array(items[(i + 1)...])
                    let before = replies
                    return .pending {
                        var replies = before
                        if let reply = await rest() { replies.append(reply) }
                        for item in later {
                            if let reply = await self.answer(item, client, attachments, passed) { replies.append(reply) }
                        }
                        return replies.isEmpty ? JSONValue?.none : .array(replies)
                    }
                }
            }
            return .done(replies.isEmpty ? JSONValue?.none : .array(replies))
        }
    }

    private func answer(_ incoming: RPCIncoming, _ client: ClientConnection, _ attachments: ReplyAttachments,
                        _ passed: PassedDescriptors?) async -> JSONValue? {
        switch answerNow(incoming, client, attachments, passed) {
        case .done(let reply): reply
        case .pending(let rest): await rest()
        }
    }

    private enum Outcome {
        case done(Result<JSONValue, RPCError>)
        case pending(@Sendable () async -> Result<JSONValue, RPCError>)
    }

    private func call(_ r: RPCRequest, _ client: ClientConnection, _ attachments: ReplyAttachments, _ passed: PassedDescriptors?) -> Outcome {
        guard let method = methods.withLock({ $0[r.method] }) else {
            return .done(.failure(.methodNotFound(r.method)))
        }
        // Descriptors of this request only: a failed method's are closed, others' kept.
        let mine = ReplyAttachments()
        let context = RequestContext(clientID: client.id, client: client, attachments: mine, passed: passed)
        let logger = self.logger
        @Sendable func finish(_ result: Result<JSONValue, RPCError>) -> Result<JSONValue, RPCError> {
            switch result {
            case .success:
                if r.isNotification { mine.discard() } else { for fd in mine.take() { attachments.add(fd) } }
            case .failure(let error):
                mine.discard()
                if error.code == RPCErrorCode.internalError {
                    logger.error("method failed", ["rpc.method": r.method, "error": error.message])
                }
            }
            return result
        }
        let params = r.params
        let rest: @Sendable () async throws(RPCError) -> JSONValue
        switch method {
        case .async(let handler):
            rest = { () async throws(RPCError) -> JSONValue in try await handler(params, context) }
        case .quick(let handler):
            do throws(RPCError) {
                switch try handler(params, context) {
                case .reply(let v): return .done(finish(.success(v)))
                case .later(let r): rest = r
                }
            } catch {
                return .done(finish(.failure(error)))
            }
        }
        return .pending {
            do throws(RPCError) {
                return finish(.success(try await rest()))
            } catch {
                return finish(.failure(error))
            }
        }
    }

    // MARK: Events

    /// Runs `handler` with the client's id whenever a client connection closes (to release
    /// what the client owned: read handlers, browses, publications it asked to end with it).
    public func onClientClose(_ handler: @escaping @Sendable (UInt64) -> Void) {
        closeHandlers.withLock { $0.append(handler) }
    }

    /// Sends an event to one client, subscribed or not; false when that client is gone.
    @discardableResult
    public func send(topic: String, data: JSONValue, to clientID: UInt64, time: Date = Date()) -> Bool {
        guard let c = state.withLock({ $0.clients[clientID] }) else { return false }
        c.send(ControlEvent.notification(topic: topic, time: time, data: data).encodedLine())
        return true
    }

    /// Sends an event to every client subscribed to a matching topic.
    public func publish(topic: String, data: JSONValue, time: Date = Date()) {
        let clients = state.withLock { Array($0.clients.values) }
        var line: [UInt8]?
        for c in clients {
            guard let topics = c.topics, ControlEvent.matches(topic: topic, filters: topics) else { continue }
            if line == nil { line = ControlEvent.notification(topic: topic, time: time, data: data).encodedLine() }
            c.send(line!)
        }
    }
}

extension RPCResponse {
    init(id: JSONValue, outcome: Result<JSONValue, RPCError>) {
        switch outcome {
        case .success(let v): self.init(id: id, result: v)
        case .failure(let e): self.init(id: id, error: e)
        }
    }
}
