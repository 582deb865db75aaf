import Session

/// How a connection's resources notice a peer that holds them without a word: the peer's
/// data that stops coming (`stalled`) and our data or verdict the peer keeps waiting
/// (`stalledSending`). The connection asks now and then while `isReceiving` or `isSending`
/// says there is something to watch.
extension ConnectionTransfers {
    /// Whether a resource of the peer's has been accepted and not all received: the connection
    /// then looks for stalls (`stalled`) now and then.
    var isReceiving: Bool { receiving.values.contains { $0.file != nil && !$0.finishing } }

    /// Accepted resources of the peer's, with the bytes their next RESOURCE_DATA carries
    /// (a whole chunk, or what is left; 0 when only RESOURCE_DONE is missing): what the
    /// peer's windows must allow for it to send (`stalled`'s question).
    var awaitedData: [(id: UInt32, bytes: Int)] {
        receiving.keys.sorted().compactMap { id in
            guard let r = receiving[id], r.file != nil, !r.finishing else { return nil }
            return (id, Int(min(UInt64(Self.chunkSize), r.offer.size - min(r.received, r.offer.size))))
        }
    }

    /// Ends `timeout` every accepted resource of the peer's that got no data for `limit`
    /// while the peer could send it and sent nothing else: `blocked` are those whose data the
    /// peer's windows do not allow now, `dataArrived` says other data came since the last
    /// look (the link is slow and shared, or the peer's messages go first). Their clocks
    /// restart, as does that of one whose window is held back for the disk. The peer hears
    /// RESOURCE_CANCEL `timeout`; the received part is kept, so the same resource offered
    /// again resumes from it. Without this a live peer that stops sending would hold its
    /// slot, its promised space and its part until the session ends. (Only incoming
    /// resources end here: no offer of ours held back gets room from it.)
    mutating func stalled(now: ContinuousClock.Instant, after limit: Duration, blocked: Set<UInt32>, dataArrived: Bool) -> Outcome {
        var out = Outcome()
        for id in receiving.keys.sorted() {
            guard var r = receiving[id], let file = r.file, !r.finishing else { continue }
            if dataArrived || r.heldCredit > 0 || blocked.contains(id) {
                r.quietSince = now
                receiving[id] = r
                continue
            }
            guard now - r.quietSince >= limit, let frame = table.cancel(id, reason: .timeout) else { continue }
            out.frames.append(frame)
            out.dropped.append(id)
            timedOut(id, r, file, "no data for \(limit) while the peer could send", byPeer: false, &out)
        }
        return out
    }

    /// Ends the peer's resource `id` `timeout`, keeping its part: a timeout is not an abort.
    mutating func timedOut(_ id: UInt32, _ r: Receiving, _ file: IncomingFileWriter, _ why: String, byPeer: Bool,
                           _ out: inout Outcome) {
        receiving[id] = nil
        out.released += r.heldCredit
        // Recorded off the lock, after the writes given so far: the part keeps `received`.
        file.suspend()
        out.events.append(.ended(id: id, outgoing: false, reason: .timeout,
                                 detail: "\(why); the \(r.received) bytes received are kept for a resume", byPeer: byPeer, bytes: r.received))
    }

    /// Whether a resource of ours waits for the peer to take its data (accepted, with data
    /// not yet sent) or for its verdict: the connection then looks for stalls
    /// (`stalledSending`) now and then.
    func isSending(_ scheduler: SendScheduler) -> Bool {
        sending.keys.contains { awaitsThePeer($0, scheduler) || awaitsVerdict($0, scheduler) }
    }

    /// How long a peer may take to answer a resource's DONE once nothing moves: `limit`,
    /// and a second more for every whole 4 MiB of the resource. Ours hashes the bytes as they
    /// come and flushes all but the last few MiB (`Inbox.Limits.syncInterval`) on the way,
    /// so it answers within moments; another may hash the whole file only at the end, on a
    /// board without SHA instructions (a few MB a second).
    static func verdictLimit(_ limit: Duration, size: UInt64) -> Duration {
        limit + .seconds(Int64(size >> 22))
    }

    /// Every frame sent, DONE too: the peer's verdict is awaited.
    private func awaitsVerdict(_ id: UInt32, _ scheduler: SendScheduler) -> Bool {
        table.transfers[id]?.phase == .verifying && scheduler.queuedFrames(on: id) == 0
    }

    /// Accepted and not all sent: data to hand out, or handed out and waiting in the lanes
    /// (the table says verifying as soon as the last chunk and DONE are queued).
    private func awaitsThePeer(_ id: UInt32, _ scheduler: SendScheduler) -> Bool {
        guard let phase = table.transfers[id]?.phase else { return false }
        return phase == .transferring || (phase == .verifying && scheduler.queuedFrames(on: id) > 0)
    }

    /// Ends `timeout` every resource of ours whose data waited `limit` with nothing moving
    /// toward the peer: `moved` says flow-controlled data went or a CREDIT came since the
    /// last look (the link moves, if not for this resource); only a resource whose next
    /// frame in `scheduler` the peer's window (`credit`) does not allow is held by the peer
    /// (the others wait for this side's lanes). Their clocks restart otherwise. The peer
    /// hears RESOURCE_CANCEL `timeout` and keeps its part. Without this a peer that accepts
    /// and never gives window, while it answers pings, would hold the resource forever.
    /// The same for a resource whose frames all went and whose verdict does not come while
    /// nothing moves (our bytes on their way count) for `verdictLimit`: a verdict that never
    /// comes would hold the resource, and its file open, for ever.
    mutating func stalledSending(now: ContinuousClock.Instant, after limit: Duration, moved: Bool,
                                 scheduler: SendScheduler, credit: SendCredit) -> Outcome {
        var out = Outcome()
        for id in sending.keys.sorted() {
            guard let s = sending[id] else { continue }
            // Held by the peer: its verdict awaited, or its window keeping the next frame back.
            let verdict = awaitsVerdict(id, scheduler)
            guard verdict || awaitsThePeer(id, scheduler) else { continue }
            let heldByThePeer = verdict || scheduler.nextBulkBytes(on: id).map { !credit.allows($0, on: id) } ?? false
            if moved || !heldByThePeer {
                sending[id]?.quietSince = now
                continue
            }
            let wait = verdict ? Self.verdictLimit(limit, size: table.transfers[id]?.offer.size ?? 0) : limit
            guard now - s.quietSince >= wait else { continue }
            let detail = verdict
                ? "the peer did not confirm the file within \(wait) of getting all of it (a confirmation on its way meanwhile is not counted: the peer may have it whole); sending the file again resumes from what the peer kept"
                : "the peer gave no window for \(limit) while its data waited; sending the file again resumes from what it has"
            Self.merge(cancel(id, reason: .timeout, detail: detail), into: &out)
        }
        return out
    }
}
