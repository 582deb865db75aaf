// Linux Dispatch has no Sendable annotations; its queues are thread-safe.
@preconcurrency import Dispatch
import Foundation
import Logging
import Peer
import Session
import Synchronization
import SystemKit
import TLS
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Flow control between real nodes on loopback (peer-protocol.md section 7): a receiver that
/// holds its credit bounds what the sender queues (sends then fail `busy` or wait) and loses
/// nothing; datagrams overtake a large message; a hand-made peer that sends more than it was
/// granted is closed with `flow-control`.
@Suite(.memoryHeavy) struct PeerFlowTests {
    typealias Node = PeerNodeTests.Node

    static func messages(_ n: PeerNodeTests.Node, from peer: PeerID) -> [[UInt8]] {
        n.messages.compactMap { p, m, reliable in p == peer && reliable ? m : nil }
    }

    /// A node (`name`, encryption optional) in session with a hand-made peer that dialled it
    /// in plain text; the caller closes the peer and stops the node.
    static func rawSession(_ name: String, inbox: Inbox? = nil, policy: ResourcePolicy = .all,
                           consumeStreams: Bool = true, transferIdleTimeout: Duration? = nil) async throws -> (a: Node, raw: RawPeer, me: PeerID) {
        // The raw peer answers no PING: with the default (2 s, a peer silent 8 s is lost) the
        // node rightly dropped it mid-test on a loaded machine ("send: Broken pipe"). These
        // tests are about frames, not liveness (PeerNodeTests has those).
        let a = try Node(name, encryption: .optional, ping: .seconds(60), inbox: inbox, acceptResources: policy, consumeStreams: consumeStreams,
                         transferIdleTimeout: transferIdleTimeout)
        do {
            let raw = try await RawPeer.connect(port: a.node.port)
            do {
                let me = try await onThread { try raw.handshakeAsDialer() }
                #expect(await a.wait("connected", PeerNodeTests.isConnected) != nil)
                return (a, raw, me)
            } catch {
                raw.close()
                throw error
            }
        } catch {
            a.node.stop()
            throw error
        }
    }

    static func numbered(_ i: Int, size: Int) -> [UInt8] {
        withUnsafeBytes(of: UInt32(i).bigEndian, Array.init) + [UInt8](repeating: UInt8(truncatingIfNeeded: i), count: size - 4)
    }

    /// A batch (a data stream's `send(messages:to:)`) of many small messages, far more than
    /// the sender's queue holds while the receiver holds its credit for a moment: the batch
    /// waits for room instead of failing, and every message arrives once, in order.
    /// The peer dials again over a session this side still thinks up (it saw the link drop
    /// first): the new connection carries the session, and the old one's session is reported
    /// ended (`replaced`, was connected). It was not: a client saw `connected` twice with no
    /// end between, and the peer's message stream on this side never ended.
    @Test func aSessionReplacedByThePeersNewConnectionIsReportedEnded() async throws {
        let (a, raw, me) = try await Self.rawSession("replaced")
        defer { raw.close(); a.node.stop() }
        let again = try await RawPeer.connect(port: a.node.port)
        defer { again.close() }
        _ = try await onThread { try again.handshakeAsDialer(as: me) }
        #expect(await a.signal.wait(timeout: .seconds(10)) { a.count(PeerNodeTests.isConnected) == 2 }, "the new connection's session")
        let ended = await a.wait("the old session's end") {
            if case .disconnected(let d) = $0 { d.wasConnected && d.reason == .replaced } else { false }
        }
        #expect(ended != nil, "the replaced session is reported ended")
        #expect(a.node.sessions.count == 1)
    }

