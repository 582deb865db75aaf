import Foundation
import Peer
import Session
import TLS
import Testing

/// A file offered to peers: hashed once (agreeing with a one-shot hash), its image header
/// read, read back from any offset, and refused once it changes under the offer.
@Suite struct OutgoingFileTests {
    static func write(_ bytes: [UInt8], _ name: String) throws -> (dir: String, path: String) {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("peerlink-out-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let path = dir + "/" + name
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        return (dir, path)
    }

    @Test func anOfferCarriesTheHashSizeNameAndMediaType() throws {
        let bytes = (0..<200_000).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        let (dir, path) = try Self.write(bytes, "data.bin")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let f = try OutgoingFile(path: path)
        #expect(f.name == "data.bin" && f.size == 200_000 && f.mediaType == "application/octet-stream" && f.image == nil)
        #expect(f.sha256 == (try SHA256Digest.hash(bytes)))
        // Any offset, pieces of at most one frame's payload, nothing past the end.
        #expect(try f.read(at: 0, count: 10) == Array(bytes[0..<10]))
        #expect(try f.read(at: 199_990, count: 100) == Array(bytes[199_990...]))
        #expect(try f.read(at: 1000, count: 1 << 20)?.count == OutgoingFile.maxChunk)
        #expect(try f.read(at: 200_000, count: 10) == [])
        let named = try OutgoingFile(path: path, name: "other name", mediaType: "text/plain")
        #expect(named.name == "other name" && named.mediaType == "text/plain")
    }

    /// A file name starting with a combining mark: the path's '/' before it and the mark are
    /// one Character, and the name offered was "<directory>/\u{301}f.bin".
    @Test func theNameOfferedIsThePathsLastComponent() throws {
        let (dir, path) = try Self.write([1, 2, 3], "\u{301}f.bin")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        #expect(Array(try OutgoingFile(path: path).name.utf8) == Array("\u{301}f.bin".utf8))
    }

    @Test func aPNGIsRecognisedFromItsHeader() throws {
        let png: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0, 0, 0, 13] + Array("IHDR".utf8)
            + [0, 0, 0, 32, 0, 0, 0, 16, 8, 6, 0, 0, 0, 1, 2, 3, 4]
        let (dir, path) = try Self.write(png, "pic")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let f = try OutgoingFile(path: path)
        #expect(f.mediaType == "image/png" && f.image == ImageHeader(format: .png, width: 32, height: 16))
    }

    @Test func aFileChangedUnderItsOfferIsRefused() throws {
        let (dir, path) = try Self.write([1, 2, 3, 4], "f")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let f = try OutgoingFile(path: path)
        #expect(try f.read(at: 0, count: 4) == [1, 2, 3, 4])
        let h = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
        try h.seekToEnd()
        try h.write(contentsOf: Data([5]))
        try h.close()
        #expect(try f.read(at: 0, count: 4) == nil)
        #expect(try !f.unchanged())
        #expect(throws: (any Error).self) { try OutgoingFile(path: dir + "/missing") }
    }
}
