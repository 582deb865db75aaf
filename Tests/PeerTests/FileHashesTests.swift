import Foundation
@testable import Peer
import Session
import SystemKit
import TLS
import Testing

/// Remembered hashes (`FileHashes`): a file offered again unchanged is not read through
/// again, before or after a restart; a replaced file, or one changed just before it was
/// looked at, is hashed again; the table keeps the most recently used files.
@Suite struct FileHashesTests {
    typealias Node = PeerNodeTests.Node
    typealias Directory = InboxTests.Directory

    static func identity(_ n: UInt64, changed: Int64 = 0) -> FileIdentity {
        FileIdentity(device: 1, inode: n, size: 100, modified: 0, changed: changed)
    }

    @Test func theLeastRecentlyUsedGoesFirst() {
        let hashes = FileHashes(capacity: 2, racyMargin: 0)
        hashes.remember(Self.identity(1), sha256: [1])
        hashes.remember(Self.identity(2), sha256: [2])
        #expect(hashes.hash(of: Self.identity(1)) == [1])
        hashes.remember(Self.identity(3), sha256: [3])
        #expect(hashes.count == 2)
        #expect(hashes.hash(of: Self.identity(2)) == nil, "the least recently used")
        #expect(hashes.hash(of: Self.identity(1)) == [1] && hashes.hash(of: Self.identity(3)) == [3])
        // Any difference in the identity is another file.
        #expect(hashes.hash(of: FileIdentity(device: 1, inode: 1, size: 100, modified: 0, changed: 1)) == nil)
        #expect(hashes.hash(of: FileIdentity(device: 1, inode: 1, size: 101, modified: 0, changed: 0)) == nil)
        #expect(hashes.hash(of: FileIdentity(device: 2, inode: 1, size: 100, modified: 0, changed: 0)) == nil)
    }

    @Test func aFileChangedWithinTheMarginIsNotRemembered() {
        let hashes = FileHashes(racyMargin: 3_000_000_000)
        let changed = Self.identity(1, changed: 10_000_000_000)
        #expect(!hashes.mayRemember(changed, lookedAt: 12_999_999_999))
        #expect(hashes.mayRemember(changed, lookedAt: 13_000_000_000))
        // A change time after the look (a clock set back) is never trusted.
        #expect(!hashes.mayRemember(changed, lookedAt: 9_000_000_000))
    }

    /// Only file systems whose change time follows every write have their files remembered:
    /// the ext4 and tmpfs under the tests do, /proc does not.
    @Test func changeTimesAreTrustedOnLocalFileSystemsOnly() throws {
        let dir = try Directory()
        let path = try PeerResourceTests.write([1], in: dir, "f")
        #expect(try RegularFile.openForReading(path).keepsChangeTimes(), "\(path)")
        #expect(try RegularFile.openForReading("/dev/shm").keepsChangeTimes() == FileManager.default.fileExists(atPath: "/dev/shm"))
        #expect(try !RegularFile.openForReading("/proc/self/status").keepsChangeTimes())
    }

    /// A file may carry a time past 2262 (ext4 and tmpfs keep one): in nanoseconds it is
    /// past Int64, and multiplying it out trapped (any client could stop the daemon by
    /// offering such a file). It is held at Int64.max, and such a file is not remembered.
    @Test func aTimePast2262IsHeldNotTrapped() throws {
        let dir = try Directory()
        let path = try PeerResourceTests.write([7, 7, 7], in: dir, "future")
        var times = [timespec(tv_sec: 10_413_792_000, tv_nsec: 0), timespec(tv_sec: 10_413_792_000, tv_nsec: 0)]  // 2300-01-01
        #expect(utimensat(AT_FDCWD, path, &times, 0) == 0)
        let identity = try RegularFile.openForReading(path).identity()
        #expect(identity.modified == .max && identity.changed < .max)
        let f = try OutgoingFile(path: path, hashes: FileHashes(racyMargin: 0))
        #expect(f.sha256 == (try SHA256Digest.hash([7, 7, 7])))
    }