    @Test func aBatchLargerThanTheQueueWaitsForRoomAndArrivesInOrder() async throws {
        let bound = 65_536
        let a = try Node("receiver"), b = try Node("sender", maxQueuedBytes: bound)
        defer { a.node.stop(); b.node.stop() }
        _ = try await b.node.connect(to: a.address)
        #expect(await a.wait("connected", PeerNodeTests.isConnected) != nil)
        a.node.holdMessages(from: b.node.peerID, true)
        let batch = (0..<3000).map { Self.numbered($0, size: 1000) }  // 3 MB: 45 times the bound
        let sending = Task { try await b.node.send(messages: batch, to: a.node.peerID) }
        // The window and the queue fill; the batch waits (it has not failed meanwhile).
        let deadline = ContinuousClock.now + .seconds(10)
        while (b.node.sessions.first?.queuedBytes ?? 0) < bound / 2, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(10))
        }
        #expect(Self.messages(a, from: b.node.peerID).count < batch.count, "held: not everything arrived")
        a.node.holdMessages(from: b.node.peerID, false)
        try await sending.value
        let last = batch[batch.count - 1]
        _ = await a.wait("the last", timeout: .seconds(30)) { $0.hasMessage { $0 == last } }
        #expect(Self.messages(a, from: b.node.peerID) == batch, "every message once, in order, unchanged")
    }

    /// The receiver stops taking messages: the sender's window runs out, its queue fills to
    /// its bound and no further (`send(wait: false)` fails busy), and once the receiver takes
    /// messages again every one arrives once, in order.
    @Test func aReceiverThatStopsTakingBoundsTheSenderAndLosesNothing() async throws {
        let bound = 1_048_576
        let a = try Node("receiver"), b = try Node("sender", maxQueuedBytes: bound)
        defer { a.node.stop(); b.node.stop() }
        _ = try await b.node.connect(to: a.address)
        #expect(await a.wait("connected", PeerNodeTests.isConnected) != nil)
        a.node.holdMessages(from: b.node.peerID, true)
        let size = 60_000
        var sent = 0
        var busy: PeerError?
        while busy == nil {
            do {
                _ = try await b.node.send(Self.numbered(sent, size: size), to: [a.node.peerID], reliable: true, wait: false)
                sent += 1
            } catch let e as PeerError {
                busy = e
            }
            // Far more than the window and the bound: the loop must have ended long before.
            if sent > 1000 { break }
        }
        guard case .busy(let p, let n)? = busy else { Issue.record("never busy: \(String(describing: busy))"); return }
        #expect(p == a.node.peerID.shortText && n == 0)
        let queued = try #require(b.node.sessions.first?.queuedBytes)
        #expect(queued <= bound && queued > bound - 2 * size, "the queue is full, and no fuller than its bound")
        // What went out is what the window allowed: 512 KiB of messages, not the queue.
        let beforeRelease = sent
        #expect(sent * (size + 16) >= bound && sent * size <= bound + FlowWindow.messageWindow + size)
        #expect(Self.messages(a, from: b.node.peerID).count * (size + 4) <= FlowWindow.messageWindow)

        // The receiver takes messages again; the rest are sent waiting for room.
        a.node.holdMessages(from: b.node.peerID, false)
        let total = beforeRelease + 40
        for i in beforeRelease..<total {
            _ = try await b.node.send(Self.numbered(i, size: size), to: [a.node.peerID], reliable: true, wait: true)
        }
        let all = await a.signal.wait(timeout: .seconds(30)) { Self.messages(a, from: b.node.peerID).count >= total }
        #expect(all)
        let got = Self.messages(a, from: b.node.peerID)
        #expect(got.count == total && got == (0..<total).map { Self.numbered($0, size: size) }, "each once, in order")
    }

    /// A datagram sent after a 16 MiB message arrives before the message does: it waits
    /// behind at most one frame, never behind the message's credit.
    @Test func aDatagramIsNotStuckBehindALargeMessage() async throws {
        let a = try Node("receiver"), b = try Node("sender")
        defer { a.node.stop(); b.node.stop() }
        _ = try await b.node.connect(to: a.address)
        #expect(await a.wait("connected", PeerNodeTests.isConnected) != nil)
        // Held credit: the message cannot complete before the release below, whatever the
        // scheduling, so the order seen is the lanes' doing.
        a.node.holdMessages(from: b.node.peerID, true)
        let big = (0..<Wire.maxMessage).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        _ = try await b.node.send(big, to: [a.node.peerID], reliable: true)
        _ = try await b.node.send([0xDA, 0x7A], to: [a.node.peerID], reliable: false)
        let datagram = await a.wait("datagram") { if case .datagram(_, [0xDA, 0x7A]) = $0 { true } else { false } }
        #expect(datagram != nil)
        #expect(Self.messages(a, from: b.node.peerID).isEmpty)
        a.node.holdMessages(from: b.node.peerID, false)
        #expect(await a.wait("big", timeout: .seconds(60)) { $0.hasMessage { $0 == big } } != nil)
        let order = a.messages.map { $0.2 }
        #expect(order == [false, true])
    }

    /// A peer that sends more than it was granted is closed with `flow-control`: stream data
    /// past a stream's 256 KiB window (its reader takes nothing), and messages past the window
    /// while the receiver holds its credit.
    @Test(arguments: [false, true])
    func aPeerSendingBeyondItsCreditIsClosed(messages: Bool) async throws {
        let (a, raw, me) = try await Self.rawSession("strict", consumeStreams: false)
        defer { raw.close(); a.node.stop() }
        if messages { a.node.holdMessages(from: me, true) } else {
            try await onThread { try raw.send(.streamOpen(streamID: 1, name: "unread")) }
        }
        // Full frames, the last past the window of its stream: 256 KiB for a stream, 512 KiB
        // for messages (the receiver grants the rest as the session connects).
        let count = (messages ? FlowWindow.messageWindow : FlowWindow.initialStream) / Wire.maxPayload + 1
        let frames: [Frame] = (0..<count).map { i in
            messages ? .message(MessageFragment(messageID: 1, data: [UInt8](repeating: 1, count: Wire.maxPayload - 4), isFinal: i == count - 1))
                     : .streamData(streamID: 1, data: [UInt8](repeating: 1, count: Wire.maxPayload))
        }
        try await onThread { for f in frames { try raw.send(f) } }
        let close = try await onThread { try raw.read { if case .close = $0 { true } else { false } } }
        guard case .close(let reason, let text)? = close else { Issue.record("no CLOSE: \(String(describing: close))"); return }
        #expect(reason == .flowControl && text.contains("window had 0 left"), "\(text)")
        let ended = await a.wait("disconnected") { if case .disconnected = $0 { true } else { false } }
        guard case .disconnected(let d)? = ended else { Issue.record("not reported"); return }
        #expect(d.reason == .flowControl && !d.byPeer && d.peer == me)
    }
}

