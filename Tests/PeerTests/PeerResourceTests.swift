import Foundation
import Peer
import Session
import Synchronization
import SystemKit
import TestSupport
import TLS
import Testing

/// Resources between real nodes on loopback, and from a hand-made peer that lies: files
/// arrive whole and verified under safe names, both sides hear every end with its reason, a
/// cut transfer resumes from what the receiver verified, and a lie ends that resource only.
@Suite(.memoryHeavy) struct PeerResourceTests {
    typealias Node = PeerNodeTests.Node
    typealias Directory = InboxTests.Directory

    static func resource(_ e: PeerEvent) -> ResourceEvent? { if case .resource(let r) = e { r } else { nil } }

    static func received(_ n: Node, _ name: String? = nil) async -> (ResourceTransfer, ReceivedFile)? {
        let e = await n.wait("received") { e in
            guard case .resource(.received(let t, _, _)) = e else { return false }
            return name == nil || t.name == name
        }
        guard case .resource(.received(let t, let f, _))? = e else { return nil }
        return (t, f)
    }

    static func ended(_ n: Node, outgoing: Bool) async -> (ResourceTransfer, Reason, Bool)? {
        let e = await n.wait("ended") { e in
            if case .resource(.ended(let t, _, _, _)) = e { t.outgoing == outgoing } else { false }
        }
        guard case .resource(.ended(let t, let reason, _, let byPeer))? = e else { return nil }
        return (t, reason, byPeer)
    }

    static func write(_ bytes: [UInt8], in dir: Directory, _ name: String) throws -> String {
        let path = dir.path + "/" + name
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        return path
    }

    /// Two nodes in session, `a` with an inbox under `dir`.
    static func pair(_ dir: Directory, policy: ResourcePolicy = .all, limits: Inbox.Limits = .init()) async throws -> (a: Node, b: Node) {
        let a = try Node("receiver", inbox: try Inbox(directory: dir.path + "/inbox", limits: limits), acceptResources: policy)
        let b = try Node("sender")
        _ = try await b.node.connect(to: a.address)
        #expect(await a.wait("connected", PeerNodeTests.isConnected) != nil)
        return (a, b)
    }

    /// Empty, one byte, a chunk, a chunk and a byte, and several windows' worth: each
    /// arrives with the sender's bytes, reported on both sides.
    @Test(arguments: [0, 1, 65_536, 65_537, 3 * 1_048_576 + 5])
    func aFileArrivesWholeAndVerified(_ size: Int) async throws {
        let dir = try Directory()
        let (a, b) = try await Self.pair(dir)
        defer { a.node.stop(); b.node.stop() }
        let bytes = InboxTests.content(size, seed: size)
        let path = try Self.write(bytes, in: dir, "f\(size).bin")
        let sent = try await b.node.sendResource(path: path, to: [a.node.peerID])
        #expect(sent.count == 1 && sent.first?.size == UInt64(size))
        let got = await Self.received(a)
        #expect(got?.0.peer == b.node.peerID && got?.1.name == "f\(size).bin")
        #expect(try Data(contentsOf: URL(fileURLWithPath: got?.1.path ?? "/nonexistent")) == Data(bytes))
        #expect(await b.wait("sent") { if case .resource(.sent(let t)) = $0 { t.id == sent.first?.id } else { false } } != nil)
        #expect(InboxTests.files(dir.path + "/inbox") == [".part", "f\(size).bin"])
        #expect(a.node.resourceTransfers.isEmpty && b.node.resourceTransfers.isEmpty)
        #expect(a.node.flowEntryCounts == [0] && b.node.flowEntryCounts == [0], "the resource's windows are gone on both sides")
    }

