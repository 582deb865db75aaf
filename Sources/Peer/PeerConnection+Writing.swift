// Linux Dispatch has no Sendable annotations; its queues are thread-safe.
@preconcurrency import Dispatch
import Session
import SystemKit

/// A connection's writing path, under its lock: frames from the lanes (and the refills of
/// the resources being sent) through TLS to the channel, one outbox item at a time, and
/// waiting for the channel's room when the socket is full; and closing, which flushes what
/// it can first.
extension PeerConnection {
    // MARK: Writing (under the lock)

    /// Frames written together, at most (then the channel's room is checked again): one TLS
    /// record's worth, so small frames share a record and a write instead of one each.
    static let writeBatchBytes = 16_384

    /// Writes frames from the lanes while the channel's outbox is empty and the peer's credit
    /// allows (then `roomForWaiters` says which senders may try again).
    func pump(_ s: inout State) {
        // Before a refill can read a file: an offer just made turns inline reads off here.
        readsInline.set(!s.closed && s.machine.state == .connected && !s.transfers.hasResources)
        var batch: [UInt8] = []
        while !s.closed, !s.closeWritten, s.stalled.isEmpty, channel.hasRoom,
              let frame = s.machine.nextFrame(from: &s.scheduler) ?? refilled(&s) {
            let data: ArraySlice<UInt8>
            do {
                data = try FrameEncoder.appendAllButData(frame, to: &batch)
            } catch {
                // The machine builds only valid frames; an invalid one is a bug, said loudly.
                logger.error("a frame could not be encoded", ["peer.connection": "\(id)", "error": "\(error)"])
                continue
            }
            if frame.flowControlledBytes > 0 { s.movedSinceStallLook = true }
            if case .close = frame {
                // CLOSE is the last frame: what is still queued will never go.
                s.closeWritten = true
                s.scheduler = SendScheduler(maxQueuedBytes: s.scheduler.maxQueuedBytes)
            }
            let room = Self.writeBatchBytes - batch.count
            if s.tls != nil, data.count > room {
                // Bulk data past the batch's record is encrypted from where it lies (the
                // message, the file's chunk) instead of copied after its header first: the
                // batch is filled to a record, so as many records go as before (but for one
                // of a few bytes when the header itself took the batch past a record).
                let head = max(room, 0)
                batch += data.prefix(head)
                write(batch, then: data.dropFirst(head), &s)
                batch = []
            } else {
                batch += data
                if batch.count >= Self.writeBatchBytes {
                    write(batch, &s)
                    batch = []
                }
            }
        }
        write(batch, &s)
        if !s.closed, !s.stalled.isEmpty || !channel.hasRoom { waitForChannel(&s) }
    }

    /// The next frame after reading more of the resources being sent (nil: nothing may go).
    private func refilled(_ s: inout State) -> Frame? {
        guard !s.transfers.isEmpty else { return nil }
        let o = s.transfers.refill(&s.scheduler, now: .now)
        for id in o.dropped {
            _ = s.scheduler.removeStream(id)
            _ = s.machine.handle(.streamEnded(streamID: id), now: .now)
        }
        // Into the lanes only: `enqueue` writes at once in plain text, which inside `pump`
        // would put these frames before the batch being built.
        for f in o.frames where s.scheduler.enqueue(f) == .busy { s.controlOverflow = true }
        s.later += o.events.map { .transfer($0) }
        s.later += o.wakeups.map { .wake($0.0, $0.1) }
        return s.machine.nextFrame(from: &s.scheduler)
    }

    /// The waiters, in order, whose message the lanes would take now.
    func roomForWaiters(_ s: inout State) -> [RoomWaiter] {
        var ready: [RoomWaiter] = []
        while let w = s.roomWaiters.first, s.scheduler.canAccept(byteCount: w.bytes) {
            ready.append(w)
            s.roomWaiters.removeFirst()
        }
        return ready
    }

    /// Encoded frames to the transport, through TLS when the session has it; `rest`, the
    /// end of the last frame, follows them (only with TLS: see `pump`).
    private func write(_ frames: [UInt8], then rest: ArraySlice<UInt8> = [], _ s: inout State) {
        guard !frames.isEmpty || !rest.isEmpty else { return }
        guard let tls = s.tls else { return transmit(rest.isEmpty ? frames : frames + rest, &s) }
        do {
            try tls.write(frames[...], then: rest)
        } catch {
            logger.warning("TLS refused frames", ["peer.connection": "\(id)", "error": "\(error)"])
            return
        }
        transmit(tls.takeOutgoing(), &s)
    }

    /// Hands transport bytes to the channel in order; what it has no room for waits (a frame
    /// never does: it is taken only when there is room).
    func transmit(_ bytes: [UInt8], _ s: inout State) {
        guard !bytes.isEmpty, !s.closed else { return }
        if s.stalled.isEmpty, channel.send(bytes) != .full { return }
        s.stalled.append(bytes)
        waitForChannel(&s)
    }

    private func waitForChannel(_ s: inout State) {
        guard !s.waitingForChannel else { return }
        s.waitingForChannel = true
        // The handler may run at once, on this thread, inside our lock: hop to the queue.
        channel.whenRoom { [weak self] open in
            guard let self else { return }
            self.queue.async { self.channelHasRoom(open) }
        }
    }

    private func channelHasRoom(_ open: Bool) {
        turn { s, _ in
            s.waitingForChannel = false
            guard open else { return }
            while let first = s.stalled.first {
                guard channel.send(first) != .full else { break }
                s.stalled.removeFirst()
            }
            if s.closed {
                if s.stalled.isEmpty { closeChannelWhenFlushed() } else { waitForChannel(&s) }
                return
            }
            pump(&s)
        }
    }

    // MARK: Closing

    func closeTransport(_ s: inout State) {
        guard !s.closed else { return }
        pump(&s)  // a CLOSE still in its lane goes if the socket takes it
        if let tls = s.tls {
            tls.close()
            transmit(tls.takeOutgoing(), &s)
        }
        s.closed = true
        let waiters = s.roomWaiters
        s.roomWaiters = []
        queue.async { for w in waiters { w.resume(false) } }
        if s.stalled.isEmpty { closeChannelWhenFlushed() }
        // A peer that stops reading must not keep the socket: close it after a moment anyway.
        let channel = self.channel
        queue.asyncAfter(deadline: .now() + .seconds(2)) { channel.close() }
    }

    private func closeChannelWhenFlushed() {
        let channel = self.channel
        channel.whenFlushed { channel.close() }
    }
}
