import Session
import SystemKit

/// What one connection's resources and byte streams report, in order, on the connection's
/// queue.
public enum TransferEvent: Sendable {
    /// The peer offers a resource: answer with `PeerConnection.acceptResource` or
    /// `declineResource`.
    case offered(ResourceOffer)
    /// A resource started moving from `offset` (non-zero: resumed from what the receiver
    /// had verified).
    case started(id: UInt32, outgoing: Bool, offset: UInt64)
    /// Bytes of the resource moved so far (sent or received from its start, `offset`
    /// included): at most every `ConnectionTransfers.progressInterval` per resource.
    case progress(id: UInt32, outgoing: Bool, bytes: UInt64)
    /// Our resource arrived at the peer whole, and the peer verified and saved it.
    case delivered(id: UInt32)
    /// The peer's resource is whole, verified and saved in the inbox.
    case received(id: UInt32, file: ReceivedFile)
    /// A resource ended without arriving: the reason both sides see, what happened, whether
    /// the peer ended it, and how far it got.
    case ended(id: UInt32, outgoing: Bool, reason: Reason, detail: String, byPeer: Bool, bytes: UInt64)
    /// The session ended with the resource in progress: a received part is kept, and the
    /// same resource offered again (by the same peer, with the same hash) resumes from it.
    case interrupted(id: UInt32, outgoing: Bool, bytes: UInt64)
    /// The peer opened byte stream `id` to this side: its bytes follow (`streamData`); the
    /// application takes them (`PeerConnection.consumedStream`) or ends it (`closeStream`).
    case streamOpened(id: UInt32, name: String)
    /// Bytes of incoming stream `id`, in order: give them back to the peer's window
    /// (`consumedStream`) once the application has them.
    case streamData(id: UInt32, bytes: [UInt8])
    /// The opener sent every byte of incoming stream `id`: once the application has them
    /// all, `closeStream(id, reason: .normal)` tells the opener so.
    case streamFinished(id: UInt32)
    /// Stream `id` ended, either way: the reason both sides see (`.normal` on an outgoing
    /// stream: the receiver took every byte), what happened, whether the peer ended it, and
    /// the bytes it moved.
    case streamEnded(id: UInt32, outgoing: Bool, reason: Reason, detail: String, byPeer: Bool, bytes: UInt64)
}

/// The resources and byte streams of one connection, both ways: the `ResourceTable` and the
/// `StreamTable` (the protocol's rules; the first keeps the id space both share) plus the
/// open `OutgoingFile`s read from, the `IncomingFile`s written to, and the applications
/// waiting to give a stream more bytes. Used under the connection's lock; the connection
/// writes the frames this returns, reports the events and wakes the waiters.
///
/// Sending pulls: data is read from the file only when the bulk lane runs low (`refill`),
/// so a resource of any size costs `queuedChunks` chunks of memory, and the session's flow
/// control (the peer's credit, taken by the scheduler) paces the reads.
struct ConnectionTransfers {
    /// What a step asks of the connection.
    struct Outcome {
        /// Frames to queue, in order.
        var frames: [Frame] = []
        /// Flow-controlled bytes used up (their window goes back to the peer).
        var consumed: [(id: UInt32, bytes: Int)] = []
        /// Bytes of streams that ended before the application took them: back to the
        /// connection's window only.
        var released = 0
        /// Resources whose queued bulk frames must go (they ended).
        var dropped: [UInt32] = []
        /// For the application.
        var events: [TransferEvent] = []
        /// Stream writers to call back, outside the lock: true when their bytes are all in
        /// the lanes, false when the stream ended first.
        var wakeups: [(@Sendable (Bool) -> Void, Bool)] = []
        /// Received resource bytes for their files' writers, in order; the connection reports
        /// each write once done (`written`).
        var writes: [(id: UInt32, writer: IncomingFileWriter, bytes: [UInt8])] = []
        /// Received resources whose last byte came, for their writers to verify and save
        /// after the writes before; the connection reports each once done (`finished`).
        var finishes: [(id: UInt32, writer: IncomingFileWriter)] = []
    }

