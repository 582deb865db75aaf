import Foundation
import Peer
import Session
import Synchronization
import SystemKit
import TLS
import TestSupport
import Testing

/// A hand-made peer sends resources to a node, frame by frame: lies end that resource only
/// (RESOURCE_CANCEL with the reason, no part left, the session alive), and a transfer cut
/// by a dropped link resumes on the next session from what the node verified.
@Suite(.memoryHeavy) struct ResourceWireTests {
    typealias Directory = InboxTests.Directory

    static func frame(_ raw: RawPeer, _ match: @escaping @Sendable (Frame) -> Bool) async throws -> Frame? {
        try await onThread { try raw.read(until: match) }
    }

    static func cancelOrDone(_ f: Frame) -> Bool {
        switch f {
        case .resourceCancel, .resourceDone, .resourceAccept, .resourceDecline: true
        default: false
        }
    }

    static func send(_ raw: RawPeer, _ frames: [Frame]) async throws {
        try await onThread { for f in frames { try raw.send(f) } }
    }

    /// The session still carries messages.
    static func stillUp(_ a: PeerNodeTests.Node, _ raw: RawPeer, _ n: UInt32) async throws -> Bool {
        let text = Array("still here \(n)".utf8)
        try await send(raw, [.message(MessageFragment(messageID: n, data: text, isFinal: true))])
        return await a.wait("message \(n)") { $0.hasMessage { $0 == text } } != nil
    }

    @Test func liesEndTheResourceOnly() async throws {
        let dir = try Directory()
        let inbox = try Inbox(directory: dir.path + "/inbox")
        let (a, raw, _) = try await PeerFlowTests.rawSession("liar", inbox: inbox)
        defer { raw.close(); a.node.stop() }
        let four: [UInt8] = [1, 2, 3, 4]

        // More bytes than offered.
        try await Self.send(raw, [.resourceOffer(ResourceOffer(resourceID: 1, name: "a", size: 4, sha256: try SHA256Digest.hash(four), mediaType: "x/y"))])
        #expect(try await Self.frame(raw, Self.cancelOrDone) == .resourceAccept(resourceID: 1, offset: 0))
        try await Self.send(raw, [.resourceData(resourceID: 1, data: four + [5])])
        #expect(try await Self.frame(raw, Self.cancelOrDone) == .resourceCancel(resourceID: 1, reason: .protocolError))
        #expect(try await Self.stillUp(a, raw, 1))

        // A wrong hash.
        try await Self.send(raw, [.resourceOffer(ResourceOffer(resourceID: 3, name: "b", size: 4, sha256: [UInt8](repeating: 0, count: 32), mediaType: "x/y"))])
        #expect(try await Self.frame(raw, Self.cancelOrDone) == .resourceAccept(resourceID: 3, offset: 0))
        try await Self.send(raw, [.resourceData(resourceID: 3, data: four), .resourceDone(resourceID: 3)])
        #expect(try await Self.frame(raw, Self.cancelOrDone) == .resourceCancel(resourceID: 3, reason: .hashMismatch))
        #expect(try await Self.stillUp(a, raw, 2))

        // An id reused.
        try await Self.send(raw, [.resourceOffer(ResourceOffer(resourceID: 3, name: "c", size: 4, sha256: try SHA256Digest.hash(four), mediaType: "x/y"))])
        #expect(try await Self.frame(raw, Self.cancelOrDone) == .resourceCancel(resourceID: 3, reason: .protocolError))
        #expect(try await Self.stillUp(a, raw, 3))

        // Nothing under a final name, no part left.
        #expect(InboxTests.tree(inbox.directory) == [".part"])
        let ends = a.count { if case .resource(.ended(_, let r, _, _)) = $0 { r == .protocolError || r == .hashMismatch } else { false } }
        #expect(ends == 2)  // the reused id was never a transfer of the node's
    }

    /// An offer of 2^64 - 1 bytes (any u64 is on the wire) is declined `too-large` before a
    /// client is asked, and reported; the session goes on.
    @Test func anImpossibleSizeIsDeclined() async throws {
        let dir = try Directory()
        let inbox = try Inbox(directory: dir.path + "/inbox")
        let (a, raw, _) = try await PeerFlowTests.rawSession("huge", inbox: inbox, policy: .ask)
        defer { raw.close(); a.node.stop() }
        try await Self.send(raw, [.resourceOffer(ResourceOffer(resourceID: 1, name: "huge", size: .max, sha256: [UInt8](repeating: 1, count: 32), mediaType: "x/y"))])
        #expect(try await Self.frame(raw, Self.cancelOrDone) == .resourceDecline(resourceID: 1, reason: .tooLarge))
        let ended = await a.wait("ended") { if case .resource(.ended(let t, .tooLarge, _, _)) = $0 { t.size == .max } else { false } }
        #expect(ended != nil)
        #expect(a.count { if case .resource(.offered) = $0 { true } else { false } } == 0, "no client asked")
        #expect(try await Self.stillUp(a, raw, 1))
    }

