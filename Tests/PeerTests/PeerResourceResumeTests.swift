import Foundation
@testable import Peer
import Session
import SystemKit
import TLS
import Testing

/// A sender's transfer read back from its journal after a restart, offered again when the
/// peer is back: what the file at its path is then (replaced, linked elsewhere) and what a
/// client does meanwhile (cancels it) decide what happens, and it ends exactly once.
@Suite(.memoryHeavy) struct PeerResourceResumeTests {
    typealias Node = PeerNodeTests.Node
    typealias Directory = InboxTests.Directory

    /// Every event a node reported about transfer `id` ending.
    static func endings(_ n: Node, _ id: UInt64) -> [ResourceEvent] {
        n.events.withLock { $0 }.compactMap { e -> ResourceEvent? in
            guard case .resource(let r) = e else { return nil }
            switch r {
            case .ended(let t, _, _, _) where t.id == id: return r
            case .sent(let t) where t.id == id: return r
            default: return nil
            }
        }
    }

    /// Whether `a` was offered a resource of `size` bytes after its first offer, within a
    /// few seconds (false: it was not).
    static func offeredAgain(_ a: Node, size: UInt64, first: ResourceTransfer) async -> Bool {
        await a.wait("offered again", timeout: .seconds(3)) { e in
            if case .resource(.offered(let t)) = e { t.id != first.id && t.size == size } else { false }
        } != nil
    }

    /// A client cancels the transfer while the restarted sender is reading its file again
    /// (a large file's hash takes seconds), and the file has changed meanwhile: the cancel
    /// ends it, once, and nothing more is sent. (Before, the reading went on regardless:
    /// the changed file ended it a second time, `source-changed`, and went to the peer as a
    /// new transfer, although the client had cancelled it.)
    @Test func aCancelWhileTheFileIsReadAgainEndsItOnce() async throws {
        let dir = try Directory()
        let s = try await PeerResourceTests.senderStoppedAfterAnOffer(dir)
        defer { s.a.node.stop() }
        _ = try PeerResourceTests.write(InboxTests.content(70_001), in: dir, "j.bin")
        let gate = PeerResourceTests.SaveGate()
        let again = try Node("sender", identity: s.identity, journal: s.journal, beforeReopening: { gate.hold() })
        defer { again.node.stop() }
        defer { gate.open() }  // first: a held reading must not outlive a failed expectation
        _ = try await again.node.connect(to: s.a.address)
        #expect(await gate.entered(), "the file is being read again")
        try again.node.cancel(resource: s.sent.id)
        #expect(await again.wait("cancelled") { if case .resource(.ended(let t, .cancelled, _, _)) = $0 { t.id == s.sent.id } else { false } } != nil)
        gate.open()
        #expect(!(await Self.offeredAgain(s.a, size: 70_001, first: s.firstOffer)), "a cancelled transfer was sent anyway")
        #expect(Self.endings(again, s.sent.id).count == 1, "\(Self.endings(again, s.sent.id))")
        #expect(again.node.resourceTransfers.isEmpty)
    }

    /// The path of a transfer in the journal names another file when the sender restarts: a
    /// link into what the daemon never sends (its key, its state). The file actually opened
    /// is checked as a new send's is: the transfer ends `io-error` saying so, and the peer is
    /// offered nothing. (Before, the changed content went to the peer as a new transfer.)
    @Test func aJournalPathThatNowLinksToTheDaemonsOwnFilesIsNotSent() async throws {
        let dir = try Directory()
        let s = try await PeerResourceTests.senderStoppedAfterAnOffer(dir)
        defer { s.a.node.stop() }
        let own = dir.path + "/state"
        try FileManager.default.createDirectory(atPath: own, withIntermediateDirectories: true)
        let secret = try PeerResourceTests.write(Array("the daemon's key".utf8), in: dir, "state/key.pem")
        try FileManager.default.removeItem(atPath: s.path)
        try FileManager.default.createSymbolicLink(atPath: s.path, withDestinationPath: secret)
        let again = try Node("sender", identity: s.identity, journal: s.journal, mayOffer: { !FileSystem.isInside($0, own) })
        defer { again.node.stop() }
        _ = try await again.node.connect(to: s.a.address)
        let ended = await again.wait("ended") { if case .resource(.ended(let t, _, _, _)) = $0 { t.id == s.sent.id } else { false } }
        guard case .resource(.ended(_, let reason, let detail, _))? = ended else {
            Issue.record("the transfer did not end")
            return
        }
        #expect(reason == .ioError && detail.contains("never sent"), "\(reason): \(detail)")
        #expect(!(await Self.offeredAgain(s.a, size: 16, first: s.firstOffer)), "the daemon's own file was offered")
        #expect(again.node.resourceTransfers.isEmpty)
    }
}