    /// RESOURCE_DATA's payload: a whole frame (the id is in the header).
    static let chunkSize = Wire.maxPayload
    /// Chunks queued ahead per resource: one stream window's worth (256 KiB).
    static let queuedChunks = FlowWindow.initialStream / chunkSize
    /// How far a received resource's writer may fall behind before its bytes' window is held
    /// back (given back as the writer catches up): while the disk keeps up, the window goes
    /// back as the bytes arrive, as if written at once (the writer's lag would otherwise add
    /// to every round trip of the window); when it does not (a flush on a slow card), the
    /// peer stops, and a resource never holds more than this and its window in memory.
    static let writeAhead = 1 << 20
    /// Progress is reported at most this often per resource.
    static let progressInterval: Duration = .milliseconds(250)

    // The state from here to `streams` (and `merge`, `timedOut`) is internal, not private,
    // only for the extension in ConnectionTransfers+Stalls.swift: nothing else uses it.

    struct Sending {
        let file: OutgoingFile
        var reported: ContinuousClock.Instant
        /// Bytes handed to the scheduler (the table forgets it when the resource ends).
        var handedOut: UInt64 = 0
        var doneQueued = false
        /// Since when nothing moved toward the peer while its data or its verdict waited
        /// (`stalledSending`): the accept, or the last look that found the link moving or
        /// this side the one holding it back.
        var quietSince: ContinuousClock.Instant
    }

    struct Receiving {
        let offer: ResourceOffer
        /// Nil until accepted.
        var file: IncomingFileWriter?
        var reported: ContinuousClock.Instant
        /// Bytes on the part once the writes given so far are done (its offset included).
        var received: UInt64 = 0
        /// Bytes handed to the writer and not written yet.
        var unwritten = 0
        /// Bytes whose window is held back until the writer catches up (`writeAhead`).
        var heldCredit = 0
        /// Since when no data came while the peer could send (`stalled`): the accept, the
        /// last data, or the last look that found the peer without window.
        var quietSince: ContinuousClock.Instant
        /// Every byte came and the writer is verifying and saving the file: nothing ends it
        /// now but its verdict (`finished`), which reports it even after the session ended.
        var finishing = false
    }

    var table: ResourceTable
    var sending: [UInt32: Sending] = [:]
    var receiving: [UInt32: Receiving] = [:]
    private var streams = StreamTable()
    /// Per outgoing stream, the writer whose bytes wait for the lanes (one batch at a time).
    private var streamWriters: [UInt32: @Sendable (Bool) -> Void] = [:]
    /// Per incoming stream, bytes handed to the application and not yet taken: whatever it
    /// does, they go back to the window (taken, or released when the stream ends).
    private var unconsumed: [UInt32: Int] = [:]

    init(role: Role) { table = ResourceTable(role: role) }

    /// Whether no resource or stream is in progress.
    var isEmpty: Bool { sending.isEmpty && receiving.isEmpty && streams.isEmpty }

    /// Whether a resource is offered, sent or received, either way: its file is read on the
    /// connection's queue (a refill's reads), and what ends it may write the journal.
    var hasResources: Bool { !sending.isEmpty || !receiving.isEmpty }

    /// Whether resource or stream `id` is in progress.
    func isLive(_ id: UInt32) -> Bool { table.transfers[id] != nil || streams.streams[id] != nil }

    // MARK: Commands

    /// Offers `file` under `name`: its id and the RESOURCE_OFFER, or no frame while
    /// `ResourceTable.maxInProgress` resources are on their way to the peer (the offer goes
    /// when one of them ends: `Outcome.frames` of that step).
    mutating func offer(_ file: OutgoingFile, name: String, now: ContinuousClock.Instant) -> (id: UInt32, frame: Frame?) {
        let (id, frame) = table.offer(name: name, size: file.size, sha256: file.sha256, mediaType: file.mediaType)
        sending[id] = Sending(file: file, reported: now, quietSince: now)
        return (id, frame)
    }

    /// The peer's offer `id` while it waits for an answer.
    func pendingOffer(_ id: UInt32) -> ResourceOffer? {
        guard let r = receiving[id], r.file == nil else { return nil }
        return r.offer
    }

