import Foundation
@testable import Peer
import Session
import Synchronization
import SystemKit
import Testing

/// The writer that keeps the disk off the connection's queue: writes run in the order given
/// and each reports once; what follows a failed write is skipped (its failure was reported);
/// finishing, suspending and discarding wait for the writes before them.
@Suite struct IncomingFileWriterTests {
    typealias Directory = InboxTests.Directory

    /// What the writes reported, in order (the callbacks run on the writer's queue).
    final class Reports: @unchecked Sendable {
        private let lock = NSLock()
        private var items: [String] = []
        func add(_ s: String) { lock.withLock { items.append(s) } }
        var all: [String] { lock.withLock { items } }
    }

    static func report(_ r: Reports, _ n: Int) -> @Sendable (InboxError?) -> Void {
        { error in r.add(error.map { "\(n): \($0.reason)" } ?? "\(n): ok") }
    }

    /// The writer's verdict on its file, waited for (it comes on the writer's queue).
    static func finished(_ writer: IncomingFileWriter) throws(InboxError) -> ReceivedFile {
        let verdict = Mutex<Result<ReceivedFile, InboxError>?>(nil)
        let done = DispatchSemaphore(value: 0)
        writer.finish { result in
            verdict.withLock { $0 = result }
            done.signal()
        }
        done.wait()
        return try verdict.withLock { $0! }.get()
    }

    /// Many small writes given at once land in order: the file saved is the sender's, and
    /// every write reported before `finish` returned.
    @Test func writesInOrderThenFinishes() throws {
        let dir = try Directory()
        let inbox = try Inbox(directory: dir.path + "/inbox", limits: .init(syncInterval: 10_000))
        let bytes = InboxTests.content(300_007)
        let writer = IncomingFileWriter(try inbox.receive(try InboxTests.offer("w.bin", bytes), from: InboxTests.peer))
        let reports = Reports()
        var n = 0
        for start in stride(from: 0, to: bytes.count, by: 1000) {
            writer.write(Array(bytes[start..<min(start + 1000, bytes.count)]), done: Self.report(reports, n))
            n += 1
        }
        let saved = try Self.finished(writer)
        #expect(reports.all == (0..<n).map { "\($0): ok" })
        #expect(try Data(contentsOf: URL(fileURLWithPath: saved.path)) == Data(bytes))
        #expect(InboxTests.files(dir.path + "/inbox") == [".part", "w.bin"])
    }

    /// A write the file refuses (more bytes than offered) is reported with its reason, once;
    /// the writes after it are skipped and report no error of their own; discarding removes
    /// the part and says how many bytes it had.
    @Test func aFailedWriteIsReportedOnceAndTheRestSkipped() throws {
        let dir = try Directory()
        let inbox = try Inbox(directory: dir.path + "/inbox")
        let bytes = InboxTests.content(5000)
        let writer = IncomingFileWriter(try inbox.receive(try InboxTests.offer("f.bin", bytes), from: InboxTests.peer))
        let reports = Reports()
        writer.write(Array(bytes[0..<4000]), done: Self.report(reports, 0))
        writer.write(Array(repeating: 1, count: 2000), done: Self.report(reports, 1))
        writer.write(Array(bytes[4000...]), done: Self.report(reports, 2))
        #expect(writer.discard() == 4000)
        #expect(reports.all == ["0: ok", "1: \(Reason.protocolError)", "2: ok"])
        #expect(InboxTests.tree(dir.path + "/inbox") == [".part"])
    }

    /// A finish after a failed write (the peer's DONE came before the connection heard of
    /// it) reports that failure, not a count of bytes, and removes the part.
    @Test func aFinishAfterAFailedWriteReportsIt() throws {
        let dir = try Directory()
        let inbox = try Inbox(directory: dir.path + "/inbox")
        let bytes = InboxTests.content(5000)
        let writer = IncomingFileWriter(try inbox.receive(try InboxTests.offer("g.bin", bytes), from: InboxTests.peer))
        writer.write(Array(repeating: 1, count: 6000), done: { _ in })
        do {
            _ = try Self.finished(writer)
            Issue.record("a file with a failed write was saved")
        } catch {
            #expect(error.reason == .protocolError && error.description.contains("more bytes than the 5000 offered"), "\(error)")
        }
        #expect(InboxTests.tree(dir.path + "/inbox") == [".part"])
    }

