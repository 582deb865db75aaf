import Control
import FoundationEssentials
import Peer
import Session
import Synchronization
import SystemKit

/// A data stream of messages with one peer (`peer.message-stream`): a packet socket whose
/// other end goes to the client with the reply. Each packet the client writes is one reliable
/// message to the peer; each reliable message from the peer is one packet written to the
/// client. No JSON or base64 per message.
///
/// Back-pressure both ways, nothing dropped:
/// - client → peer: while the session's queue is full the stream stops reading the socket
///   (a batch is sent, waiting for room, before the next is read), so the client's writes
///   block;
/// - peer → client: when the client does not read, the messages that still arrive wait here
///   and the stream holds the session's message credit (`PeerNode.holdMessages`), so the
///   peer's window runs out and its own sends queue, then wait or fail `busy`. The session
///   stays alive meanwhile (only credit is held; the transport is still read).
///
/// A message is at most `maxMessage` bytes: the largest packet the socket carries (Linux
/// caps packets at the socket's send buffer, itself capped by `net.core.wmem_max`), at most
/// 16 MiB. A message from the peer larger than that ends the stream (`too-large`); it and
/// every later message go to `peer.message` events, as without a stream.
final class PeerMessageStream: Sendable {
    /// Why a stream ended.
    enum End: Sendable, Equatable {
        /// The client closed its end of the socket.
        case closed
        /// The control connection that opened it closed, or the daemon stops.
        case stopped
        /// The session with the peer ended (its reason); the client reads what was received
        /// before, then the end of the socket.
        case sessionEnded(String)
        /// A message did not fit in one packet of the socket: which way, its size, the limit.
        case tooLarge(String)
        /// Reading or writing the socket failed (the error).
        case failed(String)

        var name: String {
            switch self {
            case .closed: "closed"
            case .stopped: "stopped"
            case .sessionEnded: "session-ended"
            case .tooLarge: "too-large"
            case .failed: "failed"
            }
        }

        var message: String {
            switch self {
            case .closed: "the client closed the stream"
            case .stopped: "the stream was stopped (its control connection closed, or the daemon stops)"
            case .sessionEnded(let reason): "the session ended (\(reason))"
            case .tooLarge(let why): why
            case .failed(let error): "the stream's socket failed: \(error)"
            }
        }
    }

    /// Messages sent to the peer (packets read) and written to the client.
    struct Counts: Sendable, Equatable {
        var sent = 0
        var received = 0
    }

    /// The buffers asked for each end: 2 MiB each, doubled by the kernel, carry a packet of
    /// 4 MiB less 32 bytes where `wmem_max` allows (the default 208 KiB gives about 416 KiB).
    static let requestedBuffer = 2 * 1_048_576

    let id: String
    let peer: PeerID
    let maxMessage: Int
    private let node: PeerNode
    private let channel: Channel
    private let handOn: @Sendable ([[UInt8]]) -> Void
    private let onEnd: @Sendable (PeerMessageStream, End, Counts, _ unwritten: Int) -> Void
    private let state = Mutex(State())
    /// The flag of the session the last batch went to (`PeerConnection.readsInline`): its
    /// batches are written, and the session's resources refilled, under that session's lock,
    /// so they are read inline only while the session's own reads are. A lock of its own that
    /// is never held while another is taken: the reactor asks it under a watch's lock.
    private let session = SessionFlag()

    private final class SessionFlag: Sendable {
        let current = Mutex<PeerConnection.InlineReads?>(nil)
    }

    private struct State {
        /// Messages from the peer the socket had no room for, in order.
        var pending: [[UInt8]] = []
        /// The session's message credit is held (`pending` is not empty).
        var holding = false
        var waitingForRoom = false
        /// The session ended: the socket closes once `pending` is written.
        var closeWhenWritten = false
        var ended = false
        var counts = Counts()
        /// A batch is being handed to the session (its `send` has not returned).
        var sending = false
        /// The session's end, reported once the batch being sent is counted.
        var endAfterSend: (end: End, unwritten: Int)?
    }

