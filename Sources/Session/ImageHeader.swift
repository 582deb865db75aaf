/// What a file's first bytes say it is: PNG or JPEG with its pixel size, as the reference
/// flow's receiver checks that what it got is an image. Read from the header alone (a PNG's
/// IHDR, a JPEG's first start-of-frame), never by decoding the picture; anything else is
/// not an image. Pure: bytes in, an answer out.
public struct ImageHeader: Sendable, Hashable {
    /// The image formats recognised.
    public enum Format: String, Sendable, Hashable {
        /// Portable Network Graphics.
        case png
        /// JPEG (JFIF or Exif).
        case jpeg

        /// The media type ("image/png", "image/jpeg").
        public var mediaType: String { "image/\(rawValue)" }
    }

    /// The format.
    public let format: Format
    /// Width in pixels (at least 1).
    public let width: Int
    /// Height in pixels (at least 1).
    public let height: Int

    /// How many leading bytes `parse` may need: a JPEG's start-of-frame can follow large
    /// Exif and ICC segments.
    public static let maxHeaderBytes = 256 * 1024

    /// A header.
    public init(format: Format, width: Int, height: Int) {
        self.format = format
        self.width = width
        self.height = height
    }

    static let pngSignature: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]

    /// The header of `bytes` (a file's first bytes, up to `maxHeaderBytes`), or nil when they
    /// are not the start of a PNG or JPEG with a plausible size.
    public static func parse(_ bytes: some Collection<UInt8>) -> ImageHeader? {
        let b = Array(bytes.prefix(maxHeaderBytes))
        if b.starts(with: pngSignature) { return png(b) }
        if b.count >= 3, b[0] == 0xFF, b[1] == 0xD8, b[2] == 0xFF { return jpeg(b) }
        return nil
    }

    /// The media type a file's first bytes suggest: an image's, else "application/octet-stream".
    public static func mediaType(of bytes: some Collection<UInt8>) -> String {
        parse(bytes)?.format.mediaType ?? "application/octet-stream"
    }

    private static func be(_ b: [UInt8], _ at: Int, _ n: Int) -> Int? {
        guard at >= 0, at + n <= b.count else { return nil }
        return b[at..<at + n].reduce(0) { $0 << 8 | Int($1) }
    }

    /// PNG: the signature, then the IHDR chunk (length 13, type "IHDR", width, height).
    private static func png(_ b: [UInt8]) -> ImageHeader? {
        guard be(b, 8, 4) == 13, b.count >= 24, Array(b[12..<16]) == Array("IHDR".utf8),
              let w = be(b, 16, 4), let h = be(b, 20, 4),
              (1...0x7FFF_FFFF).contains(w), (1...0x7FFF_FFFF).contains(h) else { return nil }
        return ImageHeader(format: .png, width: w, height: h)
    }

    /// JPEG: the segments after SOI up to the first start-of-frame (SOF0–SOF15 but DHT, JPG
    /// and DAC), whose payload gives precision, height, width.
    private static func jpeg(_ b: [UInt8]) -> ImageHeader? {
        var at = 2
        while at + 4 <= b.count {
            guard b[at] == 0xFF else { return nil }
            let marker = b[at + 1]
            // Fill bytes before a marker.
            if marker == 0xFF {
                at += 1
                continue
            }
            // Markers without a length: TEM, RST0–7.
            if marker == 0x01 || (0xD0...0xD7).contains(marker) {
                at += 2
                continue
            }
            // End of image or start of scan before any frame: no size.
            if marker == 0xD9 || marker == 0xDA { return nil }
            guard let length = be(b, at + 2, 2), length >= 2 else { return nil }
            if (0xC0...0xCF).contains(marker), marker != 0xC4, marker != 0xC8, marker != 0xCC {
                guard length >= 7, let h = be(b, at + 5, 2), let w = be(b, at + 7, 2), h > 0, w > 0 else { return nil }
                return ImageHeader(format: .jpeg, width: w, height: h)
            }
            at += 2 + length
        }
        return nil
    }
}
