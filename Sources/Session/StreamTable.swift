/// The byte streams of one connection (MultipeerConnectivity's `startStream`), both ways, as
/// a state machine without I/O: it checks every STREAM_* frame from the peer, holds the bytes
/// this side's streams are given until the send lanes take them, and builds the frames. The
/// caller (the `Peer` module) moves the bytes between it and the application.
///
/// A stream goes one way, from its opener to the other side, as docs/peer-protocol.md gives it:
///
///     opener                                   receiver
///     STREAM_OPEN id name              →
///     STREAM_DATA id bytes …           →       (at once: no answer is awaited; the stream's
///                                              window bounds what may go unread)
///     STREAM_CLOSE id normal           →       (after the last byte)
///                                      ←  STREAM_CLOSE id normal   (every byte was handed
///                                                                   to the application)
///     either side, at any time:  STREAM_CLOSE id reason (declined, cancelled, busy, …): ended
///
/// A peer that breaks the rules for one stream (data on a stream this side sends, data after
/// its close, a close of a stream never opened) loses that stream, with a `.violation` event
/// and a STREAM_CLOSE (`protocol-error`) to send; the session goes on. Frames for a stream
/// that has ended are ignored: they may have crossed its close on the wire. Ids come from the
/// connection's one space for resources and streams (`ResourceTable.reserveID` and
/// `claimPeerID`), checked by the caller before `open` or a STREAM_OPEN reaches the table.
public struct StreamTable: Sendable {
    /// One stream as the table knows it.
    public struct Stream: Sendable, Hashable {
        /// Its id on the connection.
        public let id: UInt32
        /// The name the opener gave it.
        public let name: String
        /// Whether this side opened it (and sends).
        public let outgoing: Bool
        /// Where it is.
        public fileprivate(set) var phase: Phase = .open
        /// Bytes handed to the lanes (outgoing) or received (incoming).
        public fileprivate(set) var bytes: UInt64 = 0
    }

    /// A stream's phase.
    public enum Phase: Sendable, Hashable {
        /// Bytes flow.
        case open
        /// Outgoing: the application ended it; its STREAM_CLOSE goes after the pending bytes.
        case finishing
        /// Outgoing: every byte and the normal close went to the lanes; the receiver's close
        /// says whether it took them all. Incoming: the opener sent its normal close; this
        /// side answers with its own once the application has every byte.
        case closing
    }

    /// What a frame from the peer means.
    public enum Event: Sendable, Hashable {
        /// The peer opened a stream to this side.
        case opened(id: UInt32, name: String)
        /// Bytes of an incoming stream, in order.
        case data(id: UInt32, bytes: [UInt8])
        /// The opener sent every byte of incoming stream `id`: once the application has them
        /// all, `close(id, reason: .normal)` tells the opener so.
        case finished(id: UInt32)
        /// The peer ended stream `id` (either way): `.normal` on an outgoing stream means
        /// the receiver got every byte; any other reason, that it stopped.
        case closed(id: UInt32, reason: Reason)
        /// The peer broke the rules for this stream: it has ended; send `reply`.
        case violation(id: UInt32, why: String, reply: Frame)
        /// A stream was opened while this side had `maxIncoming` incoming streams: send
        /// `reply` (STREAM_CLOSE `busy`); nothing else happens.
        case refused(id: UInt32, reply: Frame)
        /// A frame for a stream that has ended (in flight when it ended): nothing to do.
        case ignored(id: UInt32)
    }

    /// A command that does not fit the stream's state.
    public struct CommandError: Error, Sendable, Hashable, CustomStringConvertible {
        /// What is wrong.
        public let description: String
    }

    /// Incoming streams open at once, at most: each may hold its window (256 KiB) of the
    /// connection's (1.25 MiB once connected) while its reader is slow, so two and messages
    /// held for a slow reader (512 KiB) leave resources 256 KiB. A third STREAM_OPEN is
    /// answered `busy`.
    public static let defaultMaxIncoming = 2

    /// The streams in progress, by id.
    public private(set) var streams: [UInt32: Stream] = [:]
    /// Ids that have ended: a late frame for one is ignored (kept as runs).
    private(set) var ended = UsedIDs()
    /// Bytes of outgoing streams not yet in the lanes, in frame-sized chunks.
    private var pending: [UInt32: [[UInt8]]] = [:]
    private let maxIncoming: Int

    public init(maxIncoming: Int = StreamTable.defaultMaxIncoming) {
        self.maxIncoming = maxIncoming
    }

    /// Whether no stream is in progress.
    public var isEmpty: Bool { streams.isEmpty }

    // MARK: Commands

    /// Opens a stream this side sends on, with an id from the connection's id space: the
    /// STREAM_OPEN to send.
    public mutating func open(id: UInt32, name: String) throws(CommandError) -> Frame {
        do { try FrameRules.checkName(name) } catch { throw CommandError(description: "stream name: \(error)") }
        guard streams[id] == nil, !ended.contains(id) else { throw CommandError(description: "stream id \(id) is in use") }
        streams[id] = Stream(id: id, name: name, outgoing: true)
        return .streamOpen(streamID: id, name: name)
    }

    /// Bytes the application gives outgoing stream `id`, after those still pending; false
    /// when the stream does not take bytes (ended, finishing, or not ours).
    public mutating func write(_ id: UInt32, _ bytes: [UInt8]) -> Bool {
        guard let s = streams[id], s.outgoing, s.phase == .open else { return false }
        var offset = 0
        while offset < bytes.count {
            let end = min(offset + Wire.maxPayload, bytes.count)
            pending[id, default: []].append(Array(bytes[offset..<end]))
            offset = end
        }
        return true
    }