    /// Starts the stream on `fd` (our end; the stream owns it). When it ends, `handOn` gets
    /// the messages from the peer it had not written (to publish as events: it runs under the
    /// stream's lock, so a message arriving meanwhile is published after them), then `onEnd`
    /// runs once with how many there were.
    init(id: String, fd: Int32, peer: PeerID, node: PeerNode, handOn: @escaping @Sendable ([[UInt8]]) -> Void,
         onEnd: @escaping @Sendable (PeerMessageStream, End, Counts, Int) -> Void) {
        self.id = id
        self.peer = peer
        self.node = node
        self.handOn = handOn
        self.onEnd = onEnd
        maxMessage = min(Wire.maxMessage, DescriptorPassing.largestPacket(fd))
        // One packet waits in the outbox at most: the rest wait in `pending`, where they
        // count for holding credit. Reads are as large as a message plus one byte, so a
        // packet too large for a message is seen whole-sized (MSG_TRUNC) and refused.
        // Reads inline (no hand-off to a worker: a message's way through the daemon is a
        // wakeup shorter) while the session's are (`session`): a batch is queued on the
        // session without waiting (a busy session gets a task), so the reactor is held for at
        // most 64 KiB of packets (or one larger one) encrypted and written. Not before the
        // first batch has shown which session that is.
        let session = self.session
        channel = Channel(fd: fd, mode: .packet, label: "peer-stream.\(id)", outboxLimit: 1,
                          readLimit: maxMessage + 1, batchLimit: 16,
                          readsInline: { session.current.withLock { $0?.allowed ?? false } })
        channel.start(onInput: { [weak self] batch in self?.send(batch) },
                      onEnd: { [weak self] end in
                          switch end {
                          case .peerClosed: self?.finish(.closed)
                          case .failed(let e): self?.finish(.failed("\(e)"))
                          }
                      })
        // `stop()` closes the channel, which reports nothing: say so here.
        channel.whenDescriptorClosed { [weak self] in self?.finish(.stopped) }
    }

    // MARK: Client → peer

    /// One batch of packets, queued together, so small messages share TLS records and writes.
    /// Queued here, on the channel's queue, when the session takes it all now (the usual case:
    /// no hop to a task, and reading goes on); otherwise reading waits (back-pressure) while a
    /// task sends the rest, waiting for room, before the next batch is read.
    private func send(_ batch: [[UInt8]]) {
        let fitting = batch.prefix { $0.count <= maxMessage }
        // Once the stream has ended (its end reported), nothing more goes: not to a session
        // the peer has meanwhile made again either. Reading pauses at the end; a batch read
        // just before is dropped here.
        guard state.withLock({ s in
            if s.ended { return false }
            s.sending = true
            return true
        }) else { return }
        // Counted as the session queues them: a message can reach the peer (and the session
        // end) before the send returns.
        let count: @Sendable (Int) -> Void = { n in self.state.withLock { $0.counts.sent += n } }
        let first: (queued: Int, session: PeerConnection)
        do {
            first = try node.sendNow(messages: fitting, to: peer, onQueued: count)
            session.current.withLock { $0 = first.session.readsInline }
        } catch {
            return sent(batch, fitting.count, failure: error)
        }
        if first.queued == fitting.count { return sent(batch, fitting.count, failure: nil) }
        channel.pauseReading()
        Task {
            var failure: (any Error)?
            do {
                // The rest on the same session: never part of a batch on one the peer made again.
                try await node.send(fitting.dropFirst(first.queued), on: first.session, to: peer, onQueued: count)
            } catch {
                failure = error
            }
            sent(batch, fitting.count, failure: failure)
            // Not after the end: the socket only waits to be flushed and closed. Under the
            // lock `finish` marks the end with, so an end between the check and the resume
            // cannot be undone by it (finish's pause would find reading paused already).
            state.withLock { s in if !s.ended { channel.resumeReading() } }
        }
    }

    /// A batch's send is over (its first `fitting` packets queued, unless it failed): the end
    /// the session reported meanwhile, then the stream's own end if the send failed or a
    /// packet was too large.
    private func sent(_ batch: [[UInt8]], _ fitting: Int, failure: (any Error)?) {
        let endNow = state.withLock { s -> (End, Counts, Int)? in
            s.sending = false
            guard let (end, unwritten) = s.endAfterSend else { return nil }
            s.endAfterSend = nil
            return (end, s.counts, unwritten)
        }
        if let (end, counts, unwritten) = endNow { onEnd(self, end, counts, unwritten) }
        if let failure { return finish(.sessionEnded("\(failure)")) }
        if fitting < batch.count {
            finish(.tooLarge("the client wrote a packet of \(batch[fitting].count) bytes; a message on this stream is at most \(maxMessage)"))
        }
    }

    // MARK: Peer → client

    /// Reliable messages from the peer (on its connection's queue, in order): how many the
    /// stream took, from the first; the rest go to events (the stream has ended, or ends at
    /// a message too large for it). What the socket has room for goes in a few calls (runs
    /// of `sendmmsg`), the rest one by one (waiting in `pending` once the socket is full).
    func deliver(_ messages: [[UInt8]]) -> Int {
        var taken = 0
        if messages.count > 1 {
            let fitting = messages.firstIndex { $0.count > maxMessage } ?? messages.count
            taken = state.withLock { s -> Int in
                guard !s.ended, !s.closeWhenWritten, s.pending.isEmpty else { return 0 }
                let n = channel.sendLeading(messages[..<fitting])
                s.counts.received += n
                return n
            }
        }
        for m in messages[taken...] {
            guard deliver(m) else { break }
            taken += 1
        }
        return taken
    }