    /// Accepts the peer's offer `id` into `file` (opened by the inbox, resuming a part an
    /// earlier transfer of the same content left): RESOURCE_ACCEPT from the part's length.
    /// An offer that ended meanwhile (cancelled, the peer's lie) keeps the part as it is, or
    /// removes it when it holds nothing (it was made for this transfer).
    mutating func accept(_ id: UInt32, file: IncomingFile, now: ContinuousClock.Instant) -> Outcome {
        var out = Outcome()
        guard pendingOffer(id) != nil, let frame = try? table.accept(id, from: file.offset) else {
            if file.offset > 0 { file.suspend() } else { file.discard() }
            return out
        }
        out.frames.append(frame)
        receiving[id]?.file = IncomingFileWriter(file)
        receiving[id]?.received = file.offset
        receiving[id]?.reported = now
        receiving[id]?.quietSince = now
        out.events.append(.started(id: id, outgoing: false, offset: file.offset))
        return out
    }

    /// Declines the peer's offer `id`.
    mutating func decline(_ id: UInt32, reason: Reason, detail: String) -> Outcome {
        var out = Outcome()
        // The table first: an offer it no longer takes a decline for keeps its entry here.
        guard receiving[id] != nil, let frame = try? table.decline(id, reason: reason) else { return out }
        receiving[id] = nil
        out.frames.append(frame)
        out.dropped.append(id)
        out.events.append(.ended(id: id, outgoing: false, reason: reason, detail: detail, byPeer: false, bytes: 0))
        return out
    }

    /// Ends resource `id` from this side, either way (the user cancelled, a file failed).
    mutating func cancel(_ id: UInt32, reason: Reason, detail: String) -> Outcome {
        var out = Outcome()
        // Too late: every byte is here and being saved (its verdict reports it).
        if receiving[id]?.finishing == true { return out }
        if table.isHeld(id) {
            // Never offered: it ends here without a word to the peer.
            _ = table.cancel(id, reason: reason)
        } else {
            guard let frame = table.cancel(id, reason: reason) else { return out }
            out.frames.append(frame)
            out.dropped.append(id)
        }
        if let e = forget(id, reason, detail, byPeer: false, &out) { out.events.append(e) }
        out.frames += table.releaseHeld()
        return out
    }

    /// Forgets resource `id`, either way (a received part is removed, the window held back
    /// for it goes back to the connection), and says how it ended and how far it got; nil
    /// when this side had no such resource, or has every byte of it and is saving it (the
    /// peer's cancel or a late frame crossed this side's verdict, which reports it).
    private mutating func forget(_ id: UInt32, _ reason: Reason, _ detail: String, byPeer: Bool, _ out: inout Outcome) -> TransferEvent? {
        if let s = sending.removeValue(forKey: id) {
            return .ended(id: id, outgoing: true, reason: reason, detail: detail, byPeer: byPeer, bytes: s.handedOut)
        }
        guard receiving[id]?.finishing != true, let r = receiving.removeValue(forKey: id) else { return nil }
        out.released += r.heldCredit
        r.file?.discard()
        return .ended(id: id, outgoing: false, reason: reason, detail: detail, byPeer: byPeer, bytes: r.received)
    }

    /// The connection ended (`reason`, `detail`, `byPeer`: how): received parts are kept for
    /// a resume, every resource in progress is reported interrupted, every stream ended.
    mutating func connectionEnded(_ reason: Reason, _ detail: String, byPeer: Bool) -> Outcome {
        var out = Outcome()
        for t in table.connectionEnded() {
            let id = t.offer.resourceID
            if t.outgoing {
                sending[id] = nil
                out.events.append(.interrupted(id: id, outgoing: true, bytes: t.position))
            } else if let r = receiving[id], !r.finishing {
                // (One being saved stays: its verdict reports it.) Recorded off the lock, after
                // the writes given so far: the part keeps `received`.
                receiving[id] = nil
                r.file?.suspend()
                out.events.append(.interrupted(id: id, outgoing: false, bytes: r.received))
            }
        }
        // Never `normal` for a stream: that says every byte reached the reader.
        let streamReason = reason == .normal ? Reason.cancelled : reason
        for stream in streams.connectionEnded() {
            endStream(stream, streamReason, "the session ended (\(reason)): \(detail)", byPeer: byPeer, &out)
        }
        return out
    }

    // MARK: Streams

    /// Opens a byte stream to the peer: its id and the STREAM_OPEN.
    mutating func openStream(name: String) throws(StreamTable.CommandError) -> (id: UInt32, frame: Frame) {
        let id = table.reserveID()
        return (id, try streams.open(id: id, name: name))
    }

