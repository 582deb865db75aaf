import Foundation
@testable import Peer
import Synchronization
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
        let ended = await a.wait("ended") { if case .resource(.ended(_, .timeout, _, false)) = $0 { true } else { false } }
        guard case .resource(.ended(let t, _, let detail, _))? = ended else {
            Issue.record("no timeout reported")
            return
        }
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

    /// The clock of a resource runs only while the peer could send its next chunk: ten
    /// limits without window (the connection's own, `blocked`) end nothing, and the limit
    /// counts from the last look that found it blocked. Then it ends `timeout`, the part with
    /// what was written kept: the same offer resumes from it. (A real node's windows cannot be
    /// driven that far from outside: at most two unread streams and the held messages fill
    /// less than the connection's window; the connection asks the machine, `peerMaySend`,
    /// tested in FlowControlTests.)
    @Test func theClockRunsOnlyWhileThePeerCouldSend() async throws {
        let dir = try Directory()
        let inbox = try Inbox(directory: dir.path + "/inbox")
        let peer = try #require(PeerID(bytes: [UInt8](repeating: 9, count: 32)))
        let content = InboxTests.content(300_000)
        let offer = ResourceOffer(resourceID: 1, name: "waits.bin", size: 300_000, sha256: try SHA256Digest.hash(content), mediaType: "x/y")
        var t = ConnectionTransfers(role: .listener)
        let start = ContinuousClock.now, limit = Duration.seconds(60)
        _ = t.received(.resourceOffer(offer), from: peer, now: start)
        #expect(!t.isReceiving, "an offer not yet accepted has its own timeout")
        _ = t.accept(1, file: try inbox.receive(offer, from: peer), now: start)
        let data = t.received(.resourceData(resourceID: 1, data: Array(content[0..<50_000])), from: peer, now: start)
        let written = AsyncSignal(), done = Mutex(false)
        for w in data.writes { w.writer.write(w.bytes) { _ in done.withLock { $0 = true }; written.fire() } }
        #expect(await written.wait(timeout: .seconds(10)) { done.withLock { $0 } })
        #expect(t.isReceiving)
        #expect(t.awaitedData.map(\.id) == [1] && t.awaitedData.map(\.bytes) == [Session.Wire.maxPayload])

        for i in 1...10 {
            #expect(t.stalled(now: start + limit * i, after: limit, blocked: [1]).frames.isEmpty, "blocked at \(i) limits")
        }
        let lastBlocked = start + limit * 10
        #expect(t.stalled(now: lastBlocked + limit / 2, after: limit, blocked: []).frames.isEmpty)
        let out = t.stalled(now: lastBlocked + limit, after: limit, blocked: [])
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
}
