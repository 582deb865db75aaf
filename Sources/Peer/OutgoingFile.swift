import Session
import SystemKit
import TLS

/// A file this side offers: hashed once when opened (the offer carries its SHA-256, size
/// and media type), or not at all when `FileHashes` remembers it unchanged, then read in
/// pieces from whatever offset each receiver asks for. Every receiver reads the same open
/// file, so the data comes from the disk once and from the page cache after. A file changed
/// since it was opened (size or modification time) is refused from then on: its hash would
/// be wrong.
public final class OutgoingFile: @unchecked Sendable {
    /// The path it was opened at.
    public let path: String
    /// The name offered (the path's last component unless given).
    public let name: String
    /// Its size when opened.
    public let size: UInt64
    /// Its SHA-256.
    public let sha256: [UInt8]
    /// Its media type (from its first bytes when not given).
    public let mediaType: String
    /// Its image header, when it is a PNG or JPEG.
    public let image: ImageHeader?
    /// What identified its content when it was opened, when that may be remembered with its
    /// hash (`FileHashes.mayRemember`; nil without `hashes` or for a file changed just before).
    public let identity: FileIdentity?
    /// Whether it was read through for its hash (false: `FileHashes` knew it).
    public let hashed: Bool

    private let file: RegularFile
    private let modified: Int64

    /// The largest piece `read` hands out (one RESOURCE_DATA frame's payload).
    public static let maxChunk = Wire.maxPayload

    /// Opens and hashes `path` (or takes its hash from `hashes`, and remembers it there).
    /// Errors name the path and the failing call. `mayOffer` is asked about the file actually
    /// opened (symbolic links resolved); false refuses it. `ownCopy`: the node wrote the file
    /// itself and nothing writes it again (an outbox copy), so its hash is remembered even
    /// though it changed just now (`FileHashes.racyMargin` guards against later writes).
    public init(path: String, name: String? = nil, mediaType: String? = nil, hashes: FileHashes? = nil, ownCopy: Bool = false,
                mayOffer: (String) -> Bool = { _ in true }) throws {
        self.path = path
        file = try RegularFile.openForReading(path)
        guard let opened = file.resolvedPath() ?? FileSystem.resolved(path), mayOffer(opened) else {
            throw NotOffered(path: path)
        }
        let lookedAt = FileIdentity.wallClockNanoseconds()
        let before = try file.identity()
        let head: [UInt8]
        var steady = true
        if let known = hashes?.hash(of: before) {
            head = try file.read(at: 0, count: Int(min(before.size, UInt64(ImageHeader.maxHeaderBytes))))
            sha256 = known
            hashed = false
        } else {
            let digest = try SHA256Digest()
            var first: [UInt8] = []
            let at = try file.readChunks(upTo: before.size) { chunk in
                if first.count < ImageHeader.maxHeaderBytes { first += chunk.prefix(ImageHeader.maxHeaderBytes - first.count) }
                try digest.update(chunk)
            }
            let after = try file.identity()
            guard at == before.size, after.size == before.size, after.modified == before.modified else { throw ChangedWhileHashing(path: path) }
            // Its content the same, something else changed (a chmod): offered, not remembered.
            steady = after == before
            head = first
            sha256 = try digest.finish()
            hashed = true
        }
        size = before.size
        modified = before.modified
        if let hashes, steady, ownCopy || hashes.mayRemember(before, lookedAt: lookedAt), file.keepsChangeTimes() {
            identity = before
            if hashed { hashes.remember(before, sha256: sha256) }
        } else {
            identity = nil
        }
        image = ImageHeader.parse(head)
        self.mediaType = mediaType ?? image?.format.mediaType ?? "application/octet-stream"
        self.name = name ?? Self.fileName(of: path)
    }

    /// The name a file at `path` is offered under when none is given: its last component.
    /// (At the '/' scalar: "/" and a combining mark after it are one Character.)
    static func fileName(of path: String) -> String {
        path.unicodeScalars.split(separator: "/").last.map { String($0) } ?? path
    }

    /// Up to `count` bytes (at most `maxChunk`) from `offset`; nil when the file changed
    /// since it was opened (cancel with `source-changed`).
    public func read(at offset: UInt64, count: Int) throws -> [UInt8]? {
        guard try unchanged() else { return nil }
        let n = Int(min(UInt64(min(count, Self.maxChunk)), size - min(offset, size)))
        let bytes = try file.read(at: offset, count: n)
        return bytes.count == n ? bytes : nil
    }

    /// Whether the file is as it was when hashed (same size and modification time).
    public func unchanged() throws -> Bool {
        let now = try file.status()
        return now.size == size && now.modified == modified
    }
}

/// A file that changed while it was being hashed for an offer: offer it again when it is
/// finished being written.
public struct ChangedWhileHashing: Error, Sendable, CustomStringConvertible {
    /// The file.
    public let path: String
    public var description: String { "\(path) changed while it was being hashed; offer it again once it is written" }
}

/// A path a client may not offer: the daemon's own key and state.
public struct NotOffered: Error, Sendable, CustomStringConvertible {
    /// The path asked for.
    public let path: String
    public var description: String { "\(path) is one of the daemon's own files (its key and state), which are never sent" }
}
