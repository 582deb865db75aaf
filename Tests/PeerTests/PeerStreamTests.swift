import Foundation
import Peer
import Session
import Synchronization
import Testing

/// Byte streams between real nodes on loopback: every byte arrives once and in order, the
/// opener hears `normal` only after the receiver took them all, a reader that stops holds the
/// opener at the stream's window without losing anything, and declines and the session's end
/// are reported on both sides.
@Suite(.memoryHeavy) struct PeerStreamTests {
    typealias Node = PeerNodeTests.Node

    /// `b` in session with `a`.
    static func pair(consume: Bool = true) async throws -> (a: Node, b: Node) {
        let a = try Node("reader", consumeStreams: consume)
        let b = try Node("writer")
        _ = try await b.node.connect(to: a.address)
        #expect(await a.wait("connected", PeerNodeTests.isConnected) != nil)
        return (a, b)
    }

    /// Gives the stream a batch and waits until it is queued (true) or the stream ended (false).
    static func write(_ ref: PeerStreamRef, _ chunks: [[UInt8]]) async -> Bool {
        await withCheckedContinuation { k in ref.write(chunks) { k.resume(returning: $0) } }
    }

    static func opened(_ n: Node) async -> PeerStreamRef? {
        guard case .stream(.opened(let r, _))? = await n.wait("opened", { if case .stream(.opened) = $0 { true } else { false } }) else { return nil }
        return r
    }

    static func ended(_ n: Node, outgoing: Bool) async -> (reason: Reason, byPeer: Bool, bytes: UInt64)? {
        let e = await n.wait("ended") { if case .stream(.ended(_, outgoing, _, _, _, _)) = $0 { true } else { false } }
        guard case .stream(.ended(_, _, let reason, _, let byPeer, let bytes))? = e else { return nil }
        return (reason, byPeer, bytes)
    }

    /// The bytes of stream `id` that `n` was given, in order.
    static func received(_ n: Node, _ ref: PeerStreamRef) -> [UInt8] {
        n.events.withLock { es in
            es.flatMap { e -> [UInt8] in if case .stream(.data(let r, let b)) = e, r == ref { b } else { [] } }
        }
    }

    static func content(_ n: Int) -> [UInt8] {
        var x: UInt64 = 0x9E37_79B9_7F4A_7C15
        return (0..<n).map { _ in
            x ^= x << 13; x ^= x >> 7; x ^= x << 17
            return UInt8(truncatingIfNeeded: x)
        }
    }

    @Test func everyByteArrivesOnceInOrderAndTheOpenerHearsWhenTheReaderHasThem() async throws {
        let (a, b) = try await Self.pair()
        defer { a.node.stop(); b.node.stop() }
        let ref = try b.node.openStream(to: a.node.peerID, name: "camera")
        let bytes = Self.content(3 * 1_048_576 + 5)
        // Batches of odd sizes: frames are cut at 64 KiB whatever the writer gives.
        var offset = 0
        while offset < bytes.count {
            let end = min(offset + 100_003, bytes.count)
            #expect(await Self.write(ref, [Array(bytes[offset..<end])]))
            offset = end
        }
        ref.finish()
        let incoming = try #require(await Self.opened(a))
        #expect(incoming.peer == b.node.peerID)
        #expect(await a.wait("finished") { if case .stream(.finished(incoming)) = $0 { true } else { false } } != nil)
        #expect(Self.received(a, incoming) == bytes)
        // Not before the reader's confirmation.
        #expect(b.count { if case .stream(.ended) = $0 { true } else { false } } == 0)
        incoming.close(reason: .normal, detail: "read")
        let sent = try #require(await Self.ended(b, outgoing: true))
        #expect(sent.reason == .normal && sent.byPeer && sent.bytes == UInt64(bytes.count))
        let got = try #require(await Self.ended(a, outgoing: false))
        #expect(got.reason == .normal && !got.byPeer && got.bytes == UInt64(bytes.count))
        #expect(await !Self.write(ref, [[1]]), "an ended stream takes nothing")
    }

