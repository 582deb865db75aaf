// Linux Dispatch has no Sendable annotations; its queues are thread-safe.
@preconcurrency import Dispatch
import Control
import Peer
import Session
import Synchronization
import SystemKit

/// One byte stream with a peer (MultipeerConnectivity's `startStream`) and the client's end
/// of it: a Unix stream socket passed with the reply to `peer.open-stream` (the client
/// writes) or `peer.accept-stream` (the client reads). No JSON or base64 per byte.
///
/// Back-pressure both ways, nothing dropped:
/// - opener: a batch read from the client's socket goes to the session's lanes, and the next
///   is read only once it is queued there (`PeerStreamRef.write`'s `done`), so the peer's
///   credit paces the client's writes;
/// - receiver: the peer's bytes go back to its window only once the client's socket took
///   them, so a reader that stops holds the stream's window (256 KiB) and the opener waits.
///
/// Ends: the opener's client closes its socket (a normal end: the receiver's daemon writes
/// every byte to its client, closes the socket, and confirms, and only then the opener hears
/// `normal`; a stream opened with `explicit_finish` needs `peer.finish-stream` too, so a
/// client killed by a signal, whose socket closes like a finished one's, is `cancelled`);
/// either client closes early, or calls `peer.close-stream` (`cancelled`); the receiver
/// declines or nobody accepts within `answerTimeout` (`declined`, `timeout`); the
/// session ends. Each side's owner gets `peer.stream-closed` with the reason; a socket whose
/// stream ended otherwise than normally is closed at once (what it still held is dropped: the
/// event says the stream did not arrive whole).
final class PeerByteStream: Sendable {
    /// The daemon's number for it (`stream` in the control protocol).
    let number: Int
    let ref: PeerStreamRef
    let name: String
    let outgoing: Bool
    /// Outgoing: the socket's end alone does not finish it; `peer.finish-stream` must say so.
    let explicitFinish: Bool
    private let state: Mutex<State>

    private struct State {
        /// The daemon's end of the client's socket (nil until accepted, for an incoming one).
        var channel: Channel?
        /// The control connection that opened or accepted it (its events go there).
        var owner: UInt64?
        /// Incoming bytes not yet taken by the client's socket.
        var pending: [[UInt8]] = []
        var waitingForRoom = false
        /// Incoming: the opener sent every byte.
        var finished = false
        /// The confirmation (or the end) is on its way: nothing more is written.
        var closing = false
        var ended = false
        /// Outgoing: the end of the client's socket was read (every byte it wrote is sent).
        var writerClosed = false
        /// Outgoing, `explicitFinish`: the client said the stream is complete.
        var finishRequested = false
    }

    init(number: Int, ref: PeerStreamRef, name: String, outgoing: Bool, explicitFinish: Bool = false, owner: UInt64?) {
        self.number = number
        self.ref = ref
        self.name = name
        self.outgoing = outgoing
        self.explicitFinish = explicitFinish
        state = Mutex(State(owner: owner))
    }

    /// Whether a client has its socket (an outgoing one always has).
    var isAccepted: Bool { state.withLock { $0.channel != nil } }

    /// Who gets its events: its owner, or everyone (nil) before one accepts it.
    var owner: UInt64? { state.withLock { $0.owner } }

    // MARK: Opener: client → peer

    /// Reads the client's socket `fd` (ours; the stream owns it) into the stream.
    func startWriting(from fd: Int32) {
        let channel = Channel(fd: fd, mode: .stream, label: "byte-stream.\(number)", outboxLimit: 1, readLimit: Wire.maxPayload, batchLimit: 4)
        // The stream may have ended already (declined, or its session gone, before the reply).
        let ended = state.withLock { s -> Bool in
            if !s.ended { s.channel = channel }
            return s.ended
        }
        if ended {
            channel.close()
            return
        }
        channel.start(onInput: { [weak self] chunks in self?.send(chunks, channel) },
                      onEnd: { [weak self] end in self?.writerEnded(end) })
    }

    private func send(_ chunks: [[UInt8]], _ channel: Channel) {
        channel.pauseReading()
        // false: the stream ended; its `ended` closes the socket and says why.
        ref.write(chunks) { queued in if queued { channel.resumeReading() } }
    }

    private func writerEnded(_ end: Channel.End) {
        switch end {
        case .peerClosed:
            let finish = state.withLock { s -> Bool in
                s.writerClosed = true
                return !explicitFinish || s.finishRequested
            }
            if finish { ref.finish() }
        case .failed(let e): ref.close(reason: .cancelled, detail: "reading the client's socket failed: \(e)")
        }
    }

