import Foundation
import Peer
import Session
import SystemKit
import TLS
import Testing

/// The daemon's JSON state files, read as earlier versions wrote them: the trust store and
/// the outgoing-transfer journal. A bad entry in the journal is skipped alone; a file that
/// is not one is an error naming it (trust) or set aside (journal), never a crash.
@Suite struct StateFileTests {
    typealias Directory = InboxTests.Directory
    static let idA = String(repeating: "ab", count: 32)
    static let idB = String(repeating: "cd", count: 32)

    static func write(_ text: String, _ path: String) throws {
        try AtomicFile.write(Array(text.utf8), to: path, mode: 0o600)
    }

    /// As the previous version wrote it (pretty, sorted, `"key" : value`), and by hand
    /// (no name, no time).
    @Test func aTrustStoreFileIsReadAsWritten() throws {
        let dir = try Directory()
        let path = dir.path + "/trusted-peers.json"
        try Self.write("""
            {
              "peers" : [
                {
                  "id" : "\(Self.idA)",
                  "name" : "Kenshin's board",
                  "since" : 1764720000
                },
                {"id": "\(Self.idB)"}
              ]
            }
            """, path)
        let store = try TrustStore(path: path)
        let all = store.all
        #expect(all.count == 2)
        let a = all.first { $0.peer.hex == Self.idA }, b = all.first { $0.peer.hex == Self.idB }
        #expect(a?.name == "Kenshin's board" && a?.since == 1_764_720_000)
        #expect(b?.name == "" && b?.since == 0)

        // Saved and read back: the same entries, the file still private.
        let c = PeerID(hex: String(repeating: "ef", count: 32))!
        #expect(try store.trust(c, name: "third"))
        let again = try TrustStore(path: path)
        #expect(Set(again.all) == Set(store.all))
        var info = stat()
        #expect(stat(path, &info) == 0 && info.st_mode & 0o777 == 0o600)
    }

    /// A trusted peer's session up (with where a dial of ours reached it) marks it to come
    /// back after a restart, written once (the same again writes nothing) and read back; a
    /// choice's end unmarks it and keeps the address; a later dial's address replaces it; an
    /// untrusted peer is not recorded, nor one forgotten and trusted again. A file without
    /// these (an older version's) reads as neither.
    @Test func aTrustedPeersSessionIsKeptForARestart() throws {
        let dir = try Directory()
        let path = dir.path + "/trusted-peers.json"
        let store = try TrustStore(path: path)
        let a = try #require(PeerID(hex: Self.idA)), b = try #require(PeerID(hex: Self.idB))
        #expect(try store.trust(a, name: "a"))
        #expect(store.all.first?.address == nil && store.all.first?.resume == false)
        let there = try HostPort("[fe80::1%eth0]:7001"), here = try HostPort("10.0.0.2:7001")
        #expect(try store.sessionUp(a, reachedAt: there))
        #expect(try !store.sessionUp(a, reachedAt: there), "the same again: nothing to save")
        #expect(try !store.sessionUp(a, reachedAt: nil), "the peer dialled: the address stays")
        #expect(try !store.sessionUp(b, reachedAt: here), "an untrusted peer is not kept")
        var read = try TrustStore(path: path).all
        #expect(read.map(\.address) == [there] && read.map(\.resume) == [true], "read back after a restart")
        #expect(try store.sessionEndedByChoice(a))
        #expect(try !store.sessionEndedByChoice(a))
        read = try TrustStore(path: path).all
        #expect(read.map(\.address) == [there] && read.map(\.resume) == [false])
        #expect(try store.sessionUp(a, reachedAt: here))
        #expect(try TrustStore(path: path).all.map(\.address) == [here], "the latest dial's address")
        #expect(try store.forget(a) && store.trust(a, name: "a"))
        let text = String(decoding: try Data(contentsOf: URL(fileURLWithPath: path)), as: UTF8.self)
        #expect(!text.contains("address") && !text.contains("resume"), "forgotten and trusted again: neither: \(text)")
    }