    /// Suspending comes after the writes given before it and records them, without the caller
    /// waiting (the part's key is free once recorded): the next receive of the same offer
    /// resumes from their end.
    @Test func suspendRecordsEveryWriteBeforeIt() throws {
        let dir = try Directory()
        let inbox = try Inbox(directory: dir.path + "/inbox", limits: .init(syncInterval: 1 << 30))
        let bytes = InboxTests.content(200_000)
        let offer = try InboxTests.offer("s.bin", bytes)
        let writer = IncomingFileWriter(try inbox.receive(offer, from: InboxTests.peer))
        for start in stride(from: 0, to: 120_000, by: 4000) {
            writer.write(Array(bytes[start..<start + 4000]), done: { _ in })
        }
        writer.suspend()
        var recorded = false
        for _ in 0..<2000 where !recorded {
            recorded = inbox.openParts == 0
            if !recorded { Duration.milliseconds(5).sleepBlocking() }
        }
        #expect(recorded, "the part's key is free once the suspend recorded it")
        let again = try Inbox(directory: dir.path + "/inbox", bootID: "another boot").receive(offer, from: InboxTests.peer)
        #expect(again.offset == 120_000, "recorded by the suspend: a new boot trusts only the record")
    }

    /// An offer cancelled while its part was being opened: an empty part made for it goes,
    /// one an earlier transfer left stays for a later resume. Either way the key is free.
    @Test func anAcceptAfterTheOfferEndedLeavesNoEmptyPart() throws {
        let dir = try Directory()
        let inbox = try Inbox(directory: dir.path + "/inbox", duplicateWait: .zero)
        let bytes = InboxTests.content(10_000)
        for earlier in [0, 4_000] {
            let offer = try InboxTests.offer("c.bin", bytes, id: 1)
            if earlier > 0 {
                let part = try inbox.receive(offer, from: InboxTests.peer)
                try part.write(Array(bytes[0..<earlier]))
                part.suspend()
            }
            var t = ConnectionTransfers(role: .listener)
            _ = t.received(.resourceOffer(offer), from: InboxTests.peer, now: .now)
            let file = try inbox.receive(offer, from: InboxTests.peer)
            _ = t.received(.resourceCancel(resourceID: 1, reason: .cancelled), from: InboxTests.peer, now: .now)
            #expect(t.accept(1, file: file, now: .now).frames.isEmpty, "no accept for an ended offer")
            #expect(try FileSystem.names(in: inbox.partDirectory).count == (earlier > 0 ? 2 : 0))
            #expect(try inbox.receive(offer, from: InboxTests.peer).offset == UInt64(earlier), "the key is free again")
        }
    }
}

/// The window of a received resource, without sockets: given back as the bytes arrive while
/// the writer is within `writeAhead`, held back beyond it and given back as the writer
/// catches up; what is held when the resource ends goes back to the connection.
@Suite struct ReceivedWindowTests {
    static let chunk = 64 * 1024

    /// A listener's transfers with offer 1 (`size` bytes) accepted into a fresh inbox.
    static func accepted(_ size: Int, _ dir: InboxTests.Directory) throws -> ConnectionTransfers {
        var t = ConnectionTransfers(role: .listener)
        let bytes = InboxTests.content(size)
        let offer = try InboxTests.offer("w.bin", bytes, id: 1)
        _ = t.received(.resourceOffer(offer), from: InboxTests.peer, now: .now)
        let inbox = try Inbox(directory: dir.path + "/inbox")
        let out = t.accept(1, file: try inbox.receive(offer, from: InboxTests.peer), now: .now)
        #expect(out.frames.count == 1, "the accept goes")
        return t
    }

    @Test func heldBackOnlyWhileTheWriterIsBehind() throws {
        let dir = try InboxTests.Directory()
        let chunks = ConnectionTransfers.writeAhead / Self.chunk + 3
        var t = try Self.accepted(chunks * Self.chunk, dir)
        var given = 0, writes = 0
        // Nothing written yet: the first writeAhead's worth is given back at once, the rest held.
        for _ in 0..<chunks {
            let out = t.received(.resourceData(resourceID: 1, data: [UInt8](repeating: 7, count: Self.chunk)), from: InboxTests.peer, now: .now)
            given += out.consumed.reduce(0) { $0 + $1.bytes }
            writes += out.writes.count
        }
        #expect(writes == chunks, "every chunk goes to the writer")
        #expect(given == ConnectionTransfers.writeAhead, "held beyond writeAhead: \(given)")
        // Writes done one by one: while more than writeAhead waits, nothing goes back; the
        // write that brings the writer within it gives back all that was held, at once.
        for n in 1...3 {
            #expect(t.written(1, bytes: Self.chunk, error: nil).consumed.isEmpty, "still behind after \(n) writes")
        }
        #expect(t.written(1, bytes: Self.chunk, error: nil).consumed.map(\.bytes) == [3 * Self.chunk])
        #expect(t.written(1, bytes: Self.chunk, error: nil).consumed.isEmpty, "nothing more was held")
    }