    /// One file to two peers at once: read once, both copies whole.
    @Test func oneFileToTwoPeers() async throws {
        let dir = try Directory()
        let a1 = try Node("one", inbox: try Inbox(directory: dir.path + "/in1"))
        let a2 = try Node("two", inbox: try Inbox(directory: dir.path + "/in2"))
        let b = try Node("sender")
        defer { a1.node.stop(); a2.node.stop(); b.node.stop() }
        _ = try await b.node.connect(to: a1.address)
        _ = try await b.node.connect(to: a2.address)
        let bytes = InboxTests.content(700_001)
        let path = try Self.write(bytes, in: dir, "both.bin")
        let sent = try await b.node.sendResource(path: path, to: [])
        #expect(Set(sent.map(\.peer)) == [a1.node.peerID, a2.node.peerID])
        for n in [a1, a2] {
            let got = await Self.received(n)
            #expect(try Data(contentsOf: URL(fileURLWithPath: got?.1.path ?? "/nonexistent")) == Data(bytes))
        }
    }

    /// More files at once than a peer takes in progress (16; here all wait for a client's
    /// answer): the sender holds the rest back and offers each as one ends, so every one
    /// arrives and none is refused `busy`.
    @Test func moreFilesThanThePeerTakesAtOnceAllArrive() async throws {
        let dir = try Directory()
        let (a, b) = try await Self.pair(dir, policy: .ask)
        defer { a.node.stop(); b.node.stop() }
        let count = ResourceTable.maxInProgress + 8
        var contents: [String: [UInt8]] = [:]
        for i in 0..<count {
            let bytes = InboxTests.content(70_000 + i, seed: i)
            contents["m\(i).bin"] = bytes
            _ = try await b.node.sendResource(path: try Self.write(bytes, in: dir, "m\(i).bin"), to: [a.node.peerID])
        }
        // Each offer in turn is asked about and accepted; the 17th comes once the first ends.
        for i in 0..<count {
            guard case .resource(.offered(let t))? = await a.wait("m\(i).bin offered", { e in
                if case .resource(.offered(let t)) = e { t.name == "m\(i).bin" } else { false }
            }) else {
                Issue.record("m\(i).bin was not offered")
                return
            }
            try a.node.answer(resource: t.id, accept: true)
        }
        for i in 0..<count {
            guard let (_, file) = await Self.received(a, "m\(i).bin") else {
                Issue.record("m\(i).bin did not arrive")
                break
            }
            #expect(try Data(contentsOf: URL(fileURLWithPath: file.path)) == Data(contents[file.name] ?? []), "\(file.name)")
        }
        #expect(b.count { if case .resource(.ended) = $0 { true } else { false } } == 0, "none refused")
    }

    /// A peer's name is never a path: `../../x` lands in the inbox as `x`, and a second file
    /// of the same name is numbered.
    @Test func namesFromThePeerStayInTheInbox() async throws {
        let dir = try Directory()
        let (a, b) = try await Self.pair(dir)
        defer { a.node.stop(); b.node.stop() }
        let path = try Self.write([1, 2, 3], in: dir, "src.bin")
        _ = try await b.node.sendResource(path: path, name: "../../passwd", to: [a.node.peerID])
        #expect(await Self.received(a)?.1.name == "passwd")
        _ = try await b.node.sendResource(path: path, name: "/etc/passwd", to: [a.node.peerID])
        let second = await a.wait("second") { e in
            if case .resource(.received(_, let f, _)) = e { f.name != "passwd" } else { false }
        }
        guard case .resource(.received(_, let f, _))? = second else { Issue.record("no second file"); return }
        #expect(f.name == "passwd (2)")
        #expect(InboxTests.files(dir.path + "/inbox") == [".part", "passwd", "passwd (2)"])
        #expect(!FileManager.default.fileExists(atPath: dir.path + "/passwd"))
    }