    /// Bytes of stream `id` waiting for the lanes.
    public func pendingBytes(_ id: UInt32) -> Int { pending[id]?.reduce(0) { $0 + $1.count } ?? 0 }

    /// The application ended outgoing stream `id`: its normal STREAM_CLOSE goes after the
    /// pending bytes (`refill`). False when it is not an open outgoing stream.
    public mutating func finish(_ id: UInt32) -> Bool {
        guard let s = streams[id], s.outgoing, s.phase == .open else { return false }
        streams[id]?.phase = .finishing
        return true
    }

    /// Ends stream `id` from this side, either way, at once (pending bytes dropped): the
    /// STREAM_CLOSE to send, or nil when it had ended. `.normal` is only the answer to the
    /// opener's close (an incoming stream `finished`): anywhere else it would tell the other
    /// side every byte arrived, so it is sent as `cancelled`. Otherwise give a reason
    /// (`cancelled`, `declined`, …).
    public mutating func close(_ id: UInt32, reason: Reason) -> Frame? {
        guard let s = streams[id] else { return nil }
        end(id)
        let confirms = !s.outgoing && s.phase == .closing
        return .streamClose(streamID: id, reason: reason == .normal && !confirms ? .cancelled : reason)
    }

    /// The connection ended: every stream in progress, for the caller to report.
    public mutating func connectionEnded() -> [Stream] {
        let all = streams.keys.sorted().compactMap { streams[$0] }
        for s in all { end(s.id) }
        return all
    }

    private mutating func end(_ id: UInt32) {
        streams.removeValue(forKey: id)
        pending.removeValue(forKey: id)
        ended.insert(id)
    }

    // MARK: Sending

    /// Moves pending bytes into `scheduler`'s bulk lane while a stream has fewer than
    /// `limit` frames queued and the scheduler takes them; a finishing stream's normal
    /// STREAM_CLOSE follows its last byte. Returns the streams whose pending bytes all went
    /// this time (their application may give more).
    public mutating func refill(_ scheduler: inout SendScheduler, limit: Int) -> [UInt32] {
        var drained: [UInt32] = []
        for id in pending.keys.sorted() + finishingWithNothingPending() {
            guard let s = streams[id], s.outgoing else { continue }
            let had = pending[id]?.isEmpty == false
            while scheduler.queuedFrames(on: id) < limit, let chunk = pending[id]?.first {
                guard scheduler.canAccept(byteCount: Wire.headerSize + chunk.count) else { break }
                _ = scheduler.enqueue(.streamData(streamID: id, data: chunk))
                pending[id]?.removeFirst()
                streams[id]?.bytes += UInt64(chunk.count)
            }
            guard pending[id]?.isEmpty ?? true else { continue }
            pending[id] = nil
            if had { drained.append(id) }
            // The close follows the last byte (the scheduler always takes a frame without data).
            if streams[id]?.phase == .finishing, scheduler.enqueue(.streamClose(streamID: id, reason: .normal)) == .queued {
                streams[id]?.phase = .closing
            }
        }
        return drained
    }

    private func finishingWithNothingPending() -> [UInt32] {
        streams.values.filter { $0.phase == .finishing && pending[$0.id] == nil }.map(\.id).sorted()
    }

    // MARK: Frames from the peer

    /// What a STREAM_* frame from the peer means (a STREAM_OPEN's id already claimed from the
    /// connection's id space). Other frames are not the table's: nil.
    public mutating func received(_ frame: Frame) -> Event? {
        switch frame {
        case .streamOpen(let id, let name):
            if streams[id] != nil || ended.contains(id) { return violation(id, "stream id \(id) reused", known: streams[id] != nil) }
            guard streams.values.filter({ !$0.outgoing }).count < maxIncoming else {
                ended.insert(id)
                return .refused(id: id, reply: .streamClose(streamID: id, reason: .busy))
            }
            streams[id] = Stream(id: id, name: name, outgoing: false)
            return .opened(id: id, name: name)
        case .streamData(let id, let bytes):
            guard let s = streams[id] else { return late(id, frame) }
            guard !s.outgoing else { return violation(id, "STREAM_DATA on stream \(id), which this side sends") }
            guard s.phase == .open else { return violation(id, "STREAM_DATA on stream \(id) after its STREAM_CLOSE") }
            streams[id]?.bytes += UInt64(bytes.count)
            return .data(id: id, bytes: bytes)
        case .streamClose(let id, let reason):
            guard let s = streams[id] else { return late(id, frame) }
            if reason == .normal {
                if !s.outgoing {
                    guard s.phase == .open else { return violation(id, "a second STREAM_CLOSE on stream \(id)") }
                    streams[id]?.phase = .closing
                    return .finished(id: id)
                }
                // The receiver's confirmation comes only after the end it confirms.
                guard s.phase == .closing else { return violation(id, "STREAM_CLOSE normal on stream \(id) before its last byte was sent") }
            }
            end(id)
            return .closed(id: id, reason: reason)
        default:
            return nil
        }
    }

    /// A frame for no stream in progress: late when the id has ended, else made up.
    private mutating func late(_ id: UInt32, _ frame: Frame) -> Event {
        if ended.contains(id) { return .ignored(id: id) }
        return violation(id, "\(frame.type) for stream \(id), which was never opened", known: false)
    }

    /// Ends stream `id` (when `known`: an id the peer made up is not remembered, so a flood
    /// of them costs no memory) and says what to send back.
    private mutating func violation(_ id: UInt32, _ why: String, known: Bool = true) -> Event {
        if known { end(id) }
        return .violation(id: id, why: why, reply: .streamClose(streamID: id, reason: .protocolError))
    }
}
