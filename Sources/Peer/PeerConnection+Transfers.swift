// Linux Dispatch has no Sendable annotations; its queues are thread-safe.
@preconcurrency import Dispatch
import Session

/// A connection's resource and byte stream commands (from any thread): each changes the
/// `ConnectionTransfers` under the connection's lock, queues what it asks, writes, and
/// delivers the events and wakeups after the lock, as the connection's own turns do; and the
/// connection's own look for received resources that stalled.
extension PeerConnection {
    // MARK: Resources (from any thread)

    /// Offers `file` to the peer as `name`: the resource's id on this connection, or nil
    /// when the session is not up. Its bytes are read when the peer accepts. `bind` gets the
    /// id before the offer can go, so the caller knows it before any answer is reported.
    public func offerResource(_ file: OutgoingFile, name: String, bind: (UInt32) -> Void = { _ in }) -> UInt32? {
        turn { s, _ -> UInt32? in
            guard !s.closed, s.machine.state == .connected else { return nil }
            let (id, frame) = s.transfers.offer(file, name: name, now: .now)
            bind(id)
            if let frame { enqueue(frame, &s) }
            pump(&s)
            return id
        }
    }

    /// Accepts the peer's offer `id` into `inbox` (resuming a part it left before). The part
    /// is opened off the connection's queue: resuming hashes what it holds again, which for
    /// a large part takes long enough to miss the peer's pings.
    public func acceptResource(_ id: UInt32, into inbox: Inbox) {
        guard let (offer, peer) = state.withLock({ s in s.transfers.pendingOffer(id).flatMap { o in s.machine.peerID.map { (o, $0) } } }) else {
            return
        }
        DispatchQueue.global().async { [self] in
            let file: IncomingFile
            do throws(InboxError) {
                file = try inbox.receive(offer, from: peer)
            } catch {
                return declineResource(id, reason: error.reason, detail: error.description)
            }
            // The session may have ended meanwhile: what the part holds stays for a resume, a
            // new empty one goes.
            transfers({ s in s.transfers.accept(id, file: file, now: .now) },
                      ifClosed: { if file.offset > 0 { file.suspend() } else { file.discard() } })
        }
    }

    /// Declines the peer's offer `id`.
    public func declineResource(_ id: UInt32, reason: Reason, detail: String) {
        transfers { s in s.transfers.decline(id, reason: reason, detail: detail) }
    }

    /// Whether the peer's resource `id` has every byte and is being verified and saved: too
    /// late to cancel (`cancelResource` would change nothing).
    public func isSaving(_ id: UInt32) -> Bool { state.withLock { $0.transfers.receiving[id]?.finishing == true } }

    /// Ends resource `id` (either way) from this side.
    public func cancelResource(_ id: UInt32, reason: Reason, detail: String) {
        transfers { s in s.transfers.cancel(id, reason: reason, detail: detail) }
    }

    // MARK: Byte streams (from any thread)

    /// Opens a byte stream to the peer named `name` (MultipeerConnectivity's `startStream`):
    /// its id on this connection, or nil when the session is not up. Bytes may follow at once
    /// (`writeStream`); the peer may decline it (reported as `streamEnded`). `bind` gets the
    /// id before STREAM_OPEN can go, so the caller knows it before any answer is reported.
    public func openStream(name: String, bind: (UInt32) -> Void = { _ in }) throws(PeerError) -> UInt32? {
        try turn { s, _ -> Result<UInt32?, PeerError> in
            guard !s.closed, s.machine.state == .connected else { return .success(nil) }
            let opened: (id: UInt32, frame: Frame)
            do { opened = try s.transfers.openStream(name: name) } catch { return .failure(.invalid("name", "\(error)")) }
            bind(opened.id)
            enqueue(opened.frame, &s)
            pump(&s)
            return .success(opened.id)
        }.get()
    }

    /// Gives outgoing stream `id` its next bytes. `done(true)` once they are all in the send
    /// lanes (give the next then: a stream holds one batch and four frames at most, so the
    /// peer's credit paces the writer), `done(false)` when the stream or the connection ended
    /// first. `done` runs outside the connection's lock, perhaps at once on this thread.
    public func writeStream(_ id: UInt32, _ chunks: [[UInt8]], done: @escaping @Sendable (Bool) -> Void) {
        turn { s, events in
            if s.closed { return events.append(.wake(done, false)) }
            apply(s.transfers.writeStream(id, chunks, done: done), &s, &events)
            // Written from the caller's thread, as `send(messages:)` is.
            pump(&s)
        }
    }

    /// Ends outgoing stream `id` normally: its close follows the bytes given so far, and the
    /// receiver's close (`streamEnded` with `.normal`) says it took them all.
    public func finishStream(_ id: UInt32) {
        transfers { s in
            _ = s.transfers.finishStream(id)
            return ConnectionTransfers.Outcome()
        }
    }