    /// Bytes for outgoing stream `id`, after what is pending; `done` is called (from the
    /// connection, outside its lock) with true once they are all in the lanes, or false when
    /// the stream ends first. One batch at a time: a second before the first's `done` is
    /// refused (false).
    mutating func writeStream(_ id: UInt32, _ chunks: [[UInt8]], done: @escaping @Sendable (Bool) -> Void) -> Outcome {
        var out = Outcome()
        var taken = streamWriters[id] == nil
        for chunk in chunks where taken { taken = streams.write(id, chunk) }
        guard taken else {
            out.wakeups.append((done, false))
            return out
        }
        if streams.pendingBytes(id) == 0 { out.wakeups.append((done, true)) } else { streamWriters[id] = done }
        return out
    }

    /// The application ended outgoing stream `id`: the normal close follows its last byte
    /// (`refill`). False when it is not an open outgoing stream.
    mutating func finishStream(_ id: UInt32) -> Bool { streams.finish(id) }

    /// Ends stream `id` from this side, either way: `.normal` answers the opener's close once
    /// the application has every byte; any other reason stops it at once.
    mutating func closeStream(_ id: UInt32, reason: Reason, detail: String) -> Outcome {
        var out = Outcome()
        guard let stream = streams.streams[id], let frame = streams.close(id, reason: reason) else { return out }
        out.frames.append(frame)
        out.dropped.append(id)
        // The reason sent (a `normal` that confirms nothing goes as `cancelled`).
        guard case .streamClose(_, let sent) = frame else { return out }
        endStream(stream, sent, detail, byPeer: false, &out)
        return out
    }

    /// The application took `bytes` of incoming stream `id`: they go back to the window. Bytes
    /// of a stream that has ended were released with its end.
    mutating func consumedStream(_ id: UInt32, bytes: Int) -> Outcome {
        var out = Outcome()
        guard let waiting = unconsumed[id], bytes > 0 else { return out }
        let n = min(bytes, waiting)
        unconsumed[id] = waiting - n
        out.consumed.append((id, n))
        return out
    }

    /// `written` for a write that succeeded, when it has nothing to hand on (no window held
    /// back for `id`, or `id` ended): counts it and returns true. False when `written` must
    /// run instead (it then does the counting). Most writes are this kind, and the caller
    /// spares them the trip to the connection's queue.
    mutating func writtenQuietly(_ id: UInt32, bytes: Int) -> Bool {
        guard var r = receiving[id] else { return true }
        guard r.heldCredit == 0 else { return false }
        r.unwritten -= bytes
        receiving[id] = r
        return true
    }

    /// `bytes` of resource `id` were written to its file (`error`: or failed to be): the
    /// window held back goes back once the writer is within `writeAhead` again (that of a
    /// resource that has ended was released with its end); a failed write cancels the
    /// resource, with the reason and the error.
    mutating func written(_ id: UInt32, bytes: Int, error: InboxError?) -> Outcome {
        var out = Outcome()
        if var r = receiving[id] {
            r.unwritten -= bytes
            if r.heldCredit > 0, r.unwritten < Self.writeAhead {
                // Once every byte is in (or the resource ended on the wire while its file is
                // saved) the stream's window is over: the bytes go back to the connection's.
                if r.finishing || !isLive(id) { out.released += r.heldCredit } else { out.consumed.append((id, r.heldCredit)) }
                r.heldCredit = 0
            }
            receiving[id] = r
        }
        if let error, receiving[id] != nil {
            Self.merge(cancel(id, reason: error.reason, detail: error.description), into: &out)
        }
        return out
    }

    /// The writer's verdict on received resource `id` (`Outcome.finishes`): saved, reported
    /// `received`, and RESOURCE_DONE tells the sender (unless the resource ended on the
    /// wire meanwhile: the session, or the peer's cancel crossing the verdict); or failed (a
    /// wrong hash, a write or the flush that failed: the part is gone), reported `ended`
    /// with the reason, which RESOURCE_CANCEL tells the sender.
    mutating func finished(_ id: UInt32, _ result: Result<ReceivedFile, InboxError>) -> Outcome {
        var out = Outcome()
        guard let r = receiving.removeValue(forKey: id) else { return out }
        // Written, all of it: what the writes have not reported yet goes back now, and the
        // stream's flow-control entries go (the connection drops them for an ended id).
        out.released += r.heldCredit
        out.dropped.append(id)
        switch result {
        case .success(let saved):
            if let done = try? table.verified(id) { out.frames.append(done) }
            out.events.append(.received(id: id, file: saved))
        case .failure(let error):
            if let frame = table.cancel(id, reason: error.reason) { out.frames.append(frame) }
            out.events.append(.ended(id: id, outgoing: false, reason: error.reason, detail: error.description, byPeer: false,
                                     bytes: r.received))
        }
        out.frames += table.releaseHeld()
        return out
    }

