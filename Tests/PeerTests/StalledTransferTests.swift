import Foundation
@testable import Peer
import Session
import SystemKit
import TLS
import TestSupport
import Testing

/// A hand-made peer whose resource stops arriving: the node ends it `timeout` once it got
/// no data for `transferIdleTimeout` while the peer could send (the peer hears it, the
/// client is told, the part stays for a resume, the session goes on), and never while the
/// node's own windows keep the peer from sending (its clock then starts again).
@Suite(.memoryHeavy) struct StalledTransferTests {
    typealias Directory = InboxTests.Directory
    typealias Raw = ResourceWireTests

    /// Far more than the node takes to read data the peer sends as soon as it reads the
    /// accept (`offer`), on a machine running every suite at once: the timeout must find
    /// what was sent.
    static let idle: Duration = .seconds(2)

    /// Offers `offer`, reads the node's answer and, when it is an accept, sends `frames` at
    /// once, all on the peer's own thread: the node's clock runs from its accept, and a test
    /// task waiting for the cooperative pool between these steps could be seconds late.
    static func offer(_ raw: RawPeer, _ offer: ResourceOffer, then frames: [Frame]) async throws -> Frame? {
        try await onThread {
            try raw.send(.resourceOffer(offer))
            let answer = try raw.read(until: Raw.cancelOrDone)
            if case .resourceAccept? = answer { for f in frames { try raw.send(f) } }
            return answer
        }
    }

    /// A node sending a file of `size` bytes to a raw peer that has just read its offer:
    /// the node, the raw peer, the node's transfer and the offer as the peer saw it.
    struct RawSending {
        let dir: Directory
        let a: PeerNodeTests.Node
        let raw: RawPeer
        let transfer: ResourceTransfer?
        let offer: ResourceOffer
    }

    static func sendingToRaw(_ name: String, size: Int, idle: Duration? = nil) async throws -> RawSending {
        let dir = try Directory()
        let (a, raw, me) = try await PeerFlowTests.rawSession(name, inbox: try Inbox(directory: dir.path + "/inbox"),
                                                              transferIdleTimeout: idle)
        do {
            let path = try PeerResourceTests.write(InboxTests.content(size), in: dir, name + ".bin")
            let sent = try await a.node.sendResource(path: path, to: [me])
            guard case .resourceOffer(let o)? = try await Raw.frame(raw, { if case .resourceOffer = $0 { true } else { false } }) else {
                throw TestSupportError("no offer from the node")
            }
            return RawSending(dir: dir, a: a, raw: raw, transfer: sent.first, offer: o)
        } catch {
            raw.close()
            a.node.stop()
            throw error
        }
    }

    /// The node's report that its resource ended `timeout` (`byPeer` as given): the
    /// transfer and the detail, nil (recorded) when none came.
    static func endedTimeout(_ a: PeerNodeTests.Node, byPeer: Bool) async -> (transfer: ResourceTransfer, detail: String)? {
        let ended = await a.wait("ended") { if case .resource(.ended(_, .timeout, _, byPeer)) = $0 { true } else { false } }
        guard case .resource(.ended(let t, _, let detail, _))? = ended else {
            Issue.record("no timeout reported")
            return nil
        }
        return (t, detail)
    }

    @Test func aStalledResourceEndsTimeoutAndKeepsItsPartForAResume() async throws {
        let dir = try Directory()
        let inbox = try Inbox(directory: dir.path + "/inbox")
        let (a, raw, _) = try await PeerFlowTests.rawSession("stalled", inbox: inbox, transferIdleTimeout: Self.idle)
        defer { raw.close(); a.node.stop() }
        let content = InboxTests.content(300_000)
        let offer = ResourceOffer(resourceID: 1, name: "slow.bin", size: 300_000, sha256: try SHA256Digest.hash(content), mediaType: "x/y")
        #expect(try await Self.offer(raw, offer, then: (0..<2).map { .resourceData(resourceID: 1, data: Array(content[$0 * 50_000..<($0 + 1) * 50_000])) })
                == .resourceAccept(resourceID: 1, offset: 0))
        // Then nothing: the node gives up on it.
        #expect(try await Raw.frame(raw, Raw.cancelOrDone) == .resourceCancel(resourceID: 1, reason: .timeout))
        guard let (t, detail) = await Self.endedTimeout(a, byPeer: false) else { return }
        #expect(t.bytes == 100_000)
        #expect(detail.contains("kept"), "the client is told the part stays: \(detail)")
        #expect(try await Raw.stillUp(a, raw, 1))