    /// `peer.finish-stream`: the client wrote everything; the stream finishes once the end of
    /// its socket is read (at once if it was). The order of the two does not matter: the
    /// request may overtake bytes still in the socket.
    func requestFinish() {
        let finish = state.withLock { s -> Bool in
            guard !s.finishRequested else { return false }
            s.finishRequested = true
            return s.writerClosed
        }
        if finish { ref.finish() }
    }

    // MARK: Receiver: peer → client

    /// A client takes the stream: its bytes go to the socket `fd` (ours; the stream owns it),
    /// those that arrived meanwhile first. False when it was taken or has ended.
    func accept(into fd: Int32, owner: UInt64) -> Bool {
        // One chunk at most waits here beyond the socket: credit goes back about as the reader reads.
        let channel = Channel(fd: fd, mode: .stream, label: "byte-stream.\(number)", outboxLimit: Wire.maxPayload)
        let taken = state.withLock { s -> Bool in
            guard s.channel == nil, !s.ended, !s.closing else { return false }
            s.channel = channel
            s.owner = owner
            return true
        }
        guard taken else {
            channel.close()
            return false
        }
        // The client only reads: the end of its socket is its close (anything it writes is
        // ignored).
        channel.start(onInput: { _ in }, onEnd: { [weak self] _ in
            self?.ref.close(reason: .cancelled, detail: "the reading client closed its socket")
        })
        writePending()
        return true
    }

    /// Bytes from the peer, in order (on the connection's queue).
    func received(_ bytes: [UInt8]) {
        let write = state.withLock { s -> Bool in
            guard !s.ended, !s.closing else { return false }
            s.pending.append(bytes)
            return s.channel != nil && !s.waitingForRoom
        }
        if write { writePending() }
    }

    /// The opener sent every byte: once the client's socket has them all, it is closed and
    /// the opener told.
    func finished() {
        state.withLock { $0.finished = true }
        writePending()
    }

    /// Moves pending bytes into the client's socket while it takes them, returning each to
    /// the peer's window; when the opener has finished and nothing is left, ends normally.
    private func writePending() {
        let (taken, channel, wait, done) = state.withLock { s -> (Int, Channel?, Bool, Bool) in
            guard let channel = s.channel, !s.ended, !s.closing, !s.waitingForRoom else { return (0, nil, false, false) }
            var taken = 0
            while let first = s.pending.first {
                switch channel.send(first) {
                case .accepted:
                    s.pending.removeFirst()
                    taken += first.count
                case .full:
                    s.waitingForRoom = true
                    return (taken, channel, true, false)
                case .closed:
                    return (taken, nil, false, false)
                }
            }
            guard s.finished else { return (taken, channel, false, false) }
            s.closing = true
            return (taken, channel, false, true)
        }
        if taken > 0 { ref.consumed(taken) }
        guard let channel else { return }
        if wait {
            // Once the outbox is empty, which takes any chunk. (Not `whenRoom`: a chunk larger
            // than the room left is refused while there is some room, and `whenRoom` would
            // call back at once, again and again, on this thread.) May run at once, on this
            // thread: not under the lock.
            channel.whenFlushed { [weak self] in
                guard let self else { return }
                self.state.withLock { $0.waitingForRoom = false }
                self.writePending()
            }
        }
        if done {
            // Also called when the channel closed first (the reader's socket failed): then
            // not every byte reached it, and the opener must not hear `normal`.
            channel.whenFlushed { [ref] in
                if channel.close() {
                    ref.close(reason: .normal, detail: "every byte was written to the client")
                } else {
                    ref.close(reason: .cancelled, detail: "the reading client's socket closed before every byte was written")
                }
            }
        }
    }

    // MARK: Both

    /// The stream ended (the node's `ended`): the client's socket closes at once (after a
    /// normal end it was closed already, flushed). True the first time.
    func ended() -> Bool {
        let (first, channel) = state.withLock { s -> (Bool, Channel?) in
            if s.ended { return (false, nil) }
            s.ended = true
            s.pending = []
            return (true, s.channel)
        }
        channel?.close()
        return first
    }
}

/// The byte streams by number, and where the node's stream events go.
final class PeerByteStreams: Sendable {
    /// How long an incoming stream waits for `peer.accept-stream` before it is declined
    /// with `timeout` (its bytes wait meanwhile, up to the stream's window).
    static let answerTimeout: Duration = .seconds(30)

    private struct State {
        var next = 1
        var byNumber: [Int: PeerByteStream] = [:]
        var byRef: [PeerStreamRef: Int] = [:]
    }

    private let state = Mutex(State())

    /// Every stream, by number.
    var all: [PeerByteStream] { state.withLock { s in s.byNumber.keys.sorted().compactMap { s.byNumber[$0] } } }

    func stream(_ number: Int) -> PeerByteStream? { state.withLock { $0.byNumber[number] } }