    /// The reader takes nothing: the opener's batches stop being queued once the stream's
    /// window (256 KiB) and the lanes' four frames are used; when the reader takes the bytes,
    /// the rest follows, nothing lost.
    @Test func aReaderThatStopsHoldsTheOpenerAndLosesNothing() async throws {
        let (a, b) = try await Self.pair(consume: false)
        defer { a.node.stop(); b.node.stop() }
        let ref = try b.node.openStream(to: a.node.peerID, name: "slow")
        let bytes = Self.content(2 * 1_048_576)
        let chunk = 65_536
        let queued = Mutex(0)
        let writer = Task {
            for start in stride(from: 0, to: bytes.count, by: chunk) {
                guard await Self.write(ref, [Array(bytes[start..<(start + chunk)])]) else { return }
                queued.withLock { $0 += chunk }
            }
            ref.finish()
        }
        let incoming = try #require(await Self.opened(a))
        // The window's worth arrives, then nothing more while nobody reads.
        // (The condition reads the events under their lock: checked at each event, not inside
        // `wait`, which holds it.)
        _ = await a.signal.wait(timeout: .seconds(10)) { Self.received(a, incoming).count >= FlowWindow.initialStream }
        try await Task.sleep(for: .milliseconds(300))
        #expect(Self.received(a, incoming).count == FlowWindow.initialStream, "no byte beyond the window")
        #expect(queued.withLock { $0 } <= FlowWindow.initialStream + 5 * chunk, "the writer is held back")
        // The reader takes what it has, and keeps taking: everything follows.
        var taken = 0
        while taken < bytes.count {
            let have = Self.received(a, incoming).count
            if have > taken {
                incoming.consumed(have - taken)
                taken = have
            } else {
                let before = taken
                _ = await a.signal.wait(timeout: .seconds(10)) { Self.received(a, incoming).count > before }
                if Self.received(a, incoming).count == taken { break }
            }
        }
        await writer.value
        #expect(Self.received(a, incoming) == bytes)
        #expect(await a.wait("finished") { if case .stream(.finished(incoming)) = $0 { true } else { false } } != nil)
    }

    /// Streams that end unread (declined after their window arrived) give the connection's
    /// window back: after six of them (1.5 MiB, more than the 1 MiB window) a message still
    /// goes through.
    @Test func streamsEndedUnreadGiveTheWindowBack() async throws {
        let (a, b) = try await Self.pair(consume: false)
        defer { a.node.stop(); b.node.stop() }
        for i in 0..<6 {
            let ref = try b.node.openStream(to: a.node.peerID, name: "unread-\(i)")
            for _ in 0..<4 { _ = await Self.write(ref, [Self.content(65_536)]) }
            guard case .stream(.opened(let incoming, _))? = await a.wait("opened \(i)", { if case .stream(.opened(_, "unread-\(i)")) = $0 { true } else { false } }) else {
                Issue.record("stream \(i) was not reported")
                return
            }
            let full = await a.signal.wait(timeout: .seconds(10)) { Self.received(a, incoming).count == FlowWindow.initialStream }
            #expect(full, "stream \(i): its window's worth arrived")
            incoming.close(reason: .declined, detail: "not read")
            let ends = await b.signal.wait(timeout: .seconds(10)) { b.count { if case .stream(.ended(_, true, .declined, _, _, _)) = $0 { true } else { false } } == i + 1 }
            #expect(ends, "stream \(i): the writer heard the decline")
        }
        let message = Self.content(700_000)
        _ = try await b.node.send(message, to: [a.node.peerID], reliable: true)
        let got = await a.wait("message") { $0.hasMessage { $0.count == message.count } }
        #expect(got != nil, "the message went through the connection's window")
    }

    @Test func aDeclinedStreamEndsOnBothSides() async throws {
        let (a, b) = try await Self.pair()
        defer { a.node.stop(); b.node.stop() }
        let ref = try b.node.openStream(to: a.node.peerID, name: "unwanted")
        #expect(await Self.write(ref, [Self.content(1000)]))
        let incoming = try #require(await Self.opened(a))
        incoming.close(reason: .declined, detail: "no")
        let e = try #require(await Self.ended(b, outgoing: true))
        #expect(e.reason == .declined && e.byPeer)
        #expect(await !Self.write(ref, [[1]]))
        // The session is unaffected: another stream goes through.
        let again = try b.node.openStream(to: a.node.peerID, name: "wanted")
        #expect(await Self.write(again, [[1, 2, 3]]))
        again.finish()
        #expect(await a.wait("finished") { if case .stream(.finished(let r)) = $0 { r == again } else { false } } != nil)
    }

    @Test func theSessionsEndEndsItsStreams() async throws {
        let (a, b) = try await Self.pair()
        defer { a.node.stop(); b.node.stop() }
        let ref = try b.node.openStream(to: a.node.peerID, name: "cut")
        #expect(await Self.write(ref, [[1, 2, 3]]))
        _ = try #require(await Self.opened(a))
        try b.node.disconnect(a.node.peerID)
        let out = try #require(await Self.ended(b, outgoing: true))
        let into = try #require(await Self.ended(a, outgoing: false))
        // The session was closed normally; its streams did not end normally (`normal` would
        // say the reader has every byte).
        #expect(out.reason == .cancelled && !out.byPeer)
        #expect(into.reason == .cancelled && into.byPeer)
    }

    @Test func badNamesAndMissingSessionsAreRefused() async throws {
        let (a, b) = try await Self.pair()
        defer { a.node.stop(); b.node.stop() }
        #expect(throws: PeerError.self) { try b.node.openStream(to: a.node.peerID, name: "a/b") }
        #expect(throws: PeerError.self) { try b.node.openStream(to: b.node.peerID, name: "x") }
    }
}