extension PeerFlowTests {
    /// A CREDIT that would grow a window past 2^31 - 1 closes with `flow-control`.
    @Test func aCreditPastTheMaximumWindowCloses() async throws {
        let (a, raw, _) = try await Self.rawSession("strict")
        defer { raw.close(); a.node.stop() }
        try await onThread { try raw.send(.credit(streamID: 0, streamBytes: UInt32(FlowWindow.maximum), connectionBytes: 0)) }
        let close = try await onThread { try raw.read { if case .close = $0 { true } else { false } } }
        guard case .close(let reason, let text)? = close else { Issue.record("no CLOSE: \(String(describing: close))"); return }
        #expect(reason == .flowControl && text.contains("past 2147483647"), "\(text)")
    }

    /// CREDITs for stream ids that are not there (made up, or ended before the CREDIT came),
    /// and data frames for streams and resources never opened, leave the node no state:
    /// thousands of them, and the session goes on as before.
    @Test func creditsForStreamsThatAreNotThereLeaveNothing() async throws {
        let (a, raw, _) = try await Self.rawSession("credits")
        defer { raw.close(); a.node.stop() }
        #expect(try await ResourceWireTests.stillUp(a, raw, 1))
        let before = a.node.flowEntryCounts
        try await onThread {
            for id in 1...5_000 as ClosedRange<UInt32> {
                try raw.send(.credit(streamID: id, streamBytes: 65_536, connectionBytes: 0))
            }
            // Stream bytes no window could take, for an id not in progress: dropped, not a
            // window past the maximum (that closed the session, and lost its connection bytes).
            try raw.send(.credit(streamID: 5_001, streamBytes: UInt32.max, connectionBytes: 0))
            // Data for streams and resources never opened: each refused, and counted by the
            // machine against the windows, which must not keep an entry for the id either.
            for id in 6_001...6_100 as ClosedRange<UInt32> {
                try raw.send(.streamData(streamID: id, data: [1, 2, 3]))
                try raw.send(.resourceData(resourceID: id + 1_000, data: [4, 5, 6]))
            }
        }
        // Frames are handled in order: once this message is in, so are the CREDITs.
        #expect(try await ResourceWireTests.stillUp(a, raw, 2))
        #expect(a.node.flowEntryCounts == before, "\(before)")
        #expect(before.count == 1)
    }

    /// A node without an inbox declines every offered resource at once, as peer-protocol.md
    /// asks; a stream opened is reported to the application, a third at once is answered
    /// `busy`, and one with an id of the node's own parity `protocol-error`; the session goes on.
    @Test func offersAreDeclinedAndStreamOpensReported() async throws {
        let (a, raw, me) = try await Self.rawSession("declines")
        defer { raw.close(); a.node.stop() }
        let offer = ResourceOffer(resourceID: 3, name: "../../x.png", size: 10, sha256: [UInt8](repeating: 1, count: 32), mediaType: "image/png")
        try await onThread { try raw.send(.resourceOffer(offer)) }
        let decline = try await onThread { try raw.read { if case .resourceDecline = $0 { true } else { false } } }
        #expect(decline == .resourceDecline(resourceID: 3, reason: .declined))
        try await onThread {
            for (id, name) in [(5, "video"), (7, "audio"), (9, "third"), (10, "ours")] { try raw.send(.streamOpen(streamID: UInt32(id), name: name)) }
        }
        let opened = await a.wait("opened") { if case .stream(.opened(let r, "audio")) = $0 { r.id == 7 } else { false } }
        #expect(opened != nil && a.count { if case .stream(.opened) = $0 { true } else { false } } == 2)
        let busy = try await onThread { try raw.read { if case .streamClose = $0 { true } else { false } } }
        #expect(busy == .streamClose(streamID: 9, reason: .busy))
        let wrongSide = try await onThread { try raw.read { if case .streamClose = $0 { true } else { false } } }
        #expect(wrongSide == .streamClose(streamID: 10, reason: .protocolError))
        // The session is still up: a message arrives.
        try await onThread { try raw.send(.message(MessageFragment(messageID: 1, data: Array("still here".utf8), isFinal: true))) }
        let got = await a.wait("message") { $0.hasMessage { $0 == Array("still here".utf8) } }
        #expect(got != nil && a.node.sessions.first?.peer == me)
    }