    /// A peer offering without end: the node takes 16 resources in progress (each accepted
    /// one holds a part file open) and answers the rest `busy`, asking its clients about none
    /// of them; the session goes on, and once one ends the next offer is taken.
    @Test func offersPastSixteenInProgressAreRefusedBusy() async throws {
        let dir = try Directory()
        let inbox = try Inbox(directory: dir.path + "/inbox")
        let (a, raw, _) = try await PeerFlowTests.rawSession("flood", inbox: inbox, policy: .ask)
        defer { raw.close(); a.node.stop() }
        let n = ResourceTable.maxInProgress
        let offers = (0..<(n + 4)).map { i in
            ResourceOffer(resourceID: UInt32(2 * i + 1), name: "f\(i)", size: 4, sha256: [UInt8](repeating: 2, count: 32), mediaType: "x/y")
        }
        try await Self.send(raw, offers.map { .resourceOffer($0) })
        for o in offers[n...] {
            #expect(try await Self.frame(raw, Self.cancelOrDone) == .resourceDecline(resourceID: o.resourceID, reason: .busy))
        }
        #expect(try await Self.stillUp(a, raw, 1))
        #expect(a.count { if case .resource(.offered) = $0 { true } else { false } } == n, "clients asked about the 16 taken only")
        // The peer cancels one: room for the next.
        let next = ResourceOffer(resourceID: UInt32(2 * (n + 4) + 1), name: "next", size: 4, sha256: [UInt8](repeating: 2, count: 32), mediaType: "x/y")
        try await Self.send(raw, [.resourceCancel(resourceID: 1, reason: .cancelled), .resourceOffer(next)])
        #expect(await a.wait("offered next") { if case .resource(.offered(let t)) = $0 { t.name == "next" } else { false } } != nil)
    }

    /// The node sends 17 files to a peer that then answers the 17th, held back and never
    /// offered (it guessed the id): a lie, which ends that transfer on the node (reported,
    /// answered with a CANCEL), and it is never offered later.
    @Test func anAnswerToAnOfferNotYetSentEndsIt() async throws {
        let dir = try Directory()
        let (a, raw, me) = try await PeerFlowTests.rawSession("guess", inbox: try Inbox(directory: dir.path + "/inbox"))
        defer { raw.close(); a.node.stop() }
        let n = ResourceTable.maxInProgress
        var sent: [ResourceTransfer] = []
        for i in 0...n {
            let path = try PeerResourceTests.write([UInt8(i)], in: dir, "g\(i).bin")
            sent += try await a.node.sendResource(path: path, to: [me])
        }
        var offered: [UInt32] = []
        for _ in 0..<n {
            guard case .resourceOffer(let o)? = try await Self.frame(raw, { if case .resourceOffer = $0 { true } else { false } }) else { break }
            offered.append(o.resourceID)
        }
        #expect(offered.count == n)
        let guessed = (offered.max() ?? 0) + 2  // the node listened: even ids, in order
        try await Self.send(raw, [.resourceAccept(resourceID: guessed, offset: 0)])
        #expect(try await Self.frame(raw, Self.cancelOrDone) == .resourceCancel(resourceID: guessed, reason: .protocolError))
        let ended = await a.wait("the held one ended") { if case .resource(.ended(let t, .protocolError, _, _)) = $0 { t.name == "g\(n).bin" } else { false } }
        #expect(ended != nil)
        // Room again: the next offer is a new file's, not the ended one's.
        try await Self.send(raw, [.resourceDecline(resourceID: offered[0], reason: .declined)])
        sent += try await a.node.sendResource(path: try PeerResourceTests.write([9], in: dir, "next.bin"), to: [me])
        guard case .resourceOffer(let next)? = try await Self.frame(raw, { if case .resourceOffer = $0 { true } else { false } }) else {
            Issue.record("no next offer")
            return
        }
        #expect(next.name == "next.bin" && next.resourceID == guessed + 2)
    }