    @Test func whatIsHeldGoesBackWhenTheResourceEnds() throws {
        let dir = try InboxTests.Directory()
        let chunks = ConnectionTransfers.writeAhead / Self.chunk + 2
        var t = try Self.accepted(chunks * Self.chunk, dir)
        for _ in 0..<chunks {
            _ = t.received(.resourceData(resourceID: 1, data: [UInt8](repeating: 7, count: Self.chunk)), from: InboxTests.peer, now: .now)
        }
        let out = t.cancel(1, reason: .cancelled, detail: "test")
        #expect(out.released == 2 * Self.chunk, "the held window back to the connection")
        #expect(t.written(1, bytes: Self.chunk, error: nil).consumed.isEmpty, "a late write of an ended resource gives nothing twice")
        #expect(InboxTests.tree(dir.path + "/inbox") == [".part"], "the part is gone")
    }

    /// A failed write cancels the resource with the write's reason, once.
    @Test func aFailedWriteCancels() throws {
        let dir = try InboxTests.Directory()
        var t = try Self.accepted(Self.chunk, dir)
        _ = t.received(.resourceData(resourceID: 1, data: [UInt8](repeating: 7, count: Self.chunk)), from: InboxTests.peer, now: .now)
        let out = t.written(1, bytes: Self.chunk, error: .io("writing", SystemError(call: "write", code: ENOSPC)))
        #expect(out.frames.contains { if case .resourceCancel(1, .noSpace) = $0 { true } else { false } }, "\(out.frames)")
        #expect(t.written(1, bytes: 0, error: .invalid("again")).frames.isEmpty, "ended: no second cancel")
    }

    /// A resource whose every byte came is being verified and saved by its writer, off the
    /// connection's lock: nothing but that verdict ends it. Not the user's cancel (too late),
    /// not the peer's cancel crossing it, not the session's end, not the look for stalls;
    /// the verdict then reports it `received` (with RESOURCE_DONE only while the resource
    /// is still live on the wire) or `ended` with the failure's reason and a cancel.
    /// `frame` from the peer, with the writes it asks handed to their writers (as the
    /// connection does).
    @discardableResult
    static func arrived(_ frame: Frame, _ t: inout ConnectionTransfers) -> ConnectionTransfers.Outcome {
        let out = t.received(frame, from: InboxTests.peer, now: .now)
        for w in out.writes { w.writer.write(w.bytes, done: { _ in }) }
        return out
    }

    @Test(arguments: [false, true])
    func aResourceBeingSavedEndsOnlyByItsVerdict(peerCancels: Bool) throws {
        let dir = try InboxTests.Directory()
        var t = try Self.accepted(Self.chunk, dir)
        #expect(Self.arrived(.resourceData(resourceID: 1, data: InboxTests.content(Self.chunk)), &t).writes.count == 1)
        let done = t.received(.resourceDone(resourceID: 1), from: InboxTests.peer, now: .now)
        #expect(done.finishes.map(\.id) == [1] && done.events.isEmpty && done.frames.isEmpty, "the verdict is the writer's: \(done.events)")
        #expect(!t.isReceiving && t.awaitedData.isEmpty, "no data awaited, no stall to look for")
        let cancelled = t.cancel(1, reason: .cancelled, detail: "test")
        #expect(cancelled.frames.isEmpty && cancelled.events.isEmpty, "a cancel now is too late")
        if peerCancels {
            let crossed = t.received(.resourceCancel(resourceID: 1, reason: .cancelled), from: InboxTests.peer, now: .now)
            #expect(crossed.events.isEmpty, "the peer's cancel crossed the verdict: \(crossed.events)")
        }
        let later = ContinuousClock.now + .seconds(3600)
        #expect(t.stalled(now: later, after: .seconds(1), blocked: [], dataArrived: false).frames.isEmpty)
        let writer = try #require(done.finishes.first?.writer)
        let saved = try IncomingFileWriterTests.finished(writer)
        let verdict = t.finished(1, .success(saved))
        #expect(verdict.events.count == 1 && { if case .received(1, saved) = verdict.events[0] { true } else { false } }())
        let sentDone = verdict.frames.contains { if case .resourceDone(1) = $0 { true } else { false } }
        #expect(sentDone == !peerCancels, "DONE only for a resource still live on the wire: \(verdict.frames)")
        #expect(t.isEmpty && t.finished(1, .success(saved)).events.isEmpty, "reported once")
    }

