import Dispatch
import Foundation
import Peer
import Session
import SystemKit
import TLS
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Where an offered resource's bytes come from: a descriptor a client passed (a pipe, or a
/// file the daemon may not open by name) is copied into the outbox, offered like a file,
/// resumed after a restart from the copy, and the copy goes once every transfer of it is done;
/// a descriptor whose path the node can open is read in place; the node's own files are
/// never offered by path, symbolic links or not.
@Suite(.memoryHeavy) struct PeerResourceSourceTests {
    typealias Node = PeerNodeTests.Node
    typealias Directory = InboxTests.Directory

    /// A socket pair (a pipe, as far as reading goes, and close-on-exec at once, so no child
    /// another suite spawns keeps it open) whose other end gets `bytes` from another thread,
    /// then closes: the end to pass.
    static func pipe(feeding bytes: [UInt8]) throws -> Int32 {
        let (r, w) = try DescriptorPassing.streamPair()
        DispatchQueue.global().async {
            try? SocketIO.sendAll(w, bytes)
            closeQuietly(w)
        }
        return r
    }

    static func sent(_ n: Node, _ id: UInt64?) async -> Bool {
        await n.wait("sent") { if case .resource(.sent(let t)) = $0 { t.id == id } else { false } } != nil
    }

    static func contents(_ path: String?) -> [UInt8]? {
        path.flatMap { FileManager.default.contents(atPath: $0) }.map { [UInt8]($0) }
    }

    static func pair(_ dir: Directory, policy: ResourcePolicy = .all, mayOffer: (@Sendable (String) -> Bool)? = nil) async throws -> (a: Node, b: Node) {
        let a = try Node("receiver", inbox: try Inbox(directory: dir.path + "/inbox"), acceptResources: policy)
        let b = try Node("sender", outbox: dir.path + "/outbox", mayOffer: mayOffer)
        _ = try await b.node.connect(to: a.address)
        #expect(await a.wait("connected", PeerNodeTests.isConnected) != nil)
        return (a, b)
    }

    @Test(arguments: [0, 1, 300_001])
    func bytesFromAPipeArriveAndTheirCopyGoes(_ size: Int) async throws {
        let dir = try Directory()
        let (a, b) = try await Self.pair(dir)
        defer { a.node.stop(); b.node.stop() }
        let bytes = InboxTests.content(size, seed: 3)
        let r = try Self.pipe(feeding: bytes)
        let (sent, copied) = try await b.node.sendResource(.descriptor(r, path: nil, size: size % 2 == 1 ? UInt64(size) : nil), name: "piped.bin", to: [])
        #expect(copied)
        #expect(sent.first?.size == UInt64(size) && sent.first?.name == "piped.bin")
        #expect(InboxTests.tree(dir.path + "/outbox").count == 1, "the copy waits in the outbox")
        let got = await PeerResourceTests.received(a)
        #expect(Self.contents(got?.1.path) == bytes)
        #expect(await Self.sent(b, sent.first?.id))
        #expect(InboxTests.tree(dir.path + "/outbox").isEmpty, "the copy is gone once sent")
    }

    /// The CLI's way: the file opened by the client, its path along. The node can open it:
    /// read in place, nothing copied.
    @Test func aDescriptorWhosePathTheNodeOpensIsReadInPlace() async throws {
        let dir = try Directory()
        let (a, b) = try await Self.pair(dir)
        defer { a.node.stop(); b.node.stop() }
        let bytes = InboxTests.content(70_000)
        let path = try PeerResourceTests.write(bytes, in: dir, "here.bin")
        let fd = try syscall("open") { open(path, O_RDONLY | O_CLOEXEC) }
        let (sent, copied) = try await b.node.sendResource(.descriptor(fd, path: path), to: [])
        #expect(!copied)
        #expect(sent.first?.name == "here.bin", "named after its path")
        #expect(Self.contents(await PeerResourceTests.received(a)?.1.path) == bytes)
        #expect(InboxTests.tree(dir.path + "/outbox").isEmpty)
    }

    /// The node's own files (here: `private/`) are refused by path, through a symbolic link
    /// too; a client that can read one itself passes its descriptor, which is copied.
    @Test func theNodesOwnFilesAreNotOfferedByPath() async throws {
        let dir = try Directory()
        try FileManager.default.createDirectory(atPath: dir.path + "/private", withIntermediateDirectories: true)
        let own = try #require(FileSystem.resolved(dir.path + "/private"))
        let (a, b) = try await Self.pair(dir, mayOffer: { !FileSystem.isInside($0, own) })
        defer { a.node.stop(); b.node.stop() }
        let key = try PeerResourceTests.write(Array("secret".utf8), in: dir, "private/identity.key")
        try FileManager.default.createSymbolicLink(atPath: dir.path + "/link", withDestinationPath: key)
        for path in [key, dir.path + "/link", dir.path + "/private/../private/identity.key"] {
            do {
                _ = try await b.node.sendResource(path: path, to: [])
                Issue.record("\(path) was offered")
            } catch {
                #expect("\(error)".contains("one of the daemon's own files"), "\(error)")
            }
        }
        #expect(b.node.resourceTransfers.isEmpty)
        let fd = try syscall("open") { open(key, O_RDONLY | O_CLOEXEC) }
        let (_, copied) = try await b.node.sendResource(.descriptor(fd, path: key), to: [])
        #expect(copied, "refused by name, so copied from the descriptor")
        #expect(Self.contents(await PeerResourceTests.received(a)?.1.path) == Array("secret".utf8))
    }