    /// An offer arrives in a read that may run on the epoll thread (a connection without
    /// resources reads inline there, and the node's answer to an offer is made in that
    /// read's delivery): the inbox's free space, a file system call, is never read on it,
    /// whether a client is asked or the offer taken at once.
    @Test(arguments: [ResourcePolicy.ask, .all])
    func anOffersFreeSpaceIsNotReadOnTheEpollThread(policy: ResourcePolicy) async throws {
        let dir = try Directory()
        let onEpoll = Mutex<[Bool]>([])
        let inbox = try Inbox(directory: dir.path + "/inbox", freeSpace: { path in
            onEpoll.withLock { $0.append(DescriptorWatch.onReactorThread) }
            return try FileSystem.availableBytes(at: path)
        })
        let (a, raw, _) = try await PeerFlowTests.rawSession("epoll", inbox: inbox, policy: policy)
        defer { raw.close(); a.node.stop() }
        let four: [UInt8] = [1, 2, 3, 4]
        try await Self.send(raw, [.resourceOffer(ResourceOffer(resourceID: 1, name: "a", size: 4, sha256: try SHA256Digest.hash(four), mediaType: "x/y"))])
        if policy == .ask {
            #expect(await a.wait("offered") { if case .resource(.offered) = $0 { true } else { false } } != nil)
        } else {
            #expect(try await Self.frame(raw, Self.cancelOrDone) == .resourceAccept(resourceID: 1, offset: 0))
        }
        let calls = onEpoll.withLock { $0 }
        #expect(!calls.isEmpty && !calls.contains(true), "\(calls)")
    }

    @Test func dataBeforeAnAcceptIsALie() async throws {
        let dir = try Directory()
        let inbox = try Inbox(directory: dir.path + "/inbox")
        let (a, raw, _) = try await PeerFlowTests.rawSession("early", inbox: inbox, policy: .ask)
        defer { raw.close(); a.node.stop() }
        let four: [UInt8] = [1, 2, 3, 4]
        try await Self.send(raw, [.resourceOffer(ResourceOffer(resourceID: 1, name: "a", size: 4, sha256: try SHA256Digest.hash(four), mediaType: "x/y")),
                                  .resourceData(resourceID: 1, data: four)])
        #expect(try await Self.frame(raw, Self.cancelOrDone) == .resourceCancel(resourceID: 1, reason: .protocolError))
        #expect(await a.wait("ended") { if case .resource(.ended(_, .protocolError, _, _)) = $0 { true } else { false } } != nil)
        #expect(try await Self.stillUp(a, raw, 1))
        #expect(InboxTests.tree(inbox.directory) == [".part"])
    }

    /// The link drops after 200,000 of 300,000 bytes; the same peer offers the same content
    /// on its next session and the node asks for the rest only.
    @Test func aCutTransferResumesWhereTheNodeStopped() async throws {
        let dir = try Directory()
        let inbox = try Inbox(directory: dir.path + "/inbox")
        let (a, raw, me) = try await PeerFlowTests.rawSession("resume", inbox: inbox)
        defer { a.node.stop() }
        let content = InboxTests.content(300_000)
        let offer = ResourceOffer(resourceID: 1, name: "photo.jpg", size: 300_000, sha256: try SHA256Digest.hash(content), mediaType: "image/jpeg")
        try await Self.send(raw, [.resourceOffer(offer)])
        #expect(try await Self.frame(raw, Self.cancelOrDone) == .resourceAccept(resourceID: 1, offset: 0))
        try await Self.send(raw, stride(from: 0, to: 200_000, by: 50_000).map { .resourceData(resourceID: 1, data: Array(content[$0..<$0 + 50_000])) })
        raw.close()
        #expect(await a.wait("interrupted") { if case .resource(.interrupted(let t)) = $0 { t.bytes == 200_000 } else { false } } != nil)

        let again = try await RawPeer.connect(port: a.node.port)
        defer { again.close() }
        _ = try await onThread { try again.handshakeAsDialer(as: me) }
        try await Self.send(again, [.resourceOffer(offer)])
        #expect(try await Self.frame(again, Self.cancelOrDone) == .resourceAccept(resourceID: 1, offset: 200_000))
        try await Self.send(again, [.resourceData(resourceID: 1, data: Array(content[200_000..<250_000])),
                                    .resourceData(resourceID: 1, data: Array(content[250_000...])), .resourceDone(resourceID: 1)])
        #expect(try await Self.frame(again, Self.cancelOrDone) == .resourceDone(resourceID: 1))
        guard case .resource(.received(let t, let f, _))? = await a.wait("received", { if case .resource(.received) = $0 { true } else { false } }) else {
            Issue.record("not received")
            return
        }
        #expect(t.offset == 200_000)
        #expect(try Data(contentsOf: URL(fileURLWithPath: f.path)) == Data(content))
        #expect(InboxTests.files(inbox.directory) == [".part", "photo.jpg"])
    }
}