    /// The session ends while the file is being saved: the part is not suspended under it and
    /// nothing is reported interrupted; the verdict that follows reports it received.
    @Test func theSessionsEndLeavesAFileBeingSavedToItsVerdict() throws {
        let dir = try InboxTests.Directory()
        var t = try Self.accepted(Self.chunk, dir)
        Self.arrived(.resourceData(resourceID: 1, data: InboxTests.content(Self.chunk)), &t)
        let done = t.received(.resourceDone(resourceID: 1), from: InboxTests.peer, now: .now)
        let ended = t.connectionEnded(.normal, "test", byPeer: true)
        #expect(ended.events.isEmpty, "\(ended.events)")
        let saved = try IncomingFileWriterTests.finished(try #require(done.finishes.first?.writer))
        let verdict = t.finished(1, .success(saved))
        #expect(verdict.frames.isEmpty, "the session is gone: nothing to tell the peer")
        #expect(verdict.events.count == 1 && { if case .received = verdict.events[0] { true } else { false } }())
        #expect(InboxTests.files(dir.path + "/inbox") == [".part", "w.bin"])
    }

    /// A verdict that the file cannot be saved (a wrong hash here) ends the resource with its
    /// reason, both sides: RESOURCE_CANCEL to the sender, `ended` here.
    @Test func aFailedVerdictCancels() throws {
        let dir = try InboxTests.Directory()
        var t = try Self.accepted(Self.chunk, dir)
        Self.arrived(.resourceData(resourceID: 1, data: [UInt8](repeating: 7, count: Self.chunk)), &t)
        let done = t.received(.resourceDone(resourceID: 1), from: InboxTests.peer, now: .now)
        let writer = try #require(done.finishes.first?.writer)
        var failure: InboxError?
        do { _ = try IncomingFileWriterTests.finished(writer) } catch { failure = error }
        let verdict = t.finished(1, .failure(try #require(failure)))
        #expect(verdict.frames.contains { if case .resourceCancel(1, .hashMismatch) = $0 { true } else { false } }, "\(verdict.frames)")
        #expect(verdict.events.count == 1 && { if case .ended(1, false, .hashMismatch, _, false, _) = verdict.events[0] { true } else { false } }())
        #expect(InboxTests.tree(dir.path + "/inbox") == [".part"], "the part is gone")
    }

    /// The writes the connection counts without a trip to its queue: only while no window is
    /// held back for the resource (or it has ended); the write that brings the writer back
    /// within `writeAhead` while some is held goes through `written`, which gives it back.
    @Test func writesAreCountedQuietlyOnlyWhileNothingIsHeld() throws {
        let dir = try InboxTests.Directory()
        let chunks = ConnectionTransfers.writeAhead / Self.chunk + 2
        var t = try Self.accepted(chunks * Self.chunk, dir)
        let data = Frame.resourceData(resourceID: 1, data: [UInt8](repeating: 7, count: Self.chunk))
        // Within writeAhead: each chunk's window goes back at once and its write is quiet.
        _ = t.received(data, from: InboxTests.peer, now: .now)
        var quiet = t.writtenQuietly(1, bytes: Self.chunk)
        #expect(quiet)
        // Past writeAhead: window held, so the writes are not quiet (and not counted by the try).
        for _ in 0..<chunks - 1 { _ = t.received(data, from: InboxTests.peer, now: .now) }
        quiet = t.writtenQuietly(1, bytes: Self.chunk)
        #expect(!quiet)
        var given = 0
        for _ in 0..<chunks - 1 { given += t.written(1, bytes: Self.chunk, error: nil).consumed.reduce(0) { $0 + $1.bytes } }
        #expect(given == Self.chunk, "what was held went back through written")
        quiet = t.writtenQuietly(1, bytes: 0)
        #expect(quiet, "nothing held any more")
        _ = t.cancel(1, reason: .cancelled, detail: "test")
        quiet = t.writtenQuietly(1, bytes: Self.chunk)
        #expect(quiet, "an ended resource's late write is quiet")
    }
}
