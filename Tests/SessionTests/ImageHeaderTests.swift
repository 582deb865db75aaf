import Foundation
import TestSupport
import Testing
@testable import Session

/// PNG and JPEG headers give their format and pixel size, as `file` (libmagic, not our code)
/// reads them; anything else, and a header cut short, is not an image.
@Suite struct ImageHeaderTests {
    static func be(_ v: Int, _ n: Int) -> [UInt8] { (0..<n).reversed().map { UInt8(truncatingIfNeeded: v >> (8 * $0)) } }

    /// A PNG's signature and IHDR (8-bit RGB); the rest of the file does not matter here.
    static func png(_ w: Int, _ h: Int) -> [UInt8] {
        ImageHeader.pngSignature + be(13, 4) + Array("IHDR".utf8) + be(w, 4) + be(h, 4) + [8, 2, 0, 0, 0] + [0, 0, 0, 0]
    }

    /// A JPEG's SOI, a JFIF APP0, a DQT, then SOF `marker` with the size.
    static func jpeg(_ w: Int, _ h: Int, marker: UInt8 = 0xC0, exif: Int = 0) -> [UInt8] {
        var b: [UInt8] = [0xFF, 0xD8]
        b += [0xFF, 0xE0] + be(16, 2) + Array("JFIF".utf8) + [0, 1, 1, 0] + be(1, 2) + be(1, 2) + [0, 0]
        if exif > 0 { b += [0xFF, 0xE1] + be(exif + 2, 2) + [UInt8](repeating: 0x45, count: exif) }
        b += [0xFF, 0xDB] + be(67, 2) + [0] + [UInt8](repeating: 1, count: 64)
        b += [0xFF, marker] + be(17, 2) + [8] + be(h, 2) + be(w, 2) + [3, 1, 0x22, 0, 2, 0x11, 1, 3, 0x11, 1]
        b += [0xFF, 0xD9]
        return b
    }

    static let file = ["/usr/bin/file", "/bin/file"].first { FileManager.default.isExecutableFile(atPath: $0) }

    /// What `file` says of `bytes` (run with runTool: Foundation's Process and Pipe leave
    /// the pipe's write end open to children other tests spawn meanwhile, and the read here
    /// then waited for them to end).
    static func fileSays(_ bytes: [UInt8]) async throws -> String {
        let tool = try #require(file, "file is needed (Debian package file)")
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("peerlink-image-\(UUID().uuidString.prefix(8))").path
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        defer { try? FileManager.default.removeItem(atPath: path) }
        let result = try await runTool(tool, ["-b", path])
        #expect(result.status == 0, "file: \(result)")
        return result.stdout
    }

    @Test(arguments: [(1, 1), (640, 480), (3, 70_000), (0x7FFF_FFFF, 2)])
    func pngSizesAgreeWithFile(_ size: (Int, Int)) async throws {
        let bytes = Self.png(size.0, size.1)
        #expect(ImageHeader.parse(bytes) == ImageHeader(format: .png, width: size.0, height: size.1))
        let said = try await Self.fileSays(bytes)
        #expect(said.hasPrefix("PNG image data, \(size.0) x \(size.1)"), "file says: \(said)")
        #expect(ImageHeader.mediaType(of: bytes) == "image/png")
    }

    // `file` prints sizes over 32,767 as negative (it reads them signed): those are checked below.
    @Test(arguments: [(1, 1), (640, 480), (4000, 3000), (32_767, 7)])
    func jpegSizesAgreeWithFile(_ size: (Int, Int)) async throws {
        let bytes = Self.jpeg(size.0, size.1)
        #expect(ImageHeader.parse(bytes) == ImageHeader(format: .jpeg, width: size.0, height: size.1))
        let said = try await Self.fileSays(bytes)
        #expect(said.hasPrefix("JPEG image data") && said.contains("\(size.0)x\(size.1)"), "file says: \(said)")
        #expect(ImageHeader.mediaType(of: bytes) == "image/jpeg")
    }

    @Test func progressiveJpegsAndLargeExifSegmentsAreRead() {
        #expect(ImageHeader.parse(Self.jpeg(800, 600, marker: 0xC2)) == ImageHeader(format: .jpeg, width: 800, height: 600))
        #expect(ImageHeader.parse(Self.jpeg(20, 10, exif: 60_000)) == ImageHeader(format: .jpeg, width: 20, height: 10))
        #expect(ImageHeader.parse(Self.jpeg(65_535, 65_535)) == ImageHeader(format: .jpeg, width: 65_535, height: 65_535))
        // DHT (0xC4) is not a frame: the size is the SOF's after it.
        var withDHT = Array(Self.jpeg(5, 6).prefix(2)) + [0xFF, 0xC4] + Self.be(5, 2) + [0, 1, 2]
        withDHT += Self.jpeg(5, 6).dropFirst(2)
        #expect(ImageHeader.parse(withDHT) == ImageHeader(format: .jpeg, width: 5, height: 6))
    }

    @Test func otherBytesAndCutHeadersAreNotImages() {
        #expect(ImageHeader.parse([]) == nil)
        #expect(ImageHeader.parse(Array("GIF89a".utf8) + [1, 0, 1, 0]) == nil)
        #expect(ImageHeader.mediaType(of: Array("hello".utf8)) == "application/octet-stream")
        let png = Self.png(10, 10), jpeg = Self.jpeg(10, 10)
        for n in 0..<24 { #expect(ImageHeader.parse(png.prefix(n)) == nil, "a PNG cut at \(n)") }
        let sof = jpeg.count - 2 - 19
        for n in 0..<(sof + 9) { #expect(ImageHeader.parse(jpeg.prefix(n)) == nil, "a JPEG cut at \(n)") }
        #expect(ImageHeader.parse(Self.png(0, 5)) == nil, "width 0")
        #expect(ImageHeader.parse(Self.jpeg(0, 5)) == nil, "width 0")
        // Start of scan before any frame, and a segment length under 2.
        #expect(ImageHeader.parse([0xFF, 0xD8, 0xFF, 0xDA, 0, 8]) == nil)
        #expect(ImageHeader.parse([0xFF, 0xD8, 0xFF, 0xE0, 0, 1, 0, 0]) == nil)
    }
}