    /// Reports `stream`'s end, tells its writer it will take no more, and releases what its
    /// application never took.
    private mutating func endStream(_ stream: StreamTable.Stream, _ reason: Reason, _ detail: String, byPeer: Bool, _ out: inout Outcome) {
        if let w = streamWriters.removeValue(forKey: stream.id) { out.wakeups.append((w, false)) }
        if let n = unconsumed.removeValue(forKey: stream.id) { out.released += n }
        out.events.append(.streamEnded(id: stream.id, outgoing: stream.outgoing, reason: reason, detail: detail, byPeer: byPeer,
                                       bytes: stream.bytes))
    }

    /// A STREAM_* frame from the peer.
    private mutating func streamFrame(_ frame: Frame) -> Outcome {
        var out = Outcome()
        // An id of this side's parity, or used before: refused, and nothing is remembered
        // (a flood of them costs no memory), as for a resource's.
        if case .streamOpen(let id, _) = frame, let why = table.claimPeerID(id) {
            // A stream in progress under that id is lost as well.
            if streams.streams[id] != nil { return closeStream(id, reason: .protocolError, detail: "STREAM_OPEN with stream \(why)") }
            out.frames.append(.streamClose(streamID: id, reason: .protocolError))
            return out
        }
        let before = streams.streams[frame.streamID]
        let event = streams.received(frame)
        switch event {
        case .opened(let id, let name)?:
            out.events.append(.streamOpened(id: id, name: name))
        case .data(let id, let bytes)?:
            unconsumed[id, default: 0] += bytes.count
            out.events.append(.streamData(id: id, bytes: bytes))
        case .finished(let id)?:
            out.events.append(.streamFinished(id: id))
        case .closed(let id, let reason)?:
            out.dropped.append(id)
            let detail = switch reason {
            case .normal: "the receiver took every byte"
            case .declined: "the peer declined it"
            default: "the peer closed it"
            }
            if let before { endStream(before, reason, detail, byPeer: true, &out) }
        case .violation(let id, let why, let reply)?:
            out.frames.append(reply)
            out.dropped.append(id)
            if let before { endStream(before, .protocolError, why, byPeer: false, &out) }
        case .refused(_, let reply)?:
            out.frames.append(reply)
        case .ignored?, nil:
            break
        }
        // Bytes sent before the stream's end reached the peer go back to the window at once;
        // a peer's bytes for a stream it never opened (or after breaking its rules) do not,
        // so a peer that keeps sending them runs out of credit.
        if case .streamData(let id, let d) = frame, !d.isEmpty, case .ignored? = event { out.consumed.append((id, d.count)) }
        return out
    }

    // MARK: Sending

    /// Tops up the bulk lane: for each resource being sent, chunks read from its file until
    /// `queuedChunks` wait, the scheduler is full, or the file is all handed out (then its
    /// RESOURCE_DONE). A file that changed or cannot be read cancels its resource.
    mutating func refill(_ scheduler: inout SendScheduler, now: ContinuousClock.Instant) -> Outcome {
        var out = Outcome()
        for id in sending.keys.sorted() {
            guard let s = sending[id], !s.doneQueued, let t = table.transfers[id], t.phase == .transferring else { continue }
            var position = t.position
            while scheduler.queuedFrames(on: id) < Self.queuedChunks {
                if position == t.offer.size {
                    // DONE follows the last chunk (the scheduler always takes a frame without data).
                    guard let done = try? table.finishSending(id), scheduler.enqueue(done) == .queued else { break }
                    sending[id]?.doneQueued = true
                    break
                }
                // Read only what the scheduler takes (its bound covers every lane).
                guard scheduler.canAccept(byteCount: Wire.headerSize + Self.chunkSize) else { break }
                let bytes: [UInt8]?
                do {
                    bytes = try s.file.read(at: position, count: Self.chunkSize)
                } catch {
                    Self.merge(cancel(id, reason: .ioError, detail: "reading \(s.file.path): \(error)"), into: &out)
                    break
                }
                guard let bytes, !bytes.isEmpty, table.sending(id, count: bytes.count) else {
                    Self.merge(cancel(id, reason: .sourceChanged, detail: "\(s.file.path) changed after it was offered"), into: &out)
                    break
                }
                _ = scheduler.enqueue(.resourceData(resourceID: id, data: bytes))
                position += UInt64(bytes.count)
                sending[id]?.handedOut = position
            }
            if sending[id] != nil, now - s.reported >= Self.progressInterval, position > t.offset {
                sending[id]?.reported = now
                out.events.append(.progress(id: id, outgoing: true, bytes: position))
            }
        }
        // Streams pull the same way: a writer gives its next batch once this one is queued.
        for id in streams.refill(&scheduler, limit: Self.queuedChunks) {
            if let w = streamWriters.removeValue(forKey: id) { out.wakeups.append((w, true)) }
        }
        return out
    }

