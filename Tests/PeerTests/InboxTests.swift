import Foundation
import Peer
import Session
import Synchronization
import SystemKit
import TLS
import Testing

/// The inbox on a real file system: whole files appear only verified, under safe names
/// inside the inbox; a cut transfer resumes from what was recorded; a wrong hash, the quota
/// and the free space are refused with the reason the sender is told.
@Suite struct InboxTests {
    final class Directory {
        let path: String
        init() throws {
            path = FileManager.default.temporaryDirectory.appendingPathComponent("peerlink-inbox-\(UUID().uuidString.prefix(8))").path
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        }
        deinit { try? FileManager.default.removeItem(atPath: path) }
    }

    static let peer = PeerID(bytes: [UInt8](repeating: 0x42, count: 32))!

    static func content(_ size: Int, seed: Int = 0) -> [UInt8] {
        (0..<size).map { UInt8(truncatingIfNeeded: ($0 &+ seed) &* 37 &+ ($0 >> 10)) }
    }

    static func offer(_ name: String, _ bytes: [UInt8], id: UInt32 = 1) throws -> ResourceOffer {
        ResourceOffer(resourceID: id, name: name, size: UInt64(bytes.count), sha256: try SHA256Digest.hash(bytes), mediaType: "image/png")
    }

    /// Every file under `root`, relative to it.
    static func tree(_ root: String) -> [String] {
        (FileManager.default.enumerator(atPath: root)?.allObjects as? [String] ?? []).sorted()
    }

    /// `tree` of an inbox without the records of the files saved (`.part/<key>.saved`, kept
    /// for a later offer of the same resource).
    static func files(_ inbox: String) -> [String] {
        tree(inbox).filter { !($0.hasPrefix(".part/") && $0.hasSuffix(".saved")) }
    }

    @Test(arguments: [0, 1, 4096, 100_003])
    func aWholeTransferAppearsVerifiedUnderItsName(_ size: Int) throws {
        let dir = try Directory()
        let inbox = try Inbox(directory: dir.path + "/inbox", limits: .init(syncInterval: 1000))
        let bytes = Self.content(size)
        let part = try inbox.receive(try Self.offer("photo.png", bytes), from: Self.peer)
        #expect(part.offset == 0)
        var at = 0
        while at < bytes.count {
            let end = min(bytes.count, at + 4000)
            try part.write(Array(bytes[at..<end]))
            // Nothing under a final name before the end.
            #expect(try inbox.files().isEmpty)
            at = end
        }
        let saved = try part.finish()
        #expect(saved.name == "photo.png" && saved.size == UInt64(size) && saved.mediaType == "image/png")
        #expect(try Data(contentsOf: URL(fileURLWithPath: saved.path)) == Data(bytes))
        #expect(try inbox.files() == ["photo.png"])
        #expect(Self.files(inbox.directory) == [".part", "photo.png"], "the part and its length record are gone")
        #expect(try FileSystem.names(in: inbox.partDirectory).map { $0.hasSuffix(".saved") } == [true], "where it went is recorded")
    }

    /// `bytes` received whole as `offer` from `peer`.
    static func saved(_ inbox: Inbox, _ offer: ResourceOffer, _ bytes: [UInt8], from peer: PeerID = peer) throws -> ReceivedFile {
        let part = try inbox.receive(offer, from: peer)
        #expect(part.offset == 0)
        try part.write(bytes)
        return try part.finish()
    }