    @Test(arguments: [
        ("not json", "not a trust store"),
        ("{\"peers\": {}}", "not a trust store"),
        ("{\"peers\": [{\"id\": \"\(idA)\"}, {\"id\": \"abc\"}]}", "peers[1].id is not 64 hex digits"),
    ])
    func aBadTrustStoreIsAnErrorNamingIt(text: String, words: String) throws {
        let dir = try Directory()
        let path = dir.path + "/trusted-peers.json"
        try Self.write(text, path)
        do {
            _ = try TrustStore(path: path)
            Issue.record("accepted \(text)")
        } catch {
            #expect("\(error)".contains(path) && "\(error)".contains(words), "\(error)")
        }
    }

    /// An address that is not HOST:PORT (only where to dial after a restart) is passed over
    /// with a warning naming the file and entry; the trust is kept, and the next save drops it.
    @Test func aBadAddressIsPassedOverWithAWarning() throws {
        let dir = try Directory()
        let path = dir.path + "/trusted-peers.json"
        try Self.write("{\"peers\": [{\"id\": \"\(Self.idA)\", \"address\": \"host-without-port\", \"resume\": true}]}", path)
        let store = try TrustStore(path: path)
        let a = try #require(PeerID(hex: Self.idA))
        #expect(store.isTrusted(a) && store.all.map(\.address) == [nil] && store.all.map(\.resume) == [true])
        #expect(store.loadWarnings.count == 1)
        #expect(store.loadWarnings.allSatisfy { $0.contains(path) && $0.contains("peers[0].address is not HOST:PORT") }, "\(store.loadWarnings)")
        #expect(try store.sessionUp(a, reachedAt: HostPort("10.0.0.2:7001")))
        #expect(try TrustStore(path: path).loadWarnings.isEmpty, "saved again with a good address")
    }

    /// A change that cannot be saved (a full or read-only disk in the lab scenario
    /// 15-board-faults; here the store's directory is replaced by a file) throws an error
    /// naming the file, and changes nothing, in memory or on disk; once the file can be
    /// written again, the next change is saved with everything before it.
    @Test func aChangeThatCannotBeSavedChangesNothing() throws {
        let dir = try Directory()
        let folder = dir.path + "/peer", path = folder + "/trusted-peers.json"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: false)
        let store = try TrustStore(path: path)
        let a = try #require(PeerID(hex: Self.idA)), b = try #require(PeerID(hex: Self.idB))
        #expect(try store.trust(a, name: "a"))
        let saved = try Data(contentsOf: URL(fileURLWithPath: path))

        try FileManager.default.moveItem(atPath: folder, toPath: folder + ".away")
        try Self.write("not a directory", folder)
        for (what, change) in [("trust", { _ = try store.trust(b, name: "b") }), ("forget", { _ = try store.forget(a) })] as [(String, () throws -> Void)] {
            do {
                try change()
                Issue.record("\(what) succeeded with no place to save")
            } catch let e as TrustStoreError {
                #expect(e.path == path && "\(e)".contains("nothing changed") && "\(e)".contains("Not a directory"), "\(e)")
            }
        }
        #expect(store.isTrusted(a) && !store.isTrusted(b), "unchanged in memory")