    /// A peer that does not read its socket: once the transport's buffers are full the
    /// datagram lane fills (32) and the newest are dropped and counted; sends never wait.
    @Test func datagramsToAPeerThatDoesNotReadAreDroppedAndCounted() async throws {
        let (a, raw, me) = try await Self.rawSession("sender")
        defer { raw.close(); a.node.stop() }
        // 400 datagrams of 64 KiB (26 MB): more than the kernel's buffers on both ends (the
        // raw peer's is fixed small, the sender's is at most tcp_wmem's 4 MiB) plus the lane's 32.
        let datagram = [UInt8](repeating: 0x5A, count: Wire.maxPayload)
        for _ in 0..<400 { _ = try await a.node.send(datagram, to: [me], reliable: false) }
        let s = try #require(a.node.sessions.first)
        #expect(s.droppedDatagrams > 0 && s.droppedDatagrams < 400, "\(s.droppedDatagrams) dropped")
        #expect(s.queuedBytes <= 32 * (Wire.maxPayload + Wire.headerSize) + 1024, "the lane's bound")
    }
}

/// A peer written by hand on a blocking TCP socket: plain text, frames encoded and decoded
/// with the Session module, nothing more (no flow control, no liveness).
final class RawPeer: Sendable {
    let fd: Int32
    private let decoder = Mutex(FrameDecoder())

    private init(fd: Int32) { self.fd = fd }

    static func connect(port: UInt16) async throws -> RawPeer {
        try await onThread {
            guard let address = try TCPSocket.resolve(try HostPort("127.0.0.1:\(port)")).first else { throw TestSupportError("no address") }
            let fd = try TCPSocket.startConnect(to: address)
            var pfd = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
            _ = try syscall("poll") { poll(&pfd, 1, 10_000) }
            try TCPSocket.connectResult(fd, to: address)
            try setNonBlocking(fd, false)
            // A small fixed receive buffer (no autotuning): a peer that does not read is
            // full after little, whatever the machine's tcp_rmem.
            var size: Int32 = 65_536
            _ = setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, 4)
            return RawPeer(fd: fd)
        }
    }

    private let closed = Mutex(false)

    /// Closes the socket, once: a second call must not close the number again (by then it
    /// may be another test's descriptor).
    func close() {
        let first = closed.withLock { c in
            defer { c = true }
            return !c
        }
        if first { closeQuietly(fd) }
    }

    func send(_ frame: Frame) throws { try SocketIO.sendAll(fd, try FrameEncoder.encode(frame)) }

    /// Reads frames until one matches (nil at the end of the stream); throws after 10 s.
    func read(until match: (Frame) -> Bool) throws -> Frame? {
        while true {
            if let f = try decoder.withLock({ try $0.nextFrame() }) {
                if match(f) { return f }
                continue
            }
            guard try SocketIO.waitReadable(fd, timeoutMilliseconds: 10_000) else { throw TestSupportError("no frame within 10 s") }
            let chunk = try SocketIO.receive(fd)
            if chunk.isEmpty { return nil }
            decoder.withLock { $0.append(chunk) }
        }
    }

    /// HELLO (no encryption) and an invitation, answered; returns the ID this peer claimed.
    func handshakeAsDialer(as given: PeerID? = nil) throws -> PeerID {
        guard let me = given ?? PeerID(bytes: (0..<32).map { _ in UInt8.random(in: 0...255) }) else { throw TestSupportError("no ID") }
        try send(.hello(Hello(peerID: me, displayName: "raw", encryption: .none, role: .dialer)))
        try send(.invite(Invite(invitationID: 1)))
        let reply = try read { if case .inviteReply = $0 { true } else { false } }
        guard case .inviteReply(let r)? = reply, r.declineReason == nil else { throw TestSupportError("not accepted: \(String(describing: reply))") }
        return me
    }

}