    // MARK: Frames from the peer

    /// A resource frame from the peer (the machine's `.frame` event).
    mutating func received(_ frame: Frame, from peer: PeerID?, now: ContinuousClock.Instant) -> Outcome {
        switch frame {
        case .streamOpen, .streamData, .streamClose: return streamFrame(frame)
        default: break
        }
        var out = Outcome()
        let event = table.received(frame)
        // Every data byte the machine counted goes back to the window, whatever becomes of
        // it: at once, unless its file's writer is behind by `writeAhead` (then as it
        // catches up).
        if case .resourceData(let id, let d) = frame, !d.isEmpty {
            if case .data? = event, var r = receiving[id], let file = r.file {
                out.writes.append((id, file, d))
                if r.unwritten < Self.writeAhead { out.consumed.append((id, d.count)) } else { r.heldCredit += d.count }
                r.unwritten += d.count
                r.received += UInt64(d.count)
                r.quietSince = now
                if now - r.reported >= Self.progressInterval {
                    r.reported = now
                    out.events.append(.progress(id: id, outgoing: false, bytes: r.received))
                }
                receiving[id] = r
            } else {
                out.consumed.append((id, d.count))
            }
        }
        guard let event else { return out }
        switch event {
        case .offered(let offer):
            receiving[offer.resourceID] = Receiving(offer: offer, reported: now, quietSince: now)
            out.events.append(.offered(offer))
        case .accepted(let id, let offset):
            sending[id]?.quietSince = now
            out.events.append(.started(id: id, outgoing: true, offset: offset))
        case .declined(let id, let reason):
            sending[id] = nil
            let detail = reason == .busy ? "the peer has as many resources in progress as it takes" : "the peer declined it"
            out.events.append(.ended(id: id, outgoing: true, reason: reason, detail: detail, byPeer: true, bytes: 0))
        case .data:
            break  // handed to the file's writer above
        case .complete(let id):
            guard let file = receiving[id]?.file else { break }
            receiving[id]?.finishing = true
            out.finishes.append((id, file))
        case .delivered(let id):
            sending[id] = nil
            out.events.append(.delivered(id: id))
        case .cancelled(let id, let reason):
            out.dropped.append(id)
            if reason == .timeout, let r = receiving[id], !r.finishing, let file = r.file {
                timedOut(id, r, file, "the peer got no window for its idle timeout and stopped", byPeer: true, &out)
                break
            }
            let detail = reason == .timeout && sending[id] != nil
                ? "the peer got no data for its idle timeout and stopped; it keeps what arrived: sending the file again resumes from there"
                : "the peer cancelled it"
            if let e = forget(id, reason, detail, byPeer: true, &out) { out.events.append(e) }
        case .violation(let id, let why, let reply):
            out.frames.append(reply)
            out.dropped.append(id)
            if let e = forget(id, .protocolError, why, byPeer: false, &out) { out.events.append(e) }
        case .refused(_, let reply):
            out.frames.append(reply)
        case .ignored:
            break
        }
        // A resource of ours that ended makes room for an offer held back.
        out.frames += table.releaseHeld()
        return out
    }

    static func merge(_ o: Outcome, into out: inout Outcome) {
        out.frames += o.frames
        out.consumed += o.consumed
        out.dropped += o.dropped
        out.events += o.events
        out.wakeups += o.wakeups
        out.released += o.released
        out.writes += o.writes
        out.finishes += o.finishes
    }
}