    /// A PNG, so that the header read without the hash is seen to be read.
    static let png: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0, 0, 0, 13] + Array("IHDR".utf8)
        + [0, 0, 0, 32, 0, 0, 0, 16, 8, 6, 0, 0, 0, 1, 2, 3, 4] + (0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 13) }

    @Test func aFileOfferedAgainUnchangedIsNotReadThrough() throws {
        let dir = try Directory()
        let path = try PeerResourceTests.write(Self.png, in: dir, "pic.png")
        let hashes = FileHashes(racyMargin: 0)
        let first = try OutgoingFile(path: path, hashes: hashes)
        #expect(first.hashed && first.identity != nil && hashes.count == 1)
        #expect(first.sha256 == (try SHA256Digest.hash(Self.png)))
        #expect(hashes.hash(of: try #require(first.identity)) == first.sha256)
        // A made-up hash in its place shows the next offer takes the table's word for it.
        let madeUp = [UInt8](repeating: 0xAB, count: 32)
        hashes.remember(try #require(first.identity), sha256: madeUp)
        let again = try OutgoingFile(path: path, name: "other", hashes: hashes)
        #expect(!again.hashed && again.sha256 == madeUp, "its hash was taken from the table")
        #expect(again.size == first.size && again.identity == first.identity)
        #expect(again.mediaType == "image/png" && again.image == ImageHeader(format: .png, width: 32, height: 16))
        #expect(try again.read(at: 0, count: 8) == Array(Self.png[0..<8]))
    }

    /// A file replaced by another (a new file renamed over it, as editors and our own atomic
    /// writes do) of the same size is another inode: hashed again, its own hash offered.
    @Test func aReplacedFileIsHashedAgain() throws {
        let dir = try Directory()
        let path = try PeerResourceTests.write([UInt8](repeating: 1, count: 5000), in: dir, "f.bin")
        let hashes = FileHashes(racyMargin: 0)
        let first = try OutgoingFile(path: path, hashes: hashes)
        let other = [UInt8](repeating: 2, count: 5000)
        let temporary = try PeerResourceTests.write(other, in: dir, "f.bin.new")
        #expect(rename(temporary, path) == 0)
        let again = try OutgoingFile(path: path, hashes: hashes)
        let expected = try SHA256Digest.hash(other)
        #expect(again.hashed && again.sha256 == expected && again.sha256 != first.sha256)
        #expect(hashes.count == 2)
    }

    /// A file rewritten in place (same inode, same size) is another identity once its times
    /// move (they move by a clock tick: the rewrite is repeated until they have).
    @Test func aFileRewrittenInPlaceIsHashedAgain() throws {
        let dir = try Directory()
        let path = try PeerResourceTests.write([UInt8](repeating: 4, count: 5000), in: dir, "in-place.bin")
        let hashes = FileHashes(racyMargin: 0)
        let first = try OutgoingFile(path: path, hashes: hashes)
        let before = try #require(first.identity)
        let other = [UInt8](repeating: 5, count: 5000)
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
        defer { try? handle.close() }
        let deadline = ContinuousClock.now + .seconds(10)
        var now = before
        while now == before, ContinuousClock.now < deadline {
            try handle.seek(toOffset: 0)
            try handle.write(contentsOf: Data(other))
            now = try RegularFile.openForReading(path).identity()
            if now == before { usleep(1000) }
        }
        #expect(now.inode == before.inode && now.size == before.size && now != before, "the times moved")
        let again = try OutgoingFile(path: path, hashes: hashes)
        let expected = try SHA256Digest.hash(other)
        #expect(again.hashed && again.sha256 == expected)
    }

    /// A file written just now may be written again within the same tick of its file
    /// system's clock, leaving its times as they were: it is hashed every time until its last
    /// change is older than the margin.
    @Test func aFileWrittenJustNowIsHashedEveryTime() throws {
        let dir = try Directory()
        let path = try PeerResourceTests.write([UInt8](repeating: 3, count: 5000), in: dir, "new.bin")
        let hashes = FileHashes(racyMargin: 60_000_000_000)
        let first = try OutgoingFile(path: path, hashes: hashes)
        #expect(first.hashed && first.identity == nil && hashes.count == 0)
        let again = try OutgoingFile(path: path, hashes: hashes)
        #expect(again.hashed && again.identity == nil)
        // Without a table, nothing is remembered either.
        #expect(try OutgoingFile(path: path).identity == nil)
    }

    /// The journal keeps each file's identity with its hash: a restarted sender knows the
    /// hash of a file unchanged since, and offers it again without reading it through. Shown
    /// with a made-up hash put in the journal: the resumed offer carries it (read through,
    /// the file would have another hash and go as a new transfer, `source-changed`); the
    /// receiver then finds the bytes wrong (`hash-mismatch`), and the sender forgets it.
    @Test func aRestartedSenderTakesTheHashFromItsJournalAndForgetsAWrongOne() async throws {
        let dir = try Directory()
        let s = try await PeerResourceTests.senderStoppedAfterAnOffer(dir, hashRacyMargin: 0)
        let (a, identity, journal, path, sent, firstOffer) = (s.a, s.identity, s.journal, s.path, [s.sent], s.firstOffer)
        defer { a.node.stop() }
        let saved = try JSONDecoder().decode(SavedJournal.self, from: Data(contentsOf: URL(fileURLWithPath: journal)))
        let file = try #require(saved.transfers.first?.file)
        #expect(file.size == 70_000 && file.modified > 1_000_000_000_000_000_000, "nanoseconds since 1970, kept exactly")
        #expect(try RegularFile.openForReading(path).identity() == file, "the file is as it was")
        let real = Fingerprint.hexString(sent[0].sha256)
        let madeUp = String(repeating: "ab", count: 32)
        let text = try String(contentsOfFile: journal, encoding: .utf8)
        #expect(text.contains(real))
        try text.replacingOccurrences(of: real, with: madeUp).write(toFile: journal, atomically: true, encoding: .utf8)

        let again = try Node("sender", identity: identity, journal: journal, hashRacyMargin: 0)
        defer { again.node.stop() }
        #expect(again.node.transfers.hashes.hash(of: file).map(Fingerprint.hexString) == madeUp, "read back with the journal")
        _ = try await again.node.connect(to: a.address)
        let offered = await a.wait("offered again") { e in
            if case .resource(.offered(let t)) = e { t.id != firstOffer.id } else { false }
        }
        guard case .resource(.offered(let t))? = offered else { Issue.record("not offered again"); return }
        #expect(Fingerprint.hexString(t.sha256) == madeUp && t.size == 70_000, "the journal's hash, the file not read through")
        try a.node.answer(resource: t.id, accept: true)
        let ended = await again.wait("hash-mismatch") { e in
            if case .resource(.ended(let t, .hashMismatch, _, _)) = e { t.id == sent[0].id } else { false }
        }
        #expect(ended != nil, "the receiver found the bytes wrong")
        #expect(again.node.transfers.hashes.hash(of: file) == nil, "and the sender forgot that hash")
    }

    private struct SavedJournal: Decodable {
        struct Entry: Decodable { var file: FileIdentity? }
        var transfers: [Entry]
    }
}
