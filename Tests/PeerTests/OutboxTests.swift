import Foundation
import SystemKit
import Testing
@testable import Peer

/// The outbox's copy of a passed descriptor: whole under its name or not at all, checked
/// against the size the client announced, stopped at the file system's reserve, and
/// leftovers removed.
@Suite struct OutboxTests {
    typealias Directory = InboxTests.Directory

    /// A socket pair whose other end gets `bytes`, then closes: the end to copy from.
    static func source(_ bytes: [UInt8]) throws -> Int32 { try PeerResourceSourceTests.pipe(feeding: bytes) }

    @Test(arguments: [nil, 100_000] as [UInt64?])
    func aCopyIsWholeUnderItsName(size: UInt64?) throws {
        let dir = try Directory()
        let outbox = try Outbox(directory: dir.path + "/outbox")
        let bytes = InboxTests.content(100_000)
        let fd = try Self.source(bytes)
        defer { closeQuietly(fd) }
        let path = outbox.newPath()
        try outbox.copy(from: fd, to: path, expectedSize: size)
        #expect(FileManager.default.contents(atPath: path).map { [UInt8]($0) } == bytes)
        #expect(InboxTests.tree(outbox.directory) == [String(path.split(separator: "/").last!)], "no part left")
    }

    /// Fewer bytes than announced (a writer killed mid-way), or more: an error saying so,
    /// and nothing left in the outbox.
    @Test(arguments: [(1000, 2000, "gave 1000 bytes, not the 2000 announced"), (3000, 2000, "more than the 2000 bytes announced")])
    func aCountOtherThanAnnouncedIsAnError(given: Int, announced: UInt64, says: String) throws {
        let dir = try Directory()
        let outbox = try Outbox(directory: dir.path + "/outbox")
        let fd = try Self.source(InboxTests.content(given))
        defer { closeQuietly(fd) }
        #expect { try outbox.copy(from: fd, to: outbox.newPath(), expectedSize: announced) } throws: { "\($0)".contains(says) }
        #expect(InboxTests.tree(outbox.directory).isEmpty)
    }

    /// A file system down to its reserve takes no copy (the daemon's state files must stay
    /// writable): here the reserve is more than any disk has.
    @Test func theReserveIsKeptFree() throws {
        let dir = try Directory()
        let outbox = try Outbox(directory: dir.path + "/outbox", reserveBytes: .max)
        let fd = try Self.source([1, 2, 3])
        defer { closeQuietly(fd) }
        #expect { try outbox.copy(from: fd, to: outbox.newPath()) } throws: { "\($0)".contains("kept free") && "\($0)".contains(outbox.directory) }
        #expect(InboxTests.tree(outbox.directory).isEmpty)
    }

    /// The reserve stays free between two looks at the free space too: each look asks for
    /// room for what may come before the next one (16 MiB and a read), or for the rest of
    /// the announced size. (A file system with 10 MiB beside the reserve: a copy of 12 MiB
    /// went whole before, down into the reserve, as the first look was the only one.)
    @Test(arguments: [(nil, false), (12 << 20, false), (8 << 20, true)] as [(UInt64?, Bool)])
    func theReserveStaysFreeBetweenLooks(announced: UInt64?, fits: Bool) throws {
        let dir = try Directory()
        let reserve: UInt64 = 1 << 20
        let outboxPath = dir.path + "/outbox"
        // The free space the copy leaves: 10 MiB beside the reserve, less what it wrote.
        let outbox = try Outbox(directory: outboxPath, reserveBytes: reserve) { directory in
            let written = (try? FileSystem.names(in: directory))?.reduce(UInt64(0)) { total, name in
                total + ((try? FileManager.default.attributesOfItem(atPath: directory + "/" + name)[.size] as? UInt64) ?? 0)
            } ?? 0
            return reserve + (10 << 20) - min(written, reserve + (10 << 20))
        }
        let bytes = InboxTests.content(Int(announced ?? (12 << 20)))
        let fd = try Self.source(bytes)
        defer { closeQuietly(fd) }
        let path = outbox.newPath()
        if fits {
            try outbox.copy(from: fd, to: path, expectedSize: announced)
            #expect(FileManager.default.contents(atPath: path).map { [UInt8]($0) } == bytes)
        } else {
            #expect { try outbox.copy(from: fd, to: path, expectedSize: announced) } throws: { "\($0)".contains("stopped after 0 bytes") }
            #expect(InboxTests.tree(outbox.directory).isEmpty)
        }
    }

    /// A descriptor that gives nothing for the idle time ends the copy, naming the wait.
    @Test func aSilentDescriptorEndsTheCopy() throws {
        let dir = try Directory()
        let outbox = try Outbox(directory: dir.path + "/outbox")
        let (fd, kept) = try DescriptorPassing.streamPair()
        defer { closeQuietly(fd); closeQuietly(kept) }
        #expect { try outbox.copy(from: fd, to: outbox.newPath(), idleTimeout: .milliseconds(200)) } throws: { "\($0)".contains("gave nothing") }
        #expect(InboxTests.tree(outbox.directory).isEmpty)
    }

    @Test func removeAllKeepsOnlyWhatIsAskedFor() throws {
        let dir = try Directory()
        let outbox = try Outbox(directory: dir.path + "/outbox")
        let keep = outbox.newPath()
        for path in [keep, keep + Outbox.partSuffix, outbox.newPath(), outbox.newPath() + Outbox.partSuffix] {
            _ = FileManager.default.createFile(atPath: path, contents: Data([1]))
        }
        #expect(outbox.removeAll(except: [keep]) == 2)
        #expect(Set(InboxTests.tree(outbox.directory)) == [String(keep.split(separator: "/").last!), String(keep.split(separator: "/").last!) + ".part"])
    }
}