    /// Policy `none` declines; `ask` reports the offer, and a client's answer takes it.
    @Test func declinedAndAsked() async throws {
        let dir = try Directory()
        let (a, b) = try await Self.pair(dir, policy: .none)
        defer { a.node.stop(); b.node.stop() }
        let path = try Self.write([9, 9], in: dir, "no.bin")
        _ = try await b.node.sendResource(path: path, to: [])
        let sender = await Self.ended(b, outgoing: true)
        #expect(sender?.1 == .declined && sender?.2 == true)
        let receiver = await Self.ended(a, outgoing: false)
        #expect(receiver?.1 == .declined && receiver?.2 == false)

        let dir2 = try Directory()
        let (c, d) = try await Self.pair(dir2, policy: .ask)
        defer { c.node.stop(); d.node.stop() }
        _ = try await d.node.sendResource(path: path, to: [])
        guard case .resource(.offered(let t))? = await c.wait("offered", { if case .resource(.offered) = $0 { true } else { false } }) else {
            Issue.record("no offer reported")
            return
        }
        #expect(t.name == "no.bin" && t.size == 2 && !t.outgoing)
        try c.node.answer(resource: t.id, accept: true)
        #expect(await Self.received(c)?.1.size == 2)
        #expect(throws: PeerError.self) { try c.node.answer(resource: t.id, accept: true) }
    }

    /// Cancelled by the sender while the receiver is asked: both sides hear `cancelled`, the
    /// receiver from the peer.
    @Test func cancelledBySenderWhileAsked() async throws {
        let dir = try Directory()
        let (a, b) = try await Self.pair(dir, policy: .ask)
        defer { a.node.stop(); b.node.stop() }
        let path = try Self.write([1], in: dir, "c.bin")
        let sent = try await b.node.sendResource(path: path, to: [])
        #expect(await a.wait("offered") { if case .resource(.offered) = $0 { true } else { false } } != nil)
        try b.node.cancel(resource: sent[0].id)
        let s = await Self.ended(b, outgoing: true), r = await Self.ended(a, outgoing: false)
        #expect(s?.1 == .cancelled && s?.2 == false)
        #expect(r?.1 == .cancelled && r?.2 == true)
    }

    /// Over the quota: declined `too-large`, seen by both.
    @Test func overTheQuotaIsDeclined() async throws {
        let dir = try Directory()
        let (a, b) = try await Self.pair(dir, limits: .init(maxResourceBytes: 10))
        defer { a.node.stop(); b.node.stop() }
        let path = try Self.write([UInt8](repeating: 7, count: 11), in: dir, "big.bin")
        _ = try await b.node.sendResource(path: path, to: [])
        #expect(await Self.ended(b, outgoing: true)?.1 == .tooLarge)
        #expect(await Self.ended(a, outgoing: false)?.1 == .tooLarge)
    }

    /// Where a sender restart begins: receiver `a` (policy `ask`, so the transfer waits for
    /// its client) was offered `j.bin` (70,000 bytes) by a sender with `identity` and
    /// `journal`, and that sender has stopped (its transfer interrupted). The caller stops `a`.
    struct StoppedSender {
        let a: Node
        let identity: TLSIdentity
        let journal: String
        let path: String
        /// The sender's transfer.
        let sent: ResourceTransfer
        /// The receiver's transfer of the first offer.
        let firstOffer: ResourceTransfer
    }

    static func senderStoppedAfterAnOffer(_ dir: Directory, hashRacyMargin: Int64? = nil) async throws -> StoppedSender {
        let a = try Node("receiver", inbox: try Inbox(directory: dir.path + "/inbox"), acceptResources: .ask)
        let identity = try TLSIdentity.ephemeral()
        let journal = dir.path + "/outgoing.json"
        let path = try Self.write(InboxTests.content(70_000), in: dir, "j.bin")
        let first = try Node("sender", identity: identity, journal: journal, hashRacyMargin: hashRacyMargin)
        _ = try await first.node.connect(to: a.address)
        let sent = try #require(try await first.node.sendResource(path: path, to: []).first)
        let offered = await a.wait("offered") { if case .resource(.offered) = $0 { true } else { false } }
        first.node.stop()
        guard case .resource(.offered(let firstOffer))? = offered else {
            a.node.stop()
            Issue.record("the receiver was not offered the file")
            throw CancellationError()
        }
        #expect(await first.wait("interrupted") { if case .resource(.interrupted(let t)) = $0 { t.id == sent.id } else { false } } != nil)
        return StoppedSender(a: a, identity: identity, journal: journal, path: path, sent: sent, firstOffer: firstOffer)
    }