    /// A reliable message from the peer (on its connection's queue, in order): true when the
    /// stream took it; false when it must go to events (the stream has ended, or ends now
    /// because the message is too large for it).
    func deliver(_ message: [UInt8]) -> Bool {
        guard message.count <= maxMessage else {
            finish(.tooLarge("a message of \(message.count) bytes arrived; this stream carries at most \(maxMessage) (it and later messages go to peer.message events)"))
            return false
        }
        let (taken, wait) = state.withLock { s -> (Bool, Bool) in
            if s.ended || s.closeWhenWritten { return (false, false) }
            if s.pending.isEmpty {
                switch channel.send(message) {
                case .accepted:
                    s.counts.received += 1
                    return (true, false)
                case .closed:
                    return (false, false)
                case .full:
                    break
                }
            }
            s.pending.append(message)
            // Under the lock, so a hold and its release reach the session in order.
            if !s.holding {
                s.holding = true
                node.holdMessages(from: peer, true)
            }
            defer { s.waitingForRoom = true }
            return (true, !s.waitingForRoom)
        }
        if wait { waitForRoom() }
        return taken
    }

    private func waitForRoom() {
        // May run the handler at once, on this thread: not under the lock.
        channel.whenRoom { [weak self] open in self?.writePending(open) }
    }

    private func writePending(_ open: Bool) {
        let again = state.withLock { s -> Bool in
            s.waitingForRoom = false
            guard open, !s.ended || s.closeWhenWritten else { return false }
            while let m = s.pending.first {
                switch channel.send(m) {
                case .accepted:
                    s.pending.removeFirst()
                    s.counts.received += 1
                case .full:
                    s.waitingForRoom = true
                    return true
                case .closed:
                    return false
                }
            }
            if s.holding {
                s.holding = false
                node.holdMessages(from: peer, false)
            }
            if s.closeWhenWritten { closeWhenFlushed() }
            return false
        }
        if again { waitForRoom() }
    }

    private func closeWhenFlushed() {
        let channel = self.channel
        channel.whenFlushed { channel.close() }
    }

    // MARK: Ending

    /// The session ended: the client reads what arrived before, then the end of the socket.
    func sessionEnded(_ reason: String) { finish(.sessionEnded(reason)) }

    /// Ends the stream (the client sees the end of its socket at once).
    func stop() { channel.close() }

    private func finish(_ end: End) {
        // nil: ended before; `.some(nil)`: ended now, reported when the batch being sent is
        // counted; otherwise what to report now.
        let report = state.withLock { s -> (Counts, Int)?? in
            if s.ended { return nil }
            s.ended = true
            if s.holding {
                // The session is unaffected by the stream: what was held is returned.
                s.holding = false
                node.holdMessages(from: peer, false)
            }
            var unwritten = 0
            if case .sessionEnded = end {
                s.closeWhenWritten = true
                if s.pending.isEmpty { closeWhenFlushed() }
            } else {
                let messages = s.pending
                s.pending = []
                if !messages.isEmpty { handOn(messages) }
                unwritten = messages.count
            }
            // A batch being handed to the session is counted when its send returns (at once
            // when the session has ended): the report waits for that count.
            if s.sending {
                s.endAfterSend = (end, unwritten)
                return .some(nil)
            }
            return (s.counts, unwritten)
        }
        guard let report else { return }
        // Ended by the session: the socket stays until the peer's last messages are written
        // to it, but nothing more is read from it.
        if case .sessionEnded = end { channel.pauseReading() } else { channel.close() }
        if let (counts, unwritten) = report { onEnd(self, end, counts, unwritten) }
    }
}

/// The open message streams, one per peer at most, and where a peer's messages go.
final class PeerMessageStreams: Sendable {
    private let streams = Mutex<[PeerID: PeerMessageStream]>([:])
    /// Peers whose stream is being opened (a second open for them is refused meanwhile).
    private let opening = Mutex<Set<PeerID>>([])
    private let nextID = Mutex(1)