    private func stream(_ ref: PeerStreamRef) -> PeerByteStream? { state.withLock { s in s.byRef[ref].flatMap { s.byNumber[$0] } } }

    /// Registers a stream under the next number.
    private func add(_ ref: PeerStreamRef, name: String, outgoing: Bool, explicitFinish: Bool = false, owner: UInt64?) -> PeerByteStream {
        state.withLock { s in
            defer { s.next += 1 }
            let stream = PeerByteStream(number: s.next, ref: ref, name: name, outgoing: outgoing, explicitFinish: explicitFinish, owner: owner)
            s.byNumber[s.next] = stream
            s.byRef[ref] = s.next
            return stream
        }
    }

    private func remove(_ stream: PeerByteStream) {
        state.withLock { s in
            s.byNumber[stream.number] = nil
            s.byRef[stream.ref] = nil
        }
    }

    /// Opens a stream to `peer` for the client of `rc`, whose socket goes with the reply.
    func open(peer: PeerID, name: String, explicitFinish: Bool, node: PeerNode, _ rc: RequestContext) throws(RPCError) -> PeerByteStream {
        let ours: Int32, theirs: Int32
        do {
            (ours, theirs) = try DescriptorPassing.streamPair()
        } catch {
            throw .internalError("cannot make the stream's socket pair: \(error)")
        }
        let box = Mutex<PeerByteStream?>(nil)
        do {
            // Registered before STREAM_OPEN can go: the peer's answer finds it.
            _ = try node.openStream(to: peer, name: name) { ref in
                box.withLock { $0 = self.add(ref, name: name, outgoing: true, explicitFinish: explicitFinish, owner: rc.clientID) }
            }
        } catch {
            closeQuietly(ours)
            closeQuietly(theirs)
            throw error.rpcError
        }
        guard let stream = box.withLock({ $0 }) else { throw .internalError("the stream was opened but not registered") }
        stream.startWriting(from: ours)
        rc.onConnectionClose(while: isOpen(stream)) { [weak stream] in stream?.ref.close(reason: .cancelled, detail: "the opening client's control connection closed") }
        rc.passWithReply(theirs)
        return stream
    }

    /// The client of `rc` takes incoming stream `number`; its socket goes with the reply.
    func accept(_ number: Int, _ rc: RequestContext) throws(RPCError) -> PeerByteStream {
        let stream = try incoming(number, unaccepted: true)
        let ours: Int32, theirs: Int32
        do {
            (ours, theirs) = try DescriptorPassing.streamPair()
        } catch {
            throw .internalError("cannot make the stream's socket pair: \(error)")
        }
        guard stream.accept(into: ours, owner: rc.clientID) else {
            closeQuietly(theirs)
            throw Self.invalidState("stream \(number) was accepted by another client, or has ended")
        }
        rc.onConnectionClose(while: isOpen(stream)) { [weak stream] in stream?.ref.close(reason: .cancelled, detail: "the reading client's control connection closed") }
        rc.passWithReply(theirs)
        return stream
    }

    /// Whether `stream` is still in the table (for its client's close handler).
    private func isOpen(_ stream: PeerByteStream) -> @Sendable () -> Bool {
        { [weak self, weak stream] in
            guard let self, let stream else { return false }
            return self.stream(stream.number) === stream
        }
    }

    /// Stream `number`, either way, or the control protocol's not-found error.
    func existing(_ number: Int) throws(RPCError) -> PeerByteStream {
        guard let stream = stream(number) else {
            throw RPCError(code: RPCErrorCode.notFound, message: "no stream \(number)", data: ["kind": "not-found", "what": "stream", "id": .int(Int64(number))])
        }
        return stream
    }

    /// Incoming stream `number` (not yet accepted, when `unaccepted`).
    func incoming(_ number: Int, unaccepted: Bool) throws(RPCError) -> PeerByteStream {
        let stream = try existing(number)
        guard !stream.outgoing else { throw .invalidParams("stream", "stream \(number) is one this board opened (it writes)") }
        if unaccepted, stream.isAccepted { throw Self.invalidState("stream \(number) has been accepted already") }
        return stream
    }

    private static func invalidState(_ text: String) -> RPCError {
        RPCError(code: RPCErrorCode.invalidState, message: text, data: ["kind": "invalid-state"])
    }