    /// A resource received whole and offered again by the same peer under the same name (its
    /// sender never heard the confirmation) is complete from the start, needs no room and
    /// gives the file saved then: no second copy, once. Under another name (which leaves the
    /// record), from another peer, once the saved file's content changed (its size and times
    /// may not show it: it is hashed again), is a link, or the record is older than
    /// `partRetention`, it is received again.
    @Test func aSavedResourceOfferedAgainIsCompleteFromTheStart() throws {
        let dir = try Directory()
        let room = Mutex<UInt64>(1 << 30)
        let inbox = try Inbox(directory: dir.path + "/inbox", freeSpace: { _ in room.withLock { $0 } })
        let bytes = Self.content(10_000, seed: 9)
        let offer = try Self.offer("twice.bin", bytes)
        let first = try Self.saved(inbox, offer, bytes)
        // No room at all (below the reserve): none is needed.
        room.withLock { $0 = 0 }
        try inbox.check(offer, from: Self.peer)
        let again = try inbox.receive(try Self.offer("twice.bin", bytes, id: 3), from: Self.peer)
        #expect(again.offset == 10_000 && again.received == 10_000)
        #expect(throws: InboxError.self, "nothing more may be written") { try again.write([1]) }
        let same = try again.finish()
        #expect(same.path == first.path && same.name == "twice.bin" && same.size == 10_000 && same.sha256 == offer.sha256)
        #expect(Self.tree(inbox.directory) == [".part", "twice.bin"], "one copy; the record served its offer")
        room.withLock { $0 = 1 << 30 }
        #expect(try inbox.receive(offer, from: Self.peer).offset == 0, "once")

        // Another name for the same content is another file, saved with its own record: the
        // first name's stays.
        let other = try Self.offer("b.bin", Self.content(5_000, seed: 10))
        _ = try Self.saved(inbox, other, Self.content(5_000, seed: 10))
        #expect(try Self.saved(inbox, try Self.offer("copy of b.bin", Self.content(5_000, seed: 10)), Self.content(5_000, seed: 10)).name
                == "copy of b.bin")
        #expect(try inbox.receive(try Self.offer("b.bin", Self.content(5_000, seed: 10), id: 5), from: Self.peer).offset == 5_000)
        // Another peer's offer is received in full, even from an ID that begins the same (the
        // part's key holds a prefix of it).
        let lookalike = PeerID(bytes: [UInt8](repeating: 0x42, count: 31) + [0])!
        #expect(try inbox.receive(other, from: lookalike).offset == 0)

        // Changed in place, same size (times set back): hashed, received again beside it.
        let c = try Self.offer("c.bin", Self.content(5_000, seed: 11))
        let cFile = try Self.saved(inbox, c, Self.content(5_000, seed: 11))
        let before = try FileManager.default.attributesOfItem(atPath: cFile.path)[.modificationDate] as? Date
        var changed = Self.content(5_000, seed: 11)
        changed[0] ^= 1
        try Data(changed).write(to: URL(fileURLWithPath: cFile.path))
        try FileManager.default.setAttributes([.modificationDate: before as Any], ofItemAtPath: cFile.path)
        let cAgain = try inbox.receive(c, from: Self.peer)
        #expect(cAgain.offset == 0)
        try cAgain.write(Self.content(5_000, seed: 11))
        #expect(try cAgain.finish().name == "c (2).bin")