    /// The sender's daemon restarts mid-transfer (here: while the receiver's client is
    /// asked): the transfer is in its journal, and once the peer's session is back it is
    /// offered again under the same number. A file changed meanwhile ends it
    /// `source-changed` and goes again as a new transfer.
    @Test(arguments: [false, true])
    func aSenderRestartOffersAgainFromItsJournal(changed: Bool) async throws {
        let dir = try Directory()
        let s = try await Self.senderStoppedAfterAnOffer(dir)
        let (a, identity, journal, sent, firstOffer) = (s.a, s.identity, s.journal, [s.sent], s.firstOffer)
        defer { a.node.stop() }
        if changed { _ = try Self.write(InboxTests.content(70_001), in: dir, "j.bin") }

        let again = try Node("sender", identity: identity, journal: journal)
        defer { again.node.stop() }
        #expect(again.node.resourceTransfers.map(\.id) == [sent[0].id], "read back from the journal")
        _ = try await again.node.connect(to: a.address)
        let second = await a.wait("offered again") { e in
            if case .resource(.offered(let t)) = e { t.id != firstOffer.id && t.size == (changed ? 70_001 : 70_000) } else { false }
        }
        guard case .resource(.offered(let t))? = second else { Issue.record("not offered again"); return }
        try a.node.answer(resource: t.id, accept: true)
        #expect(await Self.received(a)?.1.size == (changed ? 70_001 : 70_000))
        let done = await again.wait("sent") { if case .resource(.sent) = $0 { true } else { false } }
        guard case .resource(.sent(let s))? = done else { Issue.record("not sent"); return }
        #expect((s.id == sent[0].id) == !changed, "the same number unless the file changed")
        if changed {
            let ended = await again.wait("source-changed") { if case .resource(.ended(_, .sourceChanged, _, _)) = $0 { true } else { false } }
            #expect(ended != nil)
        }
        #expect(again.node.resourceTransfers.isEmpty)
        // The journal on disk lists nothing once the transfer is done.
        let saved = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: journal))) as? [String: Any]
        #expect((saved?["transfers"] as? [Any])?.isEmpty == true, "\(String(describing: saved))")
    }

    /// Holds a received file's save (`Inbox`'s `beforeSaving`, on the file's writer queue)
    /// until `open`, as a slow card's flush would; says when one is held.
    final class SaveGate: Sendable {
        private let opened = DispatchSemaphore(value: 0)
        private let held = Mutex(false)
        private let signal = AsyncSignal()

        func hold() {
            held.withLock { $0 = true }
            signal.fire()
            opened.wait()
            opened.signal()  // open for every later save too
        }

        func open() { opened.signal() }

        func entered() async -> Bool { await signal.wait(timeout: .seconds(10)) { held.withLock { $0 } } }

        /// For `Inbox`'s `claimWaits`: an offer of the held content has begun to wait.
        private let claimWaiting = Mutex(false)
        func claimWaits() {
            claimWaiting.withLock { $0 = true }
            signal.fire()
        }
        func claimWaited() async -> Bool { await signal.wait(timeout: .seconds(10)) { claimWaiting.withLock { $0 } } }
    }

    /// The receiver's save of a file it has whole (verify, flush, link: most of a second on an
    /// SD card) holds up nothing else on the session: while the save is held, a message
    /// still crosses (when the save held the connection, nothing did, pings neither, and the
    /// sender lost the session), and the file is reported once its save goes on, on both
    /// sides.
    @Test func aSlowSaveHoldsUpNothingElse() async throws {
        let dir = try Directory()
        let gate = SaveGate()
        let a = try Node("receiver",
                         inbox: try Inbox(directory: dir.path + "/inbox", beforeSaving: { gate.hold() }), acceptResources: .all)
        let b = try Node("sender")
        defer { a.node.stop(); b.node.stop() }
        defer { gate.open() }  // first: a held save must not outlive a failed expectation
        _ = try await b.node.connect(to: a.address)
        #expect(await a.wait("connected", PeerNodeTests.isConnected) != nil)
        let sent = try await b.node.sendResource(path: try Self.write(InboxTests.content(100_000), in: dir, "slow.bin"), to: [a.node.peerID])
        #expect(await gate.entered(), "the receiver got every byte and began to save")
        let started = await a.wait("started") { if case .resource(.started(let t)) = $0 { !t.outgoing } else { false } }
        guard case .resource(.started(let incoming))? = started else {
            Issue.record("no incoming transfer")
            return
        }
        #expect(throws: PeerError.self, "too late to cancel") { try a.node.cancel(resource: incoming.id) }
        _ = try await b.node.send(Array("meanwhile".utf8), to: [a.node.peerID], reliable: true)
        #expect(await a.wait("the message") { if case .messages(_, let ms) = $0 { ms.contains(Array("meanwhile".utf8)) } else { false } } != nil,
                "a message waited for the save")
        #expect(a.count { if case .resource(.received) = $0 { true } else { false } } == 0, "reported before it was saved")
        gate.open()
        #expect(await Self.received(a)?.1.name == "slow.bin")
        #expect(await b.wait("sent") { if case .resource(.sent(let t)) = $0 { t.id == sent.first?.id } else { false } } != nil)
        #expect(InboxTests.files(dir.path + "/inbox") == [".part", "slow.bin"])
        #expect(a.node.flowEntryCounts == [0], "the resource's windows are gone")
    }

    /// The session ends while the receiver saves a file it has whole (here it closes the
    /// session itself): the file is still saved and reported, and the sender, which never
    /// heard the confirmation and reports the transfer interrupted, offers it again on its
    /// next session; the receiver answers that it has it all, so the sender finishes without
    /// sending a byte more and the inbox holds one copy. `offeredWhileSaving`: the new offer
    /// comes while the save is still held (a slow card's flushes), for longer than a transfer
    /// holding the part is waited for (`duplicateWait`, short here): it waits for the save
    /// (it was declined `duplicate`, and the sender reported the file failed).
    @Test(arguments: [false, true])
    func aFileSavedAfterItsSessionEndedIsNotReceivedTwice(offeredWhileSaving: Bool) async throws {
        let dir = try Directory()
        let gate = SaveGate()
        let a = try Node("receiver", inbox: try Inbox(directory: dir.path + "/inbox", duplicateWait: .milliseconds(100), beforeSaving: { gate.hold() },
                                                      claimWaits: { gate.claimWaits() }),
                         acceptResources: .all)
        let b = try Node("sender")
        defer { a.node.stop(); b.node.stop() }
        defer { gate.open() }
        _ = try await b.node.connect(to: a.address)
        #expect(await a.wait("connected", PeerNodeTests.isConnected) != nil)
        let sent = try await b.node.sendResource(path: try Self.write(InboxTests.content(100_000), in: dir, "twice.bin"), to: [a.node.peerID])
        let id = try #require(sent.first?.id)
        #expect(await gate.entered(), "the receiver got every byte and began to save")
        try a.node.disconnect(b.node.peerID)
        #expect(await b.wait("interrupted") { if case .resource(.interrupted(let t)) = $0 { t.id == id } else { false } } != nil)
        if offeredWhileSaving {
            _ = try await b.node.connect(to: a.address)
            #expect(await gate.claimWaited(), "the new offer waits for the save")
            try await Task.sleep(for: .milliseconds(400))  // (past duplicateWait, counted from its wait, while the save is held)
        }
        gate.open()
        #expect(await Self.received(a)?.1.name == "twice.bin", "saved and reported after its session")
        if !offeredWhileSaving { _ = try await b.node.connect(to: a.address) }
        #expect(await b.wait("sent") { if case .resource(.sent(let t)) = $0 { t.id == id } else { false } } != nil)
        #expect(await a.signal.wait(timeout: .seconds(10)) { a.count { if case .resource(.received) = $0 { true } else { false } } == 2 },
                "reported received again, the offer answered complete")
        #expect(InboxTests.files(dir.path + "/inbox") == [".part", "twice.bin"], "one copy")
        let started = a.count { if case .resource(.started(let t)) = $0 { t.offset == 100_000 } else { false } }
        #expect(started == 1, "the second offer was answered complete")
    }

    /// A node stopping while it saves a received file (the daemon's exit) waits for the save:
    /// the file is in the inbox when the stop returns, and the peer heard why the session
    /// ended. A save that does not end within the limit is not waited for longer.
    @Test(arguments: [true, false])
    func aStopWaitsForAFileBeingSaved(saveEnds: Bool) async throws {
        let dir = try Directory()
        let gate = SaveGate()
        let a = try Node("receiver", inbox: try Inbox(directory: dir.path + "/inbox", beforeSaving: { gate.hold() }), acceptResources: .all)
        let b = try Node("sender")
        defer { b.node.stop() }
        defer { gate.open() }
        _ = try await b.node.connect(to: a.address)
        #expect(await a.wait("connected", PeerNodeTests.isConnected) != nil)
        _ = try await b.node.sendResource(path: try Self.write(InboxTests.content(100_000), in: dir, "last.bin"), to: [a.node.peerID])
        #expect(await gate.entered(), "the receiver got every byte and began to save")
        guard saveEnds else {
            #expect(await a.node.stop(settlingWithin: .milliseconds(300)) == false, "a save that does not end is not waited for")
            // Let go, the save ends after all: waited for here, or it wrote into the test's
            // directory while that was being removed, and the file and its record stayed.
            gate.open()
            // Its last step is the record's write and the part's state file's removal.
            func saved() -> Bool {
                let t = InboxTests.tree(dir.path + "/inbox")
                return t.count == 3 && t.contains("last.bin") && t.contains { $0.hasSuffix(".saved") }
            }
            #expect(await eventually(timeout: .seconds(10)) { saved() }, "saved once let go: \(InboxTests.tree(dir.path + "/inbox"))")
            return
        }
        let returned = Mutex(false)
        let stopping = Task {
            let settled = await a.node.stop(settlingWithin: .seconds(60))
            returned.withLock { $0 = true }
            return settled
        }
        #expect(await b.wait("a stopping") { if case .disconnected(let d) = $0 { d.reason == .shuttingDown && d.byPeer } else { false } } != nil,
                "the peer heard why")
        try await Task.sleep(for: .milliseconds(200))
        #expect(!returned.withLock { $0 }, "the stop returned while a file was being saved")
        gate.open()
        #expect(await stopping.value, "everything settled")
        #expect(InboxTests.files(dir.path + "/inbox") == [".part", "last.bin"], "saved before the stop returned")
    }

    /// `send-image` refuses a file that is not a PNG or JPEG, before offering anything.
    @Test func anImageMustBeOne() async throws {
        let dir = try Directory()
        let (a, b) = try await Self.pair(dir)
        defer { a.node.stop(); b.node.stop() }
        let path = try Self.write(Array("not a picture".utf8), in: dir, "fake.png")
        await #expect(throws: PeerError.self) { try await b.node.sendResource(path: path, to: [], imagesOnly: true) }
        #expect(b.node.resourceTransfers.isEmpty)
    }
}