        try FileManager.default.removeItem(atPath: folder)
        try FileManager.default.moveItem(atPath: folder + ".away", toPath: folder)
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == saved, "unchanged on disk")
        #expect(try store.trust(b, name: "b"))
        #expect(Set(try TrustStore(path: path).all.map(\.peer)) == [a, b])
    }

    /// One good entry among bad ones (a wrong type, a missing key, a bad hash): the good one
    /// is offered again, the others skipped and logged.
    @Test func aJournalEntryThatIsNotValidIsSkippedAlone() throws {
        let dir = try Directory()
        let journal = dir.path + "/outgoing.json"
        let sha = String(repeating: "0f", count: 32)
        func entry(_ id: String, peer: String = Self.idA, sha256: String = sha) -> String {
            "{\"id\" : \(id), \"media_type\" : \"image/png\", \"name\" : \"a.png\", \"path\" : \"/tmp/a.png\", \"peer\" : \"\(peer)\", \"sha256\" : \"\(sha256)\", \"size\" : 70000}"
        }
        try Self.write("""
            {
              "transfers" : [
                \(entry("\"seven\"")),
                \(entry("8")),
                {"id": 9},
                \(entry("10", sha256: "zz")),
                \(entry("11", peer: "nope"))
              ]
            }
            """, journal)
        let node = try PeerNodeTests.Node("sender", journal: journal)
        defer { node.node.stop() }
        let transfers = node.node.resourceTransfers
        #expect(transfers.map(\.id) == [8])
        let t = transfers.first
        #expect(t?.name == "a.png" && t?.size == 70_000 && t?.mediaType == "image/png" && t?.outgoing == true)
    }

    /// A journal that is not one is renamed `.bad` (kept for a person to look at) and the
    /// node starts with no outgoing transfers.
    @Test func aJournalThatIsNotOneIsSetAside() throws {
        let dir = try Directory()
        let journal = dir.path + "/outgoing.json"
        try Self.write("{\"transfers\": 3}", journal)
        let node = try PeerNodeTests.Node("sender", journal: journal)
        defer { node.node.stop() }
        #expect(node.node.resourceTransfers.isEmpty)
        #expect(FileManager.default.fileExists(atPath: journal + ".bad"))
    }

    /// A process id no process has (ESRCH): what a daemon killed mid-write leaves in a name.
    static func deadPID() -> Int32 {
        var pid: Int32 = 4_000_000  // at most Linux's largest pid_max (4,194,304)
        while kill(pid, 0) == 0 || errno != ESRCH { pid -= 1 }
        return pid
    }

    /// A `kill -9` between `AtomicFile.write` making its temporary file and renaming it leaves
    /// `<file>.tmp-<pid>-<n>`; opening the directory again removes it: a gone process's, one
    /// with this process's pid that it is not writing (an earlier process had the pid), one
    /// written before this boot; and nothing else: not a running process's from this boot,
    /// not names that only look alike. (A write under way is kept: AtomicFileTests.)
    @Test func temporariesOfAKilledWriterAreRemovedAndNothingElse() throws {
        let dir = try Directory()
        let dead = Self.deadPID(), me = getpid()
        let abandoned = ["trusted-peers.json.tmp-\(dead)-7", "k.state.tmp-\(dead)-4294967295", "k.state.tmp-\(me)-1",
                         "a.tmp-1-2.tmp-\(dead)-3", "before-boot.tmp-1-5"]
        let kept = ["trusted-peers.json", "k.state", "k.data", "k.state.tmp-1-2", "a.tmp-\(dead)-2.tmp-1-3",
                    "x.tmp-\(dead)", "x.tmp-a-1", "x.tmp-\(dead)-1-2", ".tmp-\(dead)-1", "x.tmp--1", "x.tmp-\(dead)-"]
        for name in abandoned + kept { try Self.write("x", dir.path + "/" + name) }
        // Pid 1 runs, but this file was last written an hour before the machine booted.
        var uptime = timespec()
        clock_gettime(CLOCK_BOOTTIME, &uptime)
        let hourBeforeBoot = Int(Date().timeIntervalSince1970) - uptime.tv_sec - 3600
        var times = [timespec(tv_sec: hourBeforeBoot, tv_nsec: 0), timespec(tv_sec: hourBeforeBoot, tv_nsec: 0)]
        #expect(utimensat(AT_FDCWD, dir.path + "/before-boot.tmp-1-5", &times, 0) == 0)
        #expect(AtomicFile.removeAbandonedTemporaries(in: dir.path) == abandoned.count)
        #expect(try FileSystem.names(in: dir.path) == kept.sorted())
        #expect(AtomicFile.removeAbandonedTemporaries(in: dir.path + "/missing") == 0)
    }

    /// The inbox's length records are such files: a daemon killed while writing one left a
    /// temporary in `.part` for ever (seen once in the lab's resume scenario).
    @Test func openingTheInboxRemovesAKilledWritersTemporary() throws {
        let dir = try Directory()
        let first = try Inbox(directory: dir.path)
        let leftover = "\(String(repeating: "ab", count: 20)).state.tmp-\(Self.deadPID())-3"
        try Self.write("1\nboot\n", first.partDirectory + "/" + leftover)
        try Self.write("data", first.partDirectory + "/other.data")
        let again = try Inbox(directory: dir.path)
        #expect(try FileSystem.names(in: again.partDirectory) == ["other.data"])
    }
}