    /// Ends stream `id` from this side, either way: `.normal` answers an opener's close once
    /// the application has every byte (`streamFinished`); another reason stops it at once.
    public func closeStream(_ id: UInt32, reason: Reason, detail: String) {
        transfers { s in s.transfers.closeStream(id, reason: reason, detail: detail) }
    }

    /// The application took `bytes` of incoming stream `id`: they go back to the peer's window.
    public func consumedStream(_ id: UInt32, bytes: Int) {
        transfers { s in s.transfers.consumedStream(id, bytes: bytes) }
    }

    /// Hands received resource bytes to their files' writers (under the lock: in order);
    /// each write, once done, is counted, and gives back the peer's window held back for it
    /// on the queue. Most writes have nothing to give back (the window went back as the bytes
    /// arrived): those are counted under the lock on the writer's thread, without a trip to
    /// the queue (a thread switch per 64 KiB chunk, half of a receiver's). Only if the lock is
    /// free: its holder may be waiting for this very writer (a resource that ended early
    /// discards its part, `IncomingFileWriter.discard` waiting for the writes before it under
    /// the lock), so the writer never waits for it.
    func startWrites(_ writes: [(id: UInt32, writer: IncomingFileWriter, bytes: [UInt8])]) {
        for (id, writer, bytes) in writes {
            let count = bytes.count
            writer.write(bytes) { [weak self] error in
                guard let self else { return }
                if error == nil,
                   state.withLockIfAvailable({ $0.closed || $0.transfers.writtenQuietly(id, bytes: count) }) == true { return }
                transfers { s in s.transfers.written(id, bytes: count, error: error) }
            }
        }
    }

    /// Has the writers of received resources whose last byte came verify and save them,
    /// after their writes, off the lock (the flush may take most of a second on a card, and
    /// the connection's messages, pings and window must not wait for it); each verdict is
    /// carried out on the queue (`ConnectionTransfers.finished`), even once the session has
    /// ended: the file is saved, and its `received` must be reported.
    func startFinishes(_ finishes: [(id: UInt32, writer: IncomingFileWriter)]) {
        for (id, writer) in finishes {
            writer.finish { result in
                // Held strongly until then: the verdict is reported whatever became of the session.
                self.queue.async {
                    self.turn { s, events in
                        self.apply(s.transfers.finished(id, result), &s, &events)
                        self.endOfTurn(&s, &events)
                    }
                }
            }
        }
    }

    // MARK: Stalled resources (on the queue)

    /// While a resource of the peer's is being received, or one of ours waits for the peer
    /// to take its data or to give its verdict, a look for stalls every quarter of
    /// `transferIdleTimeout` (so one is found between one and one and a quarter of it).
    func armStallCheck(_ s: inout State) {
        guard !s.stallCheckArmed, !s.closed, s.transfers.isReceiving || s.transfers.isSending(s.scheduler) else { return }
        s.stallCheckArmed = true
        queue.asyncAfter(deadline: .now() + (transferIdleTimeout / 4).dispatchInterval) { [weak self] in
            self?.lookForStalls()
        }
    }

    /// Ends the peer's resources that got no data for `transferIdleTimeout` while the
    /// connection brought no data at all and the peer's windows let it send
    /// (`ConnectionTransfers.stalled`), and ours that the peer's windows held back as long,
    /// or whose verdict did not come, while nothing moved toward it (`stalledSending`).
    private func lookForStalls() {
        turn { s, events in
            s.stallCheckArmed = false
            guard !s.closed else { return }
            let blocked = Set(s.transfers.awaitedData.filter { !s.machine.peerMaySend($0.bytes, on: $0.id) }.map(\.id))
            let dataArrived = s.dataSinceStallLook
            s.dataSinceStallLook = false
            apply(s.transfers.stalled(now: .now, after: transferIdleTimeout, blocked: blocked, dataArrived: dataArrived), &s, &events)
            // Bytes of ours still on their way (a slow link: the peer's next CREDIT comes only
            // once they arrive) count as moving; a peer that reads its socket drains them.
            let moved = s.movedSinceStallLook || !s.stalled.isEmpty || channel.unsentBytes > 0
            s.movedSinceStallLook = false
            apply(s.transfers.stalledSending(now: .now, after: transferIdleTimeout, moved: moved, scheduler: s.scheduler,
                                             credit: s.machine.sendCredit), &s, &events)
            endOfTurn(&s, &events)
        }
    }

    private func transfers(_ body: @escaping @Sendable (inout State) -> ConnectionTransfers.Outcome,
                           ifClosed: (@Sendable () -> Void)? = nil) {
        queue.async { [self] in
            var closed = false
            turn { s, events in
                guard !s.closed else {
                    closed = true
                    return
                }
                apply(body(&s), &s, &events)
                endOfTurn(&s, &events)
            }
            if closed { ifClosed?() }
        }
    }
}