    /// Opens a stream with `peer` for the client of `rc`; returns the result to answer with.
    func open(peer: PeerID, node: PeerNode, _ rc: RequestContext, handOn: @escaping @Sendable ([[UInt8]]) -> Void,
              onEnd: @escaping @Sendable (PeerMessageStream, PeerMessageStream.End, PeerMessageStream.Counts, Int) -> Void) throws(RPCError) -> PeerMessageStream {
        guard node.sessions.contains(where: { $0.peer == peer }) else { throw PeerError.notConnected(peer.shortText).rpcError }
        let taken = streams.withLock { $0[peer] != nil } || !opening.withLock { $0.insert(peer).inserted }
        if taken {
            throw RPCError(code: RPCErrorCode.busy, message: "a message stream with peer \(peer.shortText) is already open",
                           data: ["kind": "stream-open", "peer": .string(peer.hex)])
        }
        defer { opening.withLock { _ = $0.remove(peer) } }
        let ours: Int32, theirs: Int32
        do {
            (ours, theirs) = try DescriptorPassing.packetPair(bufferBytes: PeerMessageStream.requestedBuffer)
        } catch {
            throw .internalError("cannot make the stream's socket pair: \(error)")
        }
        let id = nextID.withLock { n -> String in defer { n += 1 }; return "peer-stream\(n)" }
        let stream = PeerMessageStream(id: id, fd: ours, peer: peer, node: node, handOn: handOn) { [weak self] stream, end, counts, unwritten in
            self?.streams.withLock { s in if s[peer] === stream { s[peer] = nil } }
            onEnd(stream, end, counts, unwritten)
        }
        streams.withLock { $0[peer] = stream }
        // The session may have ended between the check above and now: its end was not seen.
        if !node.sessions.contains(where: { $0.peer == peer }) { stream.sessionEnded("the session ended while the stream opened") }
        rc.onConnectionClose(while: { [weak self, weak stream] in
            guard let self, let stream else { return false }
            return self.streams.withLock { $0[peer] === stream }
        }) { [weak stream] in stream?.stop() }
        rc.passWithReply(theirs)
        return stream
    }

    /// Reliable messages from `peer`, in order: how many its stream took, from the first
    /// (no event for those).
    func deliver(_ messages: [[UInt8]], from peer: PeerID) -> Int {
        guard let stream = streams.withLock({ $0[peer] }) else { return 0 }
        return stream.deliver(messages)
    }

    /// `peer`'s session ended: so does its stream.
    func sessionEnded(_ peer: PeerID, reason: String) {
        streams.withLock { $0[peer] }?.sessionEnded(reason)
    }
}

extension PeerCapability {
    /// `peer.message-stream {peer}` → `{"stream", "peer", ..., "fd": true, "max_message"}` and
    /// the socket with the reply; `peer.stream-ended` to the opening connection at the end.
    func registerMessageStream(_ context: DaemonContext, node: PeerNode) {
        context.register(ControlMethod.peerMessageStream) { [streams] p, rc throws(RPCError) in
            try p.rejectUnknown(allowed: ["peer"])
            let peer = try Self.peer(p, "peer", among: node.knownPeers)
            let owner = rc.clientID
            let logger = context.logger.child("peer")
            let stream = try streams.open(peer: peer, node: node, rc, handOn: { messages in
                // Not written to the client: they become events, as without a stream.
                for m in messages { context.publish(topic: ControlEvent.peerMessage, data: Self.messageEvent(from: peer, m, reliable: true)) }
            }, onEnd: { stream, end, counts, unwritten in
                let fields: [String: String] = ["peer.id": peer.shortText, "stream": stream.id, "reason": end.name, "why": end.message,
                                                "sent": "\(counts.sent)", "received": "\(counts.received)", "unwritten": "\(unwritten)"]
                switch end {
                case .closed, .stopped, .sessionEnded: logger.debug("message stream ended", fields)
                case .tooLarge, .failed: logger.notice("message stream ended", fields)
                }
                var o = Self.json(peer)
                o["stream"] = .string(stream.id)
                o["reason"] = .string(end.name)
                o["message"] = .string(end.message)
                o["sent"] = .int(Int64(counts.sent))
                o["received"] = .int(Int64(counts.received))
                o["unwritten"] = .int(Int64(unwritten))
                _ = context.send(topic: ControlEvent.peerStreamEnded, data: .object(o), to: owner)
            })
            var o = Self.json(peer)
            o["stream"] = .string(stream.id)
            o["fd"] = true
            o["max_message"] = .int(Int64(stream.maxMessage))
            return .object(o)
        }
    }

    /// A `peer.message` event's data.
    static func messageEvent(from peer: PeerID, _ bytes: [UInt8], reliable: Bool) -> JSONValue {
        var o = json(peer)
        o["data_base64"] = .string(Data(bytes).base64EncodedString())
        o["reliable"] = .bool(reliable)
        return .object(o)
    }
}
