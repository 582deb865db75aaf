#if canImport(Glibc)
import Glibc
#endif
import Testing
@testable import SystemKit

/// `RegularFile.readChunks` (hashing a file: the next piece is read while this one is
/// handled) hands over every byte once, in order, in pieces of at most its chunk, for every
/// length around the pieces' edges, and stops where it is asked to.
@Suite struct RegularFileTests {
    /// A file of `count` patterned bytes in a directory of its own (the caller removes the
    /// directory with `AtomicFileTests.removeDirectory`).
    static func makeFile(_ count: Int) throws -> (file: RegularFile, bytes: [UInt8], dir: String) {
        let dir = try AtomicFileTests.makeDirectory()
        let bytes = (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ $0 >> 8) }
        let file = try RegularFile.openForWriting(dir + "/data")
        try file.write(bytes, at: 0)
        return (file, bytes, dir)
    }

    /// Reads `upTo` bytes of a `count`-byte file in pieces of `chunk`: what came, piece sizes.
    static func read(_ count: Int, upTo: UInt64, chunk: Int) throws -> (got: [UInt8], pieces: [Int], total: UInt64, bytes: [UInt8]) {
        let (file, bytes, dir) = try makeFile(count)
        defer { AtomicFileTests.removeDirectory(dir) }
        var got: [UInt8] = [], pieces: [Int] = []
        let total = try file.readChunks(upTo: upTo, chunk: chunk) { piece in
            got += piece
            pieces.append(piece.count)
        }
        return (got, pieces, total, bytes)
    }

    @Test(arguments: [0, 1, 99, 100, 101, 199, 200, 201, 1_000, 1_057])
    func everyByteOnceInOrder(count: Int) throws {
        let (got, pieces, total, bytes) = try Self.read(count, upTo: UInt64(count), chunk: 100)
        #expect(got == bytes)
        #expect(total == UInt64(count))
        #expect(pieces.allSatisfy { $0 > 0 && $0 <= 100 })
        #expect(pieces.count == (count + 99) / 100)
    }

    @Test func itStopsAtTheLengthAsked() throws {
        let (got, pieces, total, bytes) = try Self.read(1_000, upTo: 250, chunk: 100)
        #expect(got == Array(bytes[0..<250]) && total == 250 && pieces == [100, 100, 50])
    }

    @Test func aFileShorterThanAskedEndsAtItsEnd() throws {
        let (got, pieces, total, bytes) = try Self.read(230, upTo: 10_000, chunk: 100)
        #expect(got == bytes && total == 230 && pieces == [100, 100, 30])
    }

    /// A failing body stops the reading at once: its error comes out and no piece follows.
    /// The same file then reads whole through another call.
    @Test func aBodysErrorStopsTheReading() throws {
        struct Stop: Error {}
        let (file, bytes, dir) = try Self.makeFile(1_000)
        defer { AtomicFileTests.removeDirectory(dir) }
        var calls = 0
        #expect(throws: Stop.self) {
            try file.readChunks(upTo: 1_000, chunk: 100) { _ in
                calls += 1
                if calls == 3 { throw Stop() }
            }
        }
        #expect(calls == 3)
        var again: [UInt8] = []
        try file.readChunks(upTo: 1_000, chunk: 64) { again += $0 }
        #expect(again == bytes)
    }

    /// A file that ends on a piece's edge, read with a longer length asked: the read after
    /// its last piece finds nothing, and no empty piece is handed over.
    @Test func aFileEndingOnAPiecesEdgeGetsNoEmptyPiece() throws {
        let (got, pieces, total, bytes) = try Self.read(200, upTo: 10_000, chunk: 100)
        #expect(got == bytes && total == 200 && pieces == [100, 100])
    }

    /// A read that fails is thrown, naming the call and the path; no piece is handed over.
    @Test func aFailedReadIsThrown() throws {
        let dir = try AtomicFileTests.makeDirectory()
        defer { AtomicFileTests.removeDirectory(dir) }
        let notAFile = try RegularFile.openForReading(dir)
        var pieces = 0
        let error = try #require(throws: SystemError.self) {
            try notAFile.readChunks(upTo: 1_000, chunk: 100) { _ in pieces += 1 }
        }
        #expect(error.code == EISDIR && pieces == 0)
        #expect(error.description.contains("pread") && error.description.contains(dir))
    }
}

/// `FileSystem.moveWithoutReplacing`: a move to a free name happens in one step (the file is
/// under one name at every moment), and a taken name is never replaced: false, and both
/// files stay as they were.
@Suite struct MoveWithoutReplacingTests {
    @Test func aFreeNameIsTakenAndATakenOneIsLeftAlone() throws {
        let dir = try AtomicFileTests.makeDirectory()
        defer { AtomicFileTests.removeDirectory(dir) }
        try AtomicFile.write([1, 2, 3], to: dir + "/part", mode: 0o600)
        try AtomicFile.write([9], to: dir + "/taken", mode: 0o600)
        #expect(try FileSystem.moveWithoutReplacing(dir + "/part", to: dir + "/taken") == false)
        #expect(try AtomicFile.readIfPresent(dir + "/taken", maximumSize: 16) == [9], "not replaced")
        #expect(try AtomicFile.readIfPresent(dir + "/part", maximumSize: 16) == [1, 2, 3], "not moved")
        #expect(try FileSystem.moveWithoutReplacing(dir + "/part", to: dir + "/free") == true)
        #expect(try AtomicFile.readIfPresent(dir + "/free", maximumSize: 16) == [1, 2, 3])
        #expect(try AtomicFile.readIfPresent(dir + "/part", maximumSize: 16) == nil, "moved, not linked")
        let file = try RegularFile.openForReading(dir + "/free")
        #expect(try file.linkCount() == 1, "one name")
    }
}