    /// Bytes without a path need a name; a node without an outbox takes no descriptor; either
    /// way the descriptor is closed (the pipe's writer sees no reader).
    @Test func aDescriptorThatCannotBeSentIsRefusedAndClosed() async throws {
        let dir = try Directory()
        let (a, b) = try await Self.pair(dir)
        let c = try Node("no outbox")
        defer { a.node.stop(); b.node.stop(); c.node.stop() }
        _ = try await c.node.connect(to: a.address)
        #expect(await c.wait("connected", PeerNodeTests.isConnected) != nil)
        for (node, name, says) in [(b, nil, "name"), (c, "x.bin", "no outbox")] as [(Node, String?, String)] {
            let (passed, kept) = try DescriptorPassing.streamPair()
            defer { closeQuietly(kept) }
            do {
                _ = try await node.node.sendResource(.descriptor(passed, path: nil), name: name, to: [])
                Issue.record("sent without \(says)")
            } catch {
                #expect("\(error)".contains(says), "\(error)")
            }
            #expect(PassedEnd.closed(kept), "the passed descriptor is closed")
        }
        #expect(InboxTests.tree(dir.path + "/outbox").isEmpty)
    }

    /// A copy outlives a restart: the journal names it, it is offered again from it, and it
    /// goes once sent. Leftovers nobody refers to (a copy, a part) are removed at the start.
    @Test func aCopyIsResumedAfterARestartAndLeftoversGo() async throws {
        let dir = try Directory()
        let a = try Node("receiver", inbox: try Inbox(directory: dir.path + "/inbox"), acceptResources: .ask)
        defer { a.node.stop() }
        let identity = try TLSIdentity.ephemeral()
        let journal = dir.path + "/outgoing.json"
        let outbox = dir.path + "/outbox"
        let bytes = InboxTests.content(90_000, seed: 9)
        let first = try Node("sender", identity: identity, journal: journal, outbox: outbox)
        _ = try await first.node.connect(to: a.address)
        let (sent, copied) = try await first.node.sendResource(.descriptor(try Self.pipe(feeding: bytes), path: nil), name: "kept.bin", to: [])
        #expect(copied)
        guard case .resource(.offered(let firstOffer))? = await a.wait("offered", { if case .resource(.offered) = $0 { true } else { false } }) else {
            Issue.record("not offered")
            return
        }
        first.node.stop()
        #expect(await first.wait("interrupted") { if case .resource(.interrupted(let t)) = $0 { t.id == sent[0].id } else { false } } != nil)
        let copy = try #require(InboxTests.tree(outbox).first)
        for stray in ["00000000000000aa", "00000000000000bb.part"] {
            _ = try PeerResourceTests.write([1], in: dir, "outbox/" + stray)
        }

        let again = try Node("sender", identity: identity, journal: journal, outbox: outbox)
        defer { again.node.stop() }
        #expect(InboxTests.tree(outbox) == [copy], "the journal's copy is kept, the leftovers are gone")
        _ = try await again.node.connect(to: a.address)
        let offer = await a.wait("offered again") { e in
            if case .resource(.offered(let t)) = e { t.name == "kept.bin" && t.id != firstOffer.id } else { false }
        }
        guard case .resource(.offered(let t))? = offer else { Issue.record("not offered again"); return }
        try a.node.answer(resource: t.id, accept: true)
        #expect(Self.contents(await PeerResourceTests.received(a)?.1.path) == bytes)
        #expect(await Self.sent(again, sent[0].id))
        #expect(InboxTests.tree(outbox).isEmpty, "the copy is gone once sent")
    }
}

/// Whether the other end of the socket pair whose end `kept` is was closed everywhere (its
/// end-of-file, waited for up to 10 s).
enum PassedEnd {
    static func closed(_ kept: Int32) -> Bool {
        var p = pollfd(fd: kept, events: Int16(POLLIN), revents: 0)
        var byte: UInt8 = 0
        return poll(&p, 1, 10_000) == 1 && recv(kept, &byte, 1, Int32(MSG_PEEK | MSG_DONTWAIT)) == 0
    }
}