    /// A stream event from the node (on the stream's connection queue, in order); `report`
    /// publishes (owner nil) or sends an event.
    func handle(_ e: StreamEvent, report: @escaping @Sendable (_ topic: String, _ stream: PeerByteStream, _ extra: [String: JSONValue]) -> Void) {
        switch e {
        case .opened(let ref, let name):
            let stream = add(ref, name: name, outgoing: false, owner: nil)
            report(ControlEvent.peerStreamOpened, stream, [:])
            DispatchQueue.global().asyncAfter(deadline: .now() + Self.answerTimeout.dispatchInterval) {
                if !stream.isAccepted { ref.close(reason: .timeout, detail: "no client accepted it within \(Self.answerTimeout)") }
            }
        case .data(let ref, let bytes):
            stream(ref)?.received(bytes)
        case .finished(let ref):
            stream(ref)?.finished()
        case .ended(let ref, _, let reason, let detail, let byPeer, let bytes):
            guard let stream = stream(ref) else { return }
            remove(stream)
            guard stream.ended() else { return }
            report(ControlEvent.peerStreamClosed, stream, ["reason": .string(reason.description), "detail": .string(detail),
                                                            "by_peer": .bool(byPeer), "bytes": .int(Int64(clamping: bytes))])
        }
    }
}

extension PeerCapability {
    /// `peer.open-stream`, `peer.accept-stream`, `peer.decline-stream`, `peer.close-stream`,
    /// `peer.finish-stream` and `peer.streams`; the events `peer.stream-opened` (to every subscriber) and
    /// `peer.stream-closed` (to the stream's client, or every subscriber before one took it).
    func registerByteStreams(_ context: DaemonContext, node: PeerNode) {
        context.register(ControlMethod.peerOpenStream) { [byteStreams] p, rc throws(RPCError) in
            try p.rejectUnknown(allowed: ["peer", "name", "explicit_finish"])
            let peer = try Self.peer(p, "peer", among: node.knownPeers)
            let name = try p.string("name")
            let explicitFinish = try p.optionalBool("explicit_finish") ?? false
            let stream = try byteStreams.open(peer: peer, name: name, explicitFinish: explicitFinish, node: node, rc)
            var o = Self.json(stream)
            o["fd"] = true
            return .object(o)
        }
        context.register(ControlMethod.peerAcceptStream) { [byteStreams] p, rc throws(RPCError) in
            try p.rejectUnknown(allowed: ["stream"])
            let stream = try byteStreams.accept(Int(try p.int("stream", in: 1...Int64(Int32.max))), rc)
            var o = Self.json(stream)
            o["fd"] = true
            return .object(o)
        }
        context.register(ControlMethod.peerDeclineStream) { [byteStreams] p, _ throws(RPCError) in
            try p.rejectUnknown(allowed: ["stream"])
            let stream = try byteStreams.incoming(Int(try p.int("stream", in: 1...Int64(Int32.max))), unaccepted: true)
            stream.ref.close(reason: .declined, detail: "declined by a client")
            return ["stream": .int(Int64(stream.number)), "declined": true]
        }
        context.register(ControlMethod.peerCloseStream) { [byteStreams] p, _ throws(RPCError) in
            try p.rejectUnknown(allowed: ["stream"])
            let number = Int(try p.int("stream", in: 1...Int64(Int32.max)))
            let stream = try byteStreams.existing(number)
            stream.ref.close(reason: .cancelled, detail: "cancelled by a client")
            return ["stream": .int(Int64(number)), "cancelled": true]
        }
        context.register(ControlMethod.peerFinishStream) { [byteStreams] p, _ throws(RPCError) in
            try p.rejectUnknown(allowed: ["stream"])
            let number = Int(try p.int("stream", in: 1...Int64(Int32.max)))
            let stream = try byteStreams.existing(number)
            guard stream.outgoing, stream.explicitFinish else {
                throw .invalidParams("stream", "stream \(number) was not opened here with explicit_finish: \(stream.outgoing ? "closing its socket ends it" : "its peer ends it")")
            }
            stream.requestFinish()
            return ["stream": .int(Int64(number)), "finishing": true]
        }
        context.register(ControlMethod.peerStreams) { [byteStreams] p, _ throws(RPCError) in
            try p.rejectUnknown(allowed: [])
            return ["streams": .array(byteStreams.all.map { .object(Self.json($0)) })]
        }
    }

    /// What a stream event reports (`report` of `PeerByteStreams.handle`).
    func reportByteStream(_ context: DaemonContext, _ topic: String, _ stream: PeerByteStream, _ extra: [String: JSONValue]) {
        var o = Self.json(stream)
        o.merge(extra) { $1 }
        if let owner = stream.owner {
            _ = context.send(topic: topic, data: .object(o), to: owner)
        } else {
            context.publish(topic: topic, data: .object(o))
        }
    }

    static func json(_ s: PeerByteStream) -> [String: JSONValue] {
        var o = json(s.ref.peer)
        o["stream"] = .int(Int64(s.number))
        o["name"] = .string(s.name)
        o["direction"] = .string(s.outgoing ? "out" : "in")
        o["accepted"] = .bool(s.isAccepted)
        return o
    }
}