        // The same content offered again resumes from what arrived.
        let again = ResourceOffer(resourceID: 3, name: "slow.bin", size: 300_000, sha256: offer.sha256, mediaType: "x/y")
        #expect(try await Self.offer(raw, again, then: stride(from: 100_000, to: 300_000, by: 50_000).map {
            .resourceData(resourceID: 3, data: Array(content[$0..<$0 + 50_000]))
        } + [.resourceDone(resourceID: 3)]) == .resourceAccept(resourceID: 3, offset: 100_000))
        #expect(try await Raw.frame(raw, Raw.cancelOrDone) == .resourceDone(resourceID: 3))
        guard case .resource(.received(_, let f, _))? = await a.wait("received", { if case .resource(.received) = $0 { true } else { false } }) else {
            Issue.record("not received")
            return
        }
        #expect(try Data(contentsOf: URL(fileURLWithPath: f.path)) == Data(content))
    }

    /// The part of a resource that stalled is recorded for a resume (a flush: most of a
    /// second on an SD card) off the connection's lock: while the recording is held, the
    /// peer hears the timeout and the session carries a message (the recording ran under the
    /// lock: nothing moved meanwhile). The same content offered again at once waits for the
    /// record, longer than a transfer that holds the part would be waited for
    /// (`duplicateWait`, short here), and resumes from it: not `duplicate`.
    @Test func aStalledPartIsRecordedWhileTheSessionGoesOn() async throws {
        let dir = try Directory()
        let gate = PeerResourceTests.SaveGate()
        let inbox = try Inbox(directory: dir.path + "/inbox", duplicateWait: .milliseconds(100), beforeRecording: { gate.hold() },
                              claimWaits: { gate.claimWaits() })
        let (a, raw, _) = try await PeerFlowTests.rawSession("held", inbox: inbox, transferIdleTimeout: Self.idle)
        defer { raw.close(); a.node.stop() }
        defer { gate.open() }  // first: a held recording must not outlive a failed expectation
        let content = InboxTests.content(300_000)
        let offer = ResourceOffer(resourceID: 1, name: "held.bin", size: 300_000, sha256: try SHA256Digest.hash(content), mediaType: "x/y")
        #expect(try await Self.offer(raw, offer, then: [.resourceData(resourceID: 1, data: Array(content[0..<50_000]))])
                == .resourceAccept(resourceID: 1, offset: 0))
        #expect(await gate.entered(), "the stalled part is being recorded")
        #expect(try await Raw.frame(raw, Raw.cancelOrDone) == .resourceCancel(resourceID: 1, reason: .timeout))
        #expect(try await Raw.stillUp(a, raw, 1), "a message crossed while the part was recorded")
        let again = ResourceOffer(resourceID: 3, name: "held.bin", size: 300_000, sha256: offer.sha256, mediaType: "x/y")
        let answer = Task { try await Self.offer(raw, again, then: []) }
        #expect(await gate.claimWaited(), "the new offer waits for the record")
        try await Task.sleep(for: .milliseconds(400))  // (past duplicateWait, counted from its wait, while the record is held)
        gate.open()
        #expect(try await answer.value == .resourceAccept(resourceID: 3, offset: 50_000))
    }

    /// The node as the sender: a peer that ends its resource `timeout` is reported so, and
    /// the node's client is told that sending the file again resumes it.
    @Test func theSenderIsToldATimedOutResourceResumesWhenSentAgain() async throws {
        let s = try await Self.sendingToRaw("sender", size: 200_000)
        defer { s.raw.close(); s.a.node.stop() }
        let id = s.offer.resourceID
        try await Raw.send(s.raw, [.resourceAccept(resourceID: id, offset: 0), .resourceCancel(resourceID: id, reason: .timeout)])
        guard let (t, detail) = await Self.endedTimeout(s.a, byPeer: true) else { return }
        #expect(t.id == s.transfer?.id && t.outgoing)
        #expect(detail.contains("sending the file again resumes"), "\(detail)")
    }

    /// The node as the sender, its peer accepting and then giving no window: once the data
    /// the first window allowed went and nothing moved for `transferIdleTimeout`, the node
    /// ends it `timeout` (the peer hears it, the client is told, the session goes on).
    @Test func aResourceThePeerGivesNoWindowEndsTimeout() async throws {
        let s = try await Self.sendingToRaw("held", size: 600_000, idle: Self.idle)
        defer { s.raw.close(); s.a.node.stop() }
        let id = s.offer.resourceID
        // Accepted, then no CREDIT: the data the first window allows goes, then nothing can.
        try await Raw.send(s.raw, [.resourceAccept(resourceID: id, offset: 0)])
        #expect(try await Raw.frame(s.raw, Raw.cancelOrDone) == .resourceCancel(resourceID: id, reason: .timeout))
        guard let (t, detail) = await Self.endedTimeout(s.a, byPeer: false) else { return }
        #expect(t.id == s.transfer?.id && t.outgoing)
        #expect(detail.contains("gave no window"), "\(detail)")
        #expect(try await Raw.stillUp(s.a, s.raw, 1))
    }

    /// The node as the sender, its peer taking every byte and DONE and then saying nothing:
    /// the node ends it `timeout` once nothing moved for `transferIdleTimeout` (before, it
    /// waited for the verdict for ever, the file open), and the session goes on.
    @Test func aVerdictThatNeverComesEndsTimeout() async throws {
        let s = try await Self.sendingToRaw("verdict", size: 100_000, idle: Self.idle)
        defer { s.raw.close(); s.a.node.stop() }
        let id = s.offer.resourceID
        try await Raw.send(s.raw, [.resourceAccept(resourceID: id, offset: 0)])
        #expect(try await Raw.frame(s.raw, Raw.cancelOrDone) == .resourceDone(resourceID: id), "every byte, within the first window")
        #expect(try await Raw.frame(s.raw, Raw.cancelOrDone) == .resourceCancel(resourceID: id, reason: .timeout))
        guard let (t, detail) = await Self.endedTimeout(s.a, byPeer: false) else { return }
        #expect(t.id == s.transfer?.id && t.outgoing && t.bytes == 100_000)
        #expect(detail.contains("did not confirm"), "\(detail)")
        #expect(try await Raw.stillUp(s.a, s.raw, 1))
    }

    /// The node as the receiver of a sender that gave up waiting for its window: the part
    /// stays (a timeout is not an abort), and the same content offered again resumes from it.
    @Test func aSendersTimeoutKeepsThePartForAResume() async throws {
        let dir = try Directory()
        let (a, raw, _) = try await PeerFlowTests.rawSession("kept", inbox: try Inbox(directory: dir.path + "/inbox"))
        defer { raw.close(); a.node.stop() }
        let content = InboxTests.content(300_000)
        let offer = ResourceOffer(resourceID: 1, name: "kept.bin", size: 300_000, sha256: try SHA256Digest.hash(content), mediaType: "x/y")
        let first: [Frame] = stride(from: 0, to: 100_000, by: 50_000).map { .resourceData(resourceID: 1, data: Array(content[$0..<$0 + 50_000])) }
        #expect(try await Self.offer(raw, offer, then: first + [.resourceCancel(resourceID: 1, reason: .timeout)])
                == .resourceAccept(resourceID: 1, offset: 0))
        let ended = await a.wait("ended") { if case .resource(.ended(_, .timeout, _, true)) = $0 { true } else { false } }
        guard case .resource(.ended(let t, _, let detail, _))? = ended else {
            Issue.record("no timeout reported")
            return
        }
        #expect(t.bytes == 100_000 && !t.outgoing)
        #expect(detail.contains("100000 bytes received are kept"), "\(detail)")
        let again = ResourceOffer(resourceID: 3, name: "kept.bin", size: 300_000, sha256: offer.sha256, mediaType: "x/y")
        let rest: [Frame] = stride(from: 100_000, to: 300_000, by: 50_000).map { .resourceData(resourceID: 3, data: Array(content[$0..<$0 + 50_000])) }
        #expect(try await Self.offer(raw, again, then: rest + [.resourceDone(resourceID: 3)]) == .resourceAccept(resourceID: 3, offset: 100_000))
        #expect(try await Raw.frame(raw, Raw.cancelOrDone) == .resourceDone(resourceID: 3))
    }

    /// An offer not yet answered that its sender ends `timeout` is reported ended, as any
    /// cancelled offer is (no part was made for it).
    @Test func anUnansweredOfferEndedTimeoutIsReported() async throws {
        let dir = try Directory()
        let (a, raw, _) = try await PeerFlowTests.rawSession("asked", inbox: try Inbox(directory: dir.path + "/inbox"), policy: .ask)
        defer { raw.close(); a.node.stop() }
        let offer = ResourceOffer(resourceID: 1, name: "asked.bin", size: 10, sha256: try SHA256Digest.hash([UInt8](repeating: 1, count: 10)),
                                  mediaType: "x/y")
        try await Raw.send(raw, [.resourceOffer(offer)])
        #expect(await a.wait("offered") { if case .resource(.offered) = $0 { true } else { false } } != nil)
        try await Raw.send(raw, [.resourceCancel(resourceID: 1, reason: .timeout)])
        #expect(await a.wait("ended") { if case .resource(.ended(_, .timeout, _, true)) = $0 { true } else { false } } != nil)
        #expect(try FileSystem.names(in: dir.path + "/inbox").filter { $0 != ".part" }.isEmpty)
    }

    /// A resource of `size` bytes offered from a hand-made table at `start`, accepted by the
    /// peer, and its first chunks handed to the lanes (not yet sent).
    static func sending(_ size: Int, in dir: Directory, at start: ContinuousClock.Instant) throws
        -> (ConnectionTransfers, SendScheduler, UInt32) {
        let path = try PeerResourceTests.write(InboxTests.content(size), in: dir, "out.bin")
        let peer = try #require(PeerID(bytes: [UInt8](repeating: 7, count: 32)))
        var t = ConnectionTransfers(role: .dialer)
        var scheduler = SendScheduler()
        let (id, frame) = t.offer(try OutgoingFile(path: path, hashes: FileHashes(racyMargin: 0)), name: "out.bin", now: start)
        #expect(frame != nil && !t.isSending(scheduler), "an offer not yet answered is not timed here")
        _ = t.received(.resourceAccept(resourceID: id, offset: 0), from: peer, now: start)
        _ = t.refill(&scheduler, now: start)
        return (t, scheduler, id)
    }

    /// The sender's clock runs only while the peer's window holds the resource's next frame
    /// back and nothing moves toward the peer: ten limits with the link moving, then ten with
    /// the window open (this side's lanes hold it), end nothing, and the limit counts from
    /// the last such look. Then it ends `timeout`, RESOURCE_CANCEL to the peer.
    @Test func theSendersClockRunsOnlyWhileThePeerHoldsItsData() throws {
        let dir = try Directory()
        let start = ContinuousClock.now, limit = Duration.seconds(60)
        var (t, scheduler, id) = try Self.sending(600_000, in: dir, at: start)
        #expect(t.isSending(scheduler) && scheduler.nextBulkBytes(on: id) == Session.Wire.maxPayload)
        let shut = SendCredit(connection: 0, stream: 0), open = SendCredit()
        for i in 1...10 {
            let out = t.stalledSending(now: start + limit * i, after: limit, moved: true, scheduler: scheduler, credit: shut)
            #expect(out.frames.isEmpty, "moving at \(i) limits")
        }
        for i in 11...20 {
            let out = t.stalledSending(now: start + limit * i, after: limit, moved: false, scheduler: scheduler, credit: open)
            #expect(out.frames.isEmpty, "window open at \(i) limits")
        }
        let last = start + limit * 20
        #expect(t.stalledSending(now: last + limit / 2, after: limit, moved: false, scheduler: scheduler, credit: shut).frames.isEmpty)
        let out = t.stalledSending(now: last + limit, after: limit, moved: false, scheduler: scheduler, credit: shut)
        #expect(out.frames == [.resourceCancel(resourceID: id, reason: .timeout)])
        #expect(out.dropped == [id])
        guard case .ended(id, true, .timeout, _, false, _)? = out.events.first, out.events.count == 1 else {
            Issue.record("not one timeout: \(out.events)")
            return
        }
        #expect(!t.isSending(scheduler))
    }

    /// A resource whose data all went waits for the peer's verdict: not timed while DONE
    /// waits (for no window) or anything moves (our bytes on their way, the peer's CREDITs),
    /// then ended `timeout` once nothing moved for the limit (a small file: no more), the
    /// peer told.
    @Test func aVerdictThatNeverComesEndsTimeoutOnceNothingMoves() throws {
        let dir = try Directory()
        let start = ContinuousClock.now, limit = Duration.seconds(60)
        var (t, scheduler, id) = try Self.sending(1_000, in: dir, at: start)
        #expect(scheduler.queuedFrames(on: id) == 2, "the data and DONE")
        var credit = SendCredit()
        guard case .resourceData? = scheduler.next(credit: &credit) else {
            Issue.record("the data did not go first")
            return
        }
        #expect(scheduler.nextBulkBytes(on: id) == 0, "DONE waits, for no window")
        let shut = SendCredit(connection: 0, stream: 0)
        for i in 1...10 {
            #expect(t.stalledSending(now: start + limit * i, after: limit, moved: false, scheduler: scheduler, credit: shut).frames.isEmpty)
        }
        _ = scheduler.next(credit: &credit)
        #expect(t.isSending(scheduler), "DONE went: the verdict is awaited, and looked for")
        let sent = start + limit * 11
        for i in 0...10 {
            let out = t.stalledSending(now: sent + limit * i, after: limit, moved: true, scheduler: scheduler, credit: shut)
            #expect(out.frames.isEmpty, "moving at \(i) limits")
        }
        let last = sent + limit * 10
        #expect(t.stalledSending(now: last + limit / 2, after: limit, moved: false, scheduler: scheduler, credit: shut).frames.isEmpty)
        let out = t.stalledSending(now: last + limit, after: limit, moved: false, scheduler: scheduler, credit: shut)
        #expect(out.frames == [.resourceCancel(resourceID: id, reason: .timeout)])
        guard case .ended(id, true, .timeout, let detail, false, _)? = out.events.first, out.events.count == 1 else {
            Issue.record("not one timeout: \(out.events)")
            return
        }
        #expect(detail.contains("did not confirm"), "\(detail)")
        #expect(!t.isSending(scheduler))
        // A large file gives the peer longer: a second more for every whole 4 MiB.
        #expect(ConnectionTransfers.verdictLimit(limit, size: 4 << 30) == limit + .seconds(1024))
        #expect(ConnectionTransfers.verdictLimit(limit, size: (4 << 20) - 1) == limit)
    }

    /// A resource of 300,000 bytes accepted and given its first 50,000 (written: `suspend`
    /// waits for the writes before it), from a hand-made table at `start`.
    static func receiving(_ inbox: Inbox, _ peer: PeerID, size: Int = 300_000, first: Int = 50_000,
                          write: Bool = true, at start: ContinuousClock.Instant) throws -> (ConnectionTransfers, ResourceOffer) {
        let content = InboxTests.content(size)
        let offer = ResourceOffer(resourceID: 1, name: "waits.bin", size: UInt64(size), sha256: try SHA256Digest.hash(content), mediaType: "x/y")
        var t = ConnectionTransfers(role: .listener)
        _ = t.received(.resourceOffer(offer), from: peer, now: start)
        #expect(!t.isReceiving, "an offer not yet accepted has its own timeout")
        _ = t.accept(1, file: try inbox.receive(offer, from: peer), now: start)
        for at in stride(from: 0, to: first, by: 50_000) {
            let data = t.received(.resourceData(resourceID: 1, data: Array(content[at..<min(at + 50_000, first)])), from: peer, now: start)
            if write { for w in data.writes { w.writer.write(w.bytes) { _ in } } }
        }
        return (t, offer)
    }

    /// The clock of a resource runs only while the peer could send its next chunk and sent
    /// nothing else: ten limits without window (`blocked`, the machine's `peerMaySend`,
    /// tested in FlowControlTests), then ten with other data arriving, end nothing, and the
    /// limit counts from the last such look. Then it ends `timeout`, the part with what was
    /// written kept: the same offer resumes from it. (A real node's windows cannot be driven
    /// that far from outside: at most two unread streams and the held messages fill less than
    /// the connection's window.)
    @Test func theClockRunsOnlyWhileThePeerCouldSendAndSendsNothing() throws {
        let dir = try Directory()
        let inbox = try Inbox(directory: dir.path + "/inbox")
        let peer = try #require(PeerID(bytes: [UInt8](repeating: 9, count: 32)))
        let start = ContinuousClock.now, limit = Duration.seconds(60)
        var (t, offer) = try Self.receiving(inbox, peer, at: start)
        #expect(t.isReceiving)
        #expect(t.awaitedData.map(\.id) == [1] && t.awaitedData.map(\.bytes) == [Session.Wire.maxPayload])

        for i in 1...10 {
            #expect(t.stalled(now: start + limit * i, after: limit, blocked: [1], dataArrived: false).frames.isEmpty, "blocked at \(i) limits")
        }
        for i in 11...20 {
            #expect(t.stalled(now: start + limit * i, after: limit, blocked: [], dataArrived: true).frames.isEmpty, "other data at \(i) limits")
        }
        let lastBusy = start + limit * 20
        #expect(t.stalled(now: lastBusy + limit / 2, after: limit, blocked: [], dataArrived: false).frames.isEmpty)
        let out = t.stalled(now: lastBusy + limit, after: limit, blocked: [], dataArrived: false)
        #expect(out.frames == [.resourceCancel(resourceID: 1, reason: .timeout)])
        #expect(out.dropped == [1])
        guard case .ended(1, false, .timeout, let detail, false, 50_000)? = out.events.first, out.events.count == 1 else {
            Issue.record("not one timeout: \(out.events)")
            return
        }
        #expect(detail.contains("50000 bytes received are kept"), "\(detail)")
        #expect(!t.isReceiving && t.awaitedData.isEmpty)
        #expect(try inbox.receive(offer, from: peer).offset == 50_000, "the part resumes")
    }

    /// A resource whose writer is behind by more than `writeAhead` has its window held back
    /// for the disk: the peer cannot send, so its clock does not run, however long the disk
    /// takes (here the writes are never done).
    @Test func aResourceWaitingForTheDiskIsNotTimedOut() throws {
        let dir = try Directory()
        let inbox = try Inbox(directory: dir.path + "/inbox")
        let peer = try #require(PeerID(bytes: [UInt8](repeating: 8, count: 32)))
        let start = ContinuousClock.now, limit = Duration.seconds(60)
        let over = ConnectionTransfers.writeAhead + 100_000
        var (t, _) = try Self.receiving(inbox, peer, size: 2 * over, first: over, write: false, at: start)
        for i in 1...10 {
            #expect(t.stalled(now: start + limit * i, after: limit, blocked: [], dataArrived: false).frames.isEmpty, "at \(i) limits")
        }
        #expect(t.isReceiving)
    }
}
