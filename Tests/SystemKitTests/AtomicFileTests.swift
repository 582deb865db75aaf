#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import Testing
@testable import SystemKit

/// `AtomicFile`'s temporaries: one this process is writing is never taken for a leftover,
/// whatever its pid says; the name a temporary is known by.
@Suite struct AtomicFileTests {
    static func makeDirectory() throws -> String {
        var template = Array("/tmp/peerlink-atomic-XXXXXX".utf8CString)
        guard let made = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) else {
            throw SystemError(call: "mkdtemp", code: errno)
        }
        return String(cString: made)
    }

    static func removeDirectory(_ path: String) {
        for name in (try? FileSystem.names(in: path)) ?? [] { unlink(path + "/" + name) }
        rmdir(path)
    }

    /// `write` marks its own temporary: a sweep of the directory while it is written (here
    /// just before its rename) keeps it, and the file arrives whole.
    @Test func aWritesOwnTemporaryIsKeptBySweepsMeanwhile() throws {
        let dir = try Self.makeDirectory()
        defer { Self.removeDirectory(dir) }
        let seen = Mutex<(removed: Int, existed: Bool)?>(nil)
        AtomicFile.beforeRenaming.withLock {
            $0 = { temporary in
                guard temporary.hasPrefix(dir + "/") else { return }  // another test's write
                let removed = AtomicFile.removeAbandonedTemporaries(in: dir)
                seen.withLock { $0 = (removed, access(temporary, F_OK) == 0) }
            }
        }
        defer { AtomicFile.beforeRenaming.withLock { $0 = nil } }
        try AtomicFile.write([1, 2, 3], to: dir + "/state.json", mode: 0o600)
        let s = try #require(seen.withLock { $0 }, "the hook ran")
        #expect(s.removed == 0 && s.existed, "the write's own temporary was kept")
        #expect(try AtomicFile.readIfPresent(dir + "/state.json", maximumSize: 10) == [1, 2, 3])
    }

    @Test func aTemporaryBeingWrittenIsKept() throws {
        let dir = try Self.makeDirectory()
        defer { Self.removeDirectory(dir) }
        let name = "x.json.tmp-\(getpid())-42"
        try AtomicFile.write([1], to: dir + "/" + name, mode: 0o600)
        AtomicFile.inFlight.withLock { _ = $0.insert(name) }
        #expect(AtomicFile.removeAbandonedTemporaries(in: dir) == 0)
        AtomicFile.inFlight.withLock { _ = $0.remove(name) }
        // Once its write is over, a file with this name and pid is an earlier process's.
        #expect(AtomicFile.removeAbandonedTemporaries(in: dir) == 1)
        #expect(try FileSystem.names(in: dir).isEmpty)
    }

    @Test func aWriteLeavesNoMarkAndNoTemporary() throws {
        let dir = try Self.makeDirectory()
        defer { Self.removeDirectory(dir) }
        // A name no other test writes (they run beside this one, in the same process).
        let file = "state-\(AtomicFile.lastComponent(of: dir)).json"
        try AtomicFile.write(Array("hello".utf8), to: dir + "/" + file, mode: 0o600)
        #expect(!AtomicFile.inFlight.withLock { $0.contains { $0.hasPrefix(file + ".tmp-") } })
        #expect(try FileSystem.names(in: dir) == [file])
        #expect(AtomicFile.lastComponent(of: "/a/b/c.json") == "c.json")
        #expect(AtomicFile.lastComponent(of: "c.json") == "c.json")
        #expect(AtomicFile.lastComponent(of: "/a/\u{301}b") == "\u{301}b")
    }
}
