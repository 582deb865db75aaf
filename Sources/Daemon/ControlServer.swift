// Linux Dispatch has no Sendable annotations; its sources and queues are thread-safe.
@preconcurrency import Dispatch
import Control
import Foundation
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

    /// Sets the topics this client receives events for (nil: none).
    public func setEventTopics(_ topics: [String]?) { client.setTopics(topics) }

    /// The topics this client receives events for.
    public var eventTopics: [String]? { client.topics }

    /// Runs `handler` when this client's connection closes (for resources it owns).
    public func onConnectionClose(_ handler: @escaping @Sendable () -> Void) { client.addCloseHandler(handler) }

    /// Passes `fd` to the client with the reply to this request (SCM_RIGHTS, attached to the
    /// first byte of the reply's line). The server owns it from now on: it closes its copy once
    /// sent, or at once when the method fails or the client is gone.
    public func passWithReply(_ fd: Int32) { attachments.add(fd) }
}

/// Descriptors a method hands back with its reply.
final class ReplyAttachments: Sendable {
    private let fds = Mutex<[Int32]>([])
    func add(_ fd: Int32) { fds.withLock { $0.append(fd) } }
    func take() -> [Int32] { fds.withLock { f in defer { f = [] }; return f } }
    /// Closes what was attached (the reply is an error).
    func discard() { for fd in take() { closeQuietly(fd) } }
}

/// A JSON-RPC method: named parameters in, a result out, or an `RPCError`.
public typealias MethodHandler = @Sendable (RPCParams, RequestContext) async throws(RPCError) -> JSONValue

/// The control socket: a Unix stream socket speaking JSON-RPC 2.0, one object per line.
public final class ControlServer: Sendable {
    private let options: ControlServerOptions
    private let logger: Logger
    private let methods: Mutex<[String: MethodHandler]> = Mutex([:])
    private let state = Mutex(ServerState())
    private let closeHandlers = Mutex<[@Sendable (UInt64) -> Void]>([])
    private let queue = DispatchQueue(label: "peerlink.control.accept")

    private struct ServerState {
        var listener: Int32 = -1
        var acceptSource: DispatchSourceRead?
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
        methods.withLock { $0[name] = handler }
    }

    /// The registered method names, sorted.
    public var methodNames: [String] { methods.withLock { $0.keys.sorted() } }

    /// Creates the socket (its directory too) and starts accepting clients.
    public func start() throws {
        let dir = (options.path as NSString).deletingLastPathComponent
        if !dir.isEmpty, !FileManager.default.fileExists(atPath: dir) {
            try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true,
                                                    attributes: [.posixPermissions: 0o755])
        }
        let fd = try UnixSocket.listen(path: options.path, mode: mode_t(options.mode), group: options.group.map { gid_t($0) })
        let src = DispatchSource.makeReadSource(fileDescriptor: fd, queue: queue)
        src.setEventHandler { [weak self] in self?.acceptAll() }
        src.setCancelHandler { closeQuietly(fd) }
        state.withLock {
            $0.listener = fd
            $0.acceptSource = src
        }
        src.activate()
        logger.info("control socket listening", ["socket.path": options.path])
    }

    /// Stops accepting, closes every client and removes the socket file.
    public func stop() {
        let (src, clients) = state.withLock { s -> (DispatchSourceRead?, [ClientConnection]) in
            let r = (s.acceptSource, Array(s.clients.values))
            s.acceptSource = nil
            s.clients.removeAll()
            return r
        }
        guard let src else { return }
        src.cancel()
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
            let (client, lines) = ClientConnection.make(id: id, fd: fd, limits: options, logger: logger) { [weak self] id in
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
            Task { await self.serve(client, lines) }
        }
    }

    // MARK: Requests

    /// Answers a client's lines one at a time, in order, until it stops sending.
    private func serve(_ client: ClientConnection, _ lines: AsyncStream<ClientConnection.Line>) async {
        for await line in lines {
            switch line {
            case .fatal(let error):
                client.send(RPCResponse(id: .null, error: error).encodedLine(), thenClose: true)
                return
            case .request(let bytes):
                let attachments = ReplyAttachments()
                if let reply = await answer(RPCIncoming.parse(line: bytes), client, attachments) {
                    client.send(reply.encodedLine(), passing: attachments.take())
                } else {
                    attachments.discard()
                }
            }
        }
        // The client closed its side (or was closed): finish once everything is written.
        client.send([], thenClose: true)
        logger.debug("client done", ["client.id": "\(client.id)"])
    }

    private func answer(_ incoming: RPCIncoming, _ client: ClientConnection, _ attachments: ReplyAttachments) async -> JSONValue? {
        switch incoming {
        case .invalid(let id, let error):
            return RPCResponse(id: id, error: error).json
        case .request(let r):
            let result = await call(r, client, attachments)
            // Careful: JSONValue is ExpressibleByNilLiteral, so a bare `nil` here would be `.null`.
            if r.isNotification { return JSONValue?.none }
            return RPCResponse(id: r.id ?? .null, outcome: result).json
        case .batch(let items):
            var replies: [JSONValue] = []
            for item in items {
                if let reply = await answer(item, client, attachments) { replies.append(reply) }
            }
            if replies.isEmpty { return JSONValue?.none }
            return .array(replies)
        }
    }

    private func call(_ r: RPCRequest, _ client: ClientConnection, _ attachments: ReplyAttachments) async -> Result<JSONValue, RPCError> {
        guard let handler = methods.withLock({ $0[r.method] }) else {
            return .failure(.methodNotFound(r.method))
        }
        // Descriptors of this request only: a failed method's are closed, others' kept.
        let mine = ReplyAttachments()
        do {
            let v = try await handler(r.params, RequestContext(clientID: client.id, client: client, attachments: mine))
            if r.isNotification { mine.discard() } else { for fd in mine.take() { attachments.add(fd) } }
            return .success(v)
        } catch {
            mine.discard()
            if error.code == RPCErrorCode.internalError {
                logger.error("method failed", ["rpc.method": r.method, "error": error.message])
            }
            return .failure(error)
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