        // A symbolic link in place of the file, or a record past its retention: received again.
        let d = try Self.offer("d.bin", Self.content(5_000, seed: 12))
        let dFile = try Self.saved(inbox, d, Self.content(5_000, seed: 12))
        try FileManager.default.moveItem(atPath: dFile.path, toPath: dir.path + "/elsewhere")
        try FileManager.default.createSymbolicLink(atPath: dFile.path, withDestinationPath: dir.path + "/elsewhere")
        #expect(try inbox.receive(d, from: Self.peer).offset == 0)
        let e = try Self.offer("e.bin", Self.content(5_000, seed: 13))
        _ = try Self.saved(inbox, e, Self.content(5_000, seed: 13))
        let record = try #require(try FileSystem.names(in: inbox.partDirectory).first { $0.hasSuffix(".saved") && $0.contains(Fingerprint.hexString(e.sha256)) })
        let path = inbox.partDirectory + "/" + record
        let lines = try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n", omittingEmptySubsequences: false)
        try (lines[0..<3].joined(separator: "\n") + "\n0\n").write(toFile: path, atomically: true, encoding: .utf8)
        #expect(try inbox.receive(e, from: Self.peer).offset == 0)
    }

    /// A daemon killed mid-transfer: in the same boot every byte it wrote is in the part (the
    /// page cache keeps it), so the part resumes from its whole length; after a reboot only
    /// what was flushed and recorded counts, and so when the boot cannot be told (no boot id:
    /// "" matched "" and vouched for unflushed bytes).
    @Test(arguments: [("boot-1", "boot-1", 25_000), ("boot-1", "boot-2", 20_000), ("", "", 20_000)])
    func aCutTransferResumes(firstBoot: String, secondBoot: String, resumesAt: UInt64) throws {
        let dir = try Directory()
        let limits = Inbox.Limits(syncInterval: 10_000)
        let bytes = Self.content(50_000, seed: 3)
        let offer = try Self.offer("big.bin", bytes)
        do {
            let inbox = try Inbox(directory: dir.path, limits: limits, bootID: firstBoot)
            let part = try inbox.receive(offer, from: Self.peer)
            try part.write(Array(bytes[0..<20_000]))  // past the interval: flushed and recorded
            try part.write(Array(bytes[20_000..<25_000]))
            // The daemon is killed here: 20,000 bytes were recorded, 5,000 more written after.
        }
        let inbox = try Inbox(directory: dir.path, limits: limits, bootID: secondBoot)
        let part = try inbox.receive(offer, from: Self.peer)
        #expect(part.offset == resumesAt)
        try part.write(Array(bytes[Int(part.offset)...]))
        let saved = try part.finish()
        #expect(try Data(contentsOf: URL(fileURLWithPath: saved.path)) == Data(bytes))

        // The same content from another peer, or other content, starts over.
        let other = try inbox.receive(offer, from: PeerID(bytes: [UInt8](repeating: 7, count: 32))!)
        #expect(other.offset == 0)
        other.discard()
        // A suspended transfer (the link dropped) records everything written, for any boot.
        let next = try Self.offer("next.bin", Self.content(50_000, seed: 4), id: 3)
        let again = try inbox.receive(next, from: Self.peer)
        try again.write(Array(Self.content(50_000, seed: 4)[0..<1234]))
        again.suspend()
        #expect(try Inbox(directory: dir.path, limits: limits, bootID: "boot-3").receive(next, from: Self.peer).offset == 1234)
    }

    /// A part that is also a file in the inbox (a crash between the link that saved it and
    /// the part's removal) is not resumed into: the inbox's file stays as it was saved, and
    /// the part starts over under its own name (before, the part was cut to its recorded
    /// length, and so was the saved file, and the new bytes went into it).
    @Test func aPartLinkedToASavedFileStartsOver() throws {
        let dir = try Directory()
        let limits = Inbox.Limits(syncInterval: 10_000)
        let bytes = Self.content(50_000, seed: 5)
        let offer = try Self.offer("linked.bin", bytes)
        let inbox = try Inbox(directory: dir.path, limits: limits, bootID: "boot-1")
        let part = try inbox.receive(offer, from: Self.peer)
        try part.write(Array(bytes[0..<20_000]))
        part.suspend()
        // As the crash left it: the whole file saved under its name, and still the part's.
        let data = try #require(Self.tree(dir.path).first { $0.hasPrefix(".part/") && $0.hasSuffix(".data") })
        try FileManager.default.removeItem(atPath: dir.path + "/" + data)
        try Data(bytes).write(to: URL(fileURLWithPath: dir.path + "/linked.bin"))
        try FileManager.default.linkItem(atPath: dir.path + "/linked.bin", toPath: dir.path + "/" + data)
        let again = try Inbox(directory: dir.path, limits: limits, bootID: "boot-2").receive(offer, from: Self.peer)
        #expect(again.offset == 0, "started over")
        try again.write(Array(repeating: 0xEE, count: 1000))
        #expect(try Data(contentsOf: URL(fileURLWithPath: dir.path + "/linked.bin")) == Data(bytes), "the saved file is untouched")
        again.discard()
    }

    /// What arrived is the daemon's group's to read (the CLI's users: `peer inbox` gives them
    /// paths they could not open): the inbox 0750, a saved file 0640, parts the daemon's own;
    /// an inbox an earlier version made 0700 is opened up.
    @Test func theGroupMayReadWhatArrived() throws {
        let dir = try Directory()
        func mode(_ path: String) throws -> Int { (try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int) ?? -1 }
        try FileManager.default.createDirectory(atPath: dir.path + "/old", withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
        _ = try Inbox(directory: dir.path + "/old")
        #expect(try mode(dir.path + "/old") == 0o750)
        let inbox = try Inbox(directory: dir.path + "/inbox")
        #expect(try mode(dir.path + "/inbox") == 0o750 && mode(dir.path + "/inbox/.part") == 0o700)
        let bytes = Self.content(1000)
        let saved = try Self.saved(inbox, try Self.offer("shared.bin", bytes), bytes)
        #expect(try mode(saved.path) == 0o640)
    }

    /// A part nobody resumed within `partRetention` is removed when the inbox is next opened
    /// (the daemon's start), and so is the record of a file saved that long ago; a younger
    /// part is kept and still resumes.
    @Test func partsNobodyResumedForThirtyDaysAreRemoved() throws {
        let dir = try Directory()
        let bytes = Self.content(3000, seed: 5)
        let old = try Self.offer("old.bin", bytes), young = try Self.offer("young.bin", Self.content(3000, seed: 6), id: 2)
        let start = FileIdentity.wallClockNanoseconds()
        do {
            let inbox = try Inbox(directory: dir.path, bootID: "boot-1")
            #expect(inbox.removedParts == 0)
            let a = try inbox.receive(old, from: Self.peer)
            try a.write(Array(bytes[0..<1000]))
            a.suspend()
        }
        let day: Int64 = 24 * 3600 * 1_000_000_000
        // Ten days on, a second transfer is cut; the first is still kept.
        let tenDaysOn = try Inbox(directory: dir.path, bootID: "boot-2", now: start + 10 * day)
        #expect(tenDaysOn.removedParts == 0)
        let b = try tenDaysOn.receive(young, from: Self.peer)
        try b.write(Array(Self.content(3000, seed: 6)[0..<500]))
        b.suspend()
        // And a file is saved whole: its record (not a part) goes with the same age.
        _ = try Self.saved(tenDaysOn, try Self.offer("done.bin", Self.content(100, seed: 7), id: 4), Self.content(100, seed: 7))
        let keys = try FileSystem.names(in: tenDaysOn.partDirectory)
        #expect(keys.count >= 2, "\(keys)")
        // Thirty-one days after the first was written (its files' times are real: both parts
        // were written now), both are older than the limit: removed, .data and .state.
        let later = try Inbox(directory: dir.path, bootID: "boot-3", now: start + 31 * day)
        #expect(later.removedParts == 2, "two parts; the saved file's record is not one")
        #expect(try FileSystem.names(in: later.partDirectory).isEmpty)
        // Twenty-nine days on, a part is kept and resumes from what it held.
        let c = try later.receive(old, from: Self.peer)
        try c.write(Array(bytes[0..<700]))
        c.suspend()
        let kept = try Inbox(directory: dir.path, bootID: "boot-4", now: FileIdentity.wallClockNanoseconds() + 29 * day)
        #expect(kept.removedParts == 0)
        #expect(try kept.receive(old, from: Self.peer).offset == 700)
    }

    @Test func aWrongHashRemovesThePartAndNamesTheReason() throws {
        let dir = try Directory()
        let inbox = try Inbox(directory: dir.path)
        let bytes = Self.content(3000)
        var hash = try SHA256Digest.hash(bytes)
        hash[0] ^= 0xFF
        let part = try inbox.receive(ResourceOffer(resourceID: 1, name: "lie.png", size: 3000, sha256: hash, mediaType: "image/png"), from: Self.peer)
        try part.write(bytes)
        let result = Result { () throws(InboxError) in try part.finish() }
        guard case .failure(let error) = result else {
            Issue.record("a wrong hash must fail")
            return
        }
        #expect(error.reason == .hashMismatch)
        #expect(error.description.contains("not the offered"))
        #expect(Self.tree(dir.path) == [".part"], "nothing left but the empty part directory")
        // More bytes than offered are refused before they are written.
        let p2 = try inbox.receive(try Self.offer("x", [1, 2]), from: Self.peer)
        #expect(throws: InboxError.self) { try p2.write([1, 2, 3]) }
        #expect(throws: InboxError.self) { try p2.finish() }
        p2.discard()
    }

    @Test func namesFromPeersStayInsideTheInboxAndCollisionsAreNumbered() throws {
        let dir = try Directory()
        let inbox = try Inbox(directory: dir.path + "/inbox")
        let names = ["../../etc/passwd", "/etc/passwd", "a/b", "..", ".", "a\u{0}b", "line\nbreak",
                     String(repeating: "é", count: 150), "photo.png", "photo.png"]
        var saved: [String] = []
        for (i, name) in names.enumerated() {
            let bytes = Self.content(10 + i, seed: i)
            let part = try inbox.receive(try Self.offer(name, bytes, id: UInt32(2 * i + 1)), from: Self.peer)
            try part.write(bytes)
            saved.append(try part.finish().name)
        }
        #expect(saved == ["passwd", "passwd (2)", "b", "unnamed", "unnamed (2)", "a_b", "line_break",
                          String(repeating: "é", count: 127), "photo.png", "photo (2).png"])
        // Everything is directly in the inbox; nothing was written beside it.
        #expect(Self.tree(dir.path).filter { !$0.hasPrefix("inbox") }.isEmpty)
        #expect(Set(try inbox.files()) == Set(saved))
    }

    @Test func theQuotaAndTheFreeSpaceAreCheckedBeforeAccepting() throws {
        let dir = try Directory()
        let small = try Inbox(directory: dir.path, limits: .init(maxResourceBytes: 100))
        let overQuota = try #require(throws: InboxError.self) {
            try small.receive(try Self.offer("big", Self.content(101)), from: Self.peer)
        }
        #expect(overQuota.reason == .tooLarge && overQuota.description.contains("at most 100"))
        // A reserve no file system has: "full" whatever other tests free meanwhile (a reserve
        // of the free space read a moment before failed when a parallel test freed some).
        let full = try Inbox(directory: dir.path, limits: .init(reserveBytes: UInt64.max / 2))
        let noRoom = try #require(throws: InboxError.self) {
            try full.receive(try Self.offer("any", Self.content(10)), from: Self.peer)
        }
        #expect(noRoom.reason == .noSpace)
        #expect(try FileSystem.names(in: full.partDirectory).isEmpty, "a refused transfer leaves no part")
    }

    /// `check` (before a client is asked) refuses what `receive` would, and opens nothing.
    @Test func anOfferIsCheckedWithoutOpeningAPart() throws {
        let dir = try Directory()
        let small = try Inbox(directory: dir.path, limits: .init(maxResourceBytes: 100))
        #expect(throws: Never.self) { try small.check(try Self.offer("ok", Self.content(100)), from: Self.peer) }
        #expect { try small.check(try Self.offer("big", Self.content(101)), from: Self.peer) } throws: { ($0 as? InboxError)?.reason == .tooLarge }
        // A reserve no file system has: "full" whatever other tests free meanwhile (a reserve
        // of the free space read a moment before failed when a parallel test freed some).
        let full = try Inbox(directory: dir.path, limits: .init(reserveBytes: UInt64.max / 2))
        #expect { try full.check(try Self.offer("any", Self.content(10)), from: Self.peer) } throws: { ($0 as? InboxError)?.reason == .noSpace }
        #expect(try FileSystem.names(in: full.partDirectory).isEmpty)
    }

    /// Transfers in progress hold the bytes they still await: an offer that fits the free
    /// space alone but not beside them is refused up front, saying so; as bytes arrive and
    /// parts end, the room comes back. (The free space is a fixed figure here: what the file
    /// system reports moves with the parallel tests.)
    @Test func offersInProgressHoldTheBytesTheyAwait() throws {
        let dir = try Directory()
        let inbox = try Inbox(directory: dir.path, limits: .init(reserveBytes: 100), freeSpace: { _ in 1_300 })
        let a = Self.content(600, seed: 1), b = Self.content(600, seed: 2), c = Self.content(700, seed: 3)
        let first = try inbox.receive(try Self.offer("a", a, id: 1), from: Self.peer)
        #expect(inbox.promisedBytes == 600)
        // 600 + 600 + the reserve of 100 fit 1,300; a third of 600 would not, nor 700 now.
        let second = try inbox.receive(try Self.offer("b", b, id: 3), from: Self.peer)
        #expect(inbox.promisedBytes == 1_200)
        let pastPromises = try #require(throws: InboxError.self) {
            try inbox.receive(try Self.offer("c", c, id: 5), from: Self.peer)
        }
        #expect(pastPromises.reason == .noSpace)
        #expect(pastPromises.description == "the resource needs 700 bytes; the inbox's file system has 1300 free, 1200 of them awaited by transfers in progress and 100 kept in reserve")
        #expect { try inbox.check(try Self.offer("c", c, id: 5), from: Self.peer) } throws: { ($0 as? InboxError)?.reason == .noSpace }
        #expect(try FileSystem.names(in: inbox.partDirectory).count == 4, "the refused offer left no part")
        // Bytes on the disk are no longer promised (the file system's own figure shows them).
        try first.write(Array(a[0..<500]))
        #expect(inbox.promisedBytes == 700)
        // A part that ends (suspended to resume later, or discarded) promises nothing.
        second.discard()
        #expect(inbox.promisedBytes == 100)
        let third = try inbox.receive(try Self.offer("c", c, id: 5), from: Self.peer)
        #expect(inbox.promisedBytes == 800)
        try first.write(Array(a[500...]))
        _ = try first.finish()
        third.suspend()
        #expect(inbox.promisedBytes == 0)
    }

    /// The same content from the same peer, offered again while its part is open (the same
    /// file sent twice at once) waits a moment for the part and is then refused `duplicate`:
    /// two transfers never write one part, and a refusal never removes the part the first is
    /// writing. Once the first lets go, the second resumes from what it wrote.
    @Test func theSameContentTwiceAtOnceIsRefusedDuplicate() throws {
        let dir = try Directory()
        let inbox = try Inbox(directory: dir.path, duplicateWait: .milliseconds(30))
        let bytes = Self.content(5_000)
        var first: IncomingFile? = try inbox.receive(try Self.offer("a.bin", bytes, id: 1), from: Self.peer)
        try first?.write(Array(bytes[0..<1_000]))
        let duplicate = try #require(throws: InboxError.self) {
            try inbox.receive(try Self.offer("b.bin", bytes, id: 3), from: Self.peer)
        }
        #expect(duplicate.reason == .duplicate)
        #expect(duplicate.description == "the same content (b.bin) from this peer is being received already, by another transfer")
        // Another peer's copy is another part.
        let other = PeerID(bytes: [UInt8](repeating: 0x43, count: 32))!
        try inbox.receive(try Self.offer("c.bin", bytes, id: 1), from: other).discard()
        // The first part is untouched by the refusal: suspended, the next resumes it.
        first?.suspend()
        let again = try inbox.receive(try Self.offer("a.bin", bytes, id: 5), from: Self.peer)
        #expect(again.offset == 1_000)
        // The first's object going away later (even discarded after its suspend) frees
        // nothing the second holds, nor removes its files.
        first?.discard()
        first = nil
        #expect(throws: InboxError.self) { _ = try inbox.receive(try Self.offer("d.bin", bytes, id: 7), from: Self.peer) }
        try again.write(Array(bytes[1_000...]))
        #expect(try again.finish().name == "a.bin")
    }

    /// A transfer of a dying session still holding the part when the new session's offer
    /// comes: the new one waits for it (off the connection's queue) and resumes. The outcome
    /// does not depend on which comes first: the wait is far longer than the release takes.
    @Test func aNewOfferWaitsForTheOldTransferToLetGo() async throws {
        let dir = try Directory()
        let inbox = try Inbox(directory: dir.path, duplicateWait: .seconds(60))
        let bytes = Self.content(3_000)
        let old = try inbox.receive(try Self.offer("a.bin", bytes, id: 1), from: Self.peer)
        try old.write(Array(bytes[0..<1_200]))
        let offer = try Self.offer("a.bin", bytes, id: 3)
        let waiting = Task.detached { () -> UInt64 in
            try inbox.receive(offer, from: Self.peer).offset
        }
        old.suspend()
        #expect(try await waiting.value == 1_200)
    }
}
