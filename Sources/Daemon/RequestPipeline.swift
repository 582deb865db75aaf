import Control
import Logging
import Synchronization

/// The requests of one control client, answered one at a time and in order, on the client's
/// own queue: a quick method (`ControlServer.register(_:quick:)`) is answered right there, as
/// the line is read, and the replies of one read go out in one write; a request that must
/// wait (on the bus, or for room) runs as a task, and the lines after it wait until its
/// reply is written, so replies keep the order of the requests and every request takes
/// effect after the one before it.
final class RequestPipeline: Sendable {
    private let client: ClientConnection
    private let server: ControlServer
    private let logger: Logger
    private let state = Mutex(State())

    private struct State {
        var pending: [ClientConnection.Line] = []
        var head = 0
        /// The bytes of the lines not yet answered.
        var waitingBytes = 0
        /// The client's input is held until those are answered.
        var holding = false
        /// A request's task is running: the rest wait.
        var running = false
        /// The client sends no more.
        var inputDone = false
        /// Closing: nothing more is answered.
        var done = false
    }

    init(client: ClientConnection, server: ControlServer, logger: Logger) {
        self.client = client
        self.server = server
        self.logger = logger
    }

    /// Lines read, in order. On the client's queue.
    func take(_ lines: [ClientConnection.Line]) {
        let hold = state.withLock { s -> Bool? in
            if s.done { return nil }
            s.pending += lines
            s.waitingBytes += lines.reduce(0) { $0 + $1.byteCount }
            guard !s.holding, s.pending.count - s.head > Self.maxWaitingLines || s.waitingBytes > Self.maxWaitingBytes else { return false }
            s.holding = true
            return true
        }
        // A client writing faster than its requests are answered (one waits on the bus, or
        // for a peer) waits in its writes: the daemon does not keep every line meanwhile.
        guard let hold else { return Self.drop(lines[...]) }
        if hold { client.holdInput() }
        run()
    }

    /// Lines that will not be answered: the descriptors passed with them are closed.
    private static func drop(_ lines: ArraySlice<ClientConnection.Line>) {
        for case .request(_, let passed?) in lines { passed.finish() }
    }

    /// Nothing more is answered: the lines left are dropped.
    private func stop() {
        let rest = state.withLock { s -> ArraySlice<ClientConnection.Line> in
            s.done = true
            defer { (s.pending, s.head, s.waitingBytes) = ([], 0, 0) }
            return s.pending[s.head...]
        }
        Self.drop(rest)
    }

    /// Lines read and not yet answered past which the client's input is held until they
    /// are (a read hands on at most a few MiB more).
    static let maxWaitingLines = 1_024
    static let maxWaitingBytes = 4 * 1_048_576

    /// The client sends no more: finish once everything is answered. On the client's queue.
    func inputEnded() {
        state.withLock { $0.inputDone = true }
        run()
    }

    /// Replies waiting in `run` go out once they reach this size: one read can hold a
    /// thousand requests, and their replies, kept for one write, would pass the client's
    /// outbound bound (16 MiB) many times over before the bound was checked.
    static let batchBytes = 65_536

    /// Answers what waits until a request must wait. On the client's queue.
    private func run() {
        var out: [UInt8] = []
        func flush() {
            if !out.isEmpty { client.send(out) }
            out = []
        }
        while true {
            if out.count >= Self.batchBytes { flush() }
            // Closed (it stopped reading, or went away): the requests left are not answered.
            if client.isClosed { return stop() }
            let next = state.withLock { s -> ClientConnection.Line? in
                guard !s.running, !s.done, s.head < s.pending.count else { return nil }
                defer {
                    s.waitingBytes -= s.pending[s.head].byteCount
                    s.head += 1
                    if s.head == s.pending.count {
                        s.pending.removeAll(keepingCapacity: true)
                        s.head = 0
                    }
                }
                return s.pending[s.head]
            }
            guard let next else { break }
            switch next {
            case .fatal(let error):
                flush()
                stop()
                client.send(RPCResponse(id: .null, error: error).encodedLine(), thenClose: true)
                return
            case .request(let bytes, let passed):
                let attachments = ReplyAttachments()
                switch server.answerNow(RPCIncoming.parse(line: bytes), client, attachments, passed) {
                case .done(let reply):
                    passed?.finish()
                    deliver(reply, attachments, into: &out)
                case .pending(let rest):
                    flush()
                    state.withLock { $0.running = true }
                    Task {
                        let reply = await rest()
                        passed?.finish()
                        var line: [UInt8] = []
                        self.deliver(reply, attachments, into: &line)
                        if !line.isEmpty { self.client.send(line) }
                        self.client.queue.async {
                            self.state.withLock { $0.running = false }
                            self.run()
                        }
                    }
                    return
                }
            }
        }
        flush()
        let release = state.withLock { s -> Bool in
            guard s.holding, !s.running, s.head == s.pending.count else { return false }
            s.holding = false
            return true
        }
        if release { client.releaseInput() }
        let finished = state.withLock { s -> Bool in
            guard s.inputDone, !s.running, !s.done, s.head == s.pending.count else { return false }
            s.done = true
            return true
        }
        if finished {
            // The client closed its side (or was closed): finish once everything is written.
            client.send([], thenClose: true)
            logger.debug("client done", ["client.id": "\(client.id)"])
        }
    }

    /// Appends `reply`'s line to `out`; a reply with descriptors is sent on its own (they
    /// travel with its first byte), after what `out` held.
    private func deliver(_ reply: JSONValue?, _ attachments: ReplyAttachments, into out: inout [UInt8]) {
        guard let reply else { return attachments.discard() }
        let fds = attachments.take()
        if fds.isEmpty {
            out += reply.encodedLine()
        } else {
            if !out.isEmpty { client.send(out) }
            out = []
            client.send(reply.encodedLine(), passing: fds)
        }
    }
}
