/// Why a frame could not be decoded (or encoded): what was wrong, in which field, and where.
///
/// The payload codec fills `kind`, `frameType` and `fieldOffset`; `FrameDecoder` adds
/// where the frame was in the stream (`frameIndex`, `streamOffset`). Any of them is nil
/// when it is not known (an encoding error has no stream position).
public struct FrameError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What was wrong.
    public enum Kind: Sendable, Hashable {
        /// The header's version byte is not `Wire.frameVersion`.
        case badVersion(UInt8)
        /// A type this side does not know, without the ignorable flag.
        case unknownType(UInt8)
        /// The payload length is over the limit.
        case oversize(length: Int, limit: Int)
        /// The payload ended inside a field: it needed `needed` bytes, `available` were left.
        case truncated(field: String, needed: Int, available: Int)
        /// The payload has bytes after its last field.
        case trailingBytes(count: Int)
        /// A string field is not valid UTF-8.
        case invalidUTF8(field: String)
        /// A string, blob or list is longer than its bound.
        case tooLong(field: String, length: Int, limit: Int)
        /// Flag bits the type does not define.
        case unexpectedFlags(UInt16)
        /// The header's stream id is not allowed for the type.
        case badStreamID(UInt32)
        /// A field's value is out of its range or breaks a rule.
        case invalidValue(field: String, reason: String)
    }

    /// What was wrong.
    public var kind: Kind
    /// The frame's type byte, when the header was read.
    public var frameType: UInt8?
    /// The frame's position in the stream, from 0 (ignored frames count).
    public var frameIndex: Int?
    /// The stream offset of the frame's first header byte.
    public var streamOffset: Int?
    /// The offset in the payload of the field at fault.
    public var fieldOffset: Int?

    /// An error; positions are filled in as it travels up.
    public init(_ kind: Kind, frameType: UInt8? = nil, frameIndex: Int? = nil, streamOffset: Int? = nil, fieldOffset: Int? = nil) {
        self.kind = kind
        self.frameType = frameType
        self.frameIndex = frameIndex
        self.streamOffset = streamOffset
        self.fieldOffset = fieldOffset
    }

    /// The field at fault, when the error is about one.
    public var field: String? {
        switch kind {
        case .truncated(let f, _, _), .invalidUTF8(let f), .tooLong(let f, _, _), .invalidValue(let f, _): f
        case .badVersion: "version"
        case .unknownType: "type"
        case .oversize: "length"
        case .unexpectedFlags: "flags"
        case .badStreamID: "stream id"
        case .trailingBytes: nil
        }
    }

    /// One line, e.g. `frame 3 (INVITE at stream offset 120): field "context" at payload
    /// offset 4: 5000 bytes, at most 4096`.
    public var description: String {
        var parts: [String] = []
        var what: [String] = []
        if let frameType { what.append(FrameType(rawValue: frameType)?.description ?? "type 0x\(String(frameType, radix: 16))") }
        if let streamOffset { what.append("at stream offset \(streamOffset)") }
        if let frameIndex {
            parts.append("frame \(frameIndex)" + (what.isEmpty ? "" : " (\(what.joined(separator: " ")))"))
        } else if !what.isEmpty {
            parts.append(what.joined(separator: " "))
        }
        if let field, let fieldOffset { parts.append("field \"\(field)\" at payload offset \(fieldOffset)") }
        parts.append(reason)
        return parts.joined(separator: ": ")
    }

    /// The problem without its position.
    public var reason: String {
        switch kind {
        case .badVersion(let v): "header version \(v), expected \(Wire.frameVersion)"
        case .unknownType(let t): "unknown frame type 0x\(String(t, radix: 16)) without the ignorable flag"
        case .oversize(let length, let limit): "payload length \(length) is over the limit of \(limit) bytes"
        case .truncated(let f, let needed, let available): "\(f): needs \(needed) bytes, the payload has \(available) left"
        case .trailingBytes(let n): "\(n) bytes after the payload's last field"
        case .invalidUTF8(let f): "\(f) is not valid UTF-8"
        case .tooLong(let f, let length, let limit): "\(f) is \(length) long, at most \(limit)"
        case .unexpectedFlags(let bits): "flag bits 0x\(String(bits, radix: 16)) are not defined for this type"
        case .badStreamID(let id): "stream id \(id) is not allowed for this type"
        case .invalidValue(let f, let why): "\(f): \(why)"
        }
    }
}

/// Reads a payload's fields in order, naming each field in the errors it throws.
struct ByteReader {
    private let bytes: ArraySlice<UInt8>
    /// Offset from the payload's start of the next unread byte.
    private(set) var offset = 0

    init(_ bytes: ArraySlice<UInt8>) { self.bytes = bytes }

    var remaining: Int { bytes.count - offset }

    private func fail(_ kind: FrameError.Kind, at start: Int) -> FrameError { FrameError(kind, fieldOffset: start) }

    private mutating func take(_ n: Int, _ field: String) throws(FrameError) -> ArraySlice<UInt8> {
        guard n <= remaining else { throw fail(.truncated(field: field, needed: n, available: remaining), at: offset) }
        let start = bytes.startIndex + offset
        offset += n
        return bytes[start..<(start + n)]
    }

    mutating func u8(_ field: String) throws(FrameError) -> UInt8 {
        try take(1, field).first ?? 0
    }

    mutating func u16(_ field: String) throws(FrameError) -> UInt16 { UInt16(try uint(2, field)) }
    mutating func u32(_ field: String) throws(FrameError) -> UInt32 { UInt32(try uint(4, field)) }
    mutating func u64(_ field: String) throws(FrameError) -> UInt64 { try uint(8, field) }

    private mutating func uint(_ n: Int, _ field: String) throws(FrameError) -> UInt64 {
        try take(n, field).reduce(0) { $0 << 8 | UInt64($1) }
    }

    /// Exactly `count` bytes.
    mutating func fixed(_ count: Int, _ field: String) throws(FrameError) -> [UInt8] { Array(try take(count, field)) }

    /// A u16 length and that many bytes of UTF-8, at most `limit` bytes.
    mutating func string(_ field: String, limit: Int) throws(FrameError) -> String {
        let start = offset
        let length = Int(try u16(field + " length"))
        guard length <= limit else { throw fail(.tooLong(field: field, length: length, limit: limit), at: start) }
        let raw = try take(length, field)
        guard let text = String(validating: raw, as: UTF8.self) else { throw fail(.invalidUTF8(field: field), at: start) }
        return text
    }

    /// A u32 length and that many bytes, at most `limit`.
    mutating func blob(_ field: String, limit: Int) throws(FrameError) -> [UInt8] {
        let start = offset
        let length = Int(try u32(field + " length"))
        guard length <= limit else { throw fail(.tooLong(field: field, length: length, limit: limit), at: start) }
        return Array(try take(length, field))
    }

    /// Everything left (a frame's data field).
    mutating func rest() -> [UInt8] {
        Array(restSlice())
    }

    /// The bytes left, not copied (a slice of what is read).
    mutating func restSlice() -> ArraySlice<UInt8> {
        let start = bytes.startIndex + offset
        offset = bytes.count
        return bytes[start...]
    }

    /// Throws when bytes are left after the last field.
    func finish() throws(FrameError) {
        guard remaining == 0 else { throw fail(.trailingBytes(count: remaining), at: offset) }
    }
}

/// Appends fields in wire order, checking each bound the reader checks, so a frame that
/// encodes also decodes.
struct ByteWriter {
    private(set) var bytes: [UInt8] = []

    mutating func u8(_ v: UInt8) { bytes.append(v) }
    mutating func u16(_ v: UInt16) { uint(UInt64(v), 2) }
    mutating func u32(_ v: UInt32) { uint(UInt64(v), 4) }
    mutating func u64(_ v: UInt64) { uint(v, 8) }

    private mutating func uint(_ v: UInt64, _ n: Int) {
        for i in stride(from: n - 1, through: 0, by: -1) { bytes.append(UInt8(truncatingIfNeeded: v >> (8 * UInt64(i)))) }
    }

    mutating func fixed(_ v: [UInt8], _ field: String, count: Int) throws(FrameError) {
        guard v.count == count else {
            throw FrameError(.invalidValue(field: field, reason: "must be exactly \(count) bytes, got \(v.count)"), fieldOffset: bytes.count)
        }
        bytes.append(contentsOf: v)
    }

    mutating func string(_ s: String, _ field: String, limit: Int) throws(FrameError) {
        let utf8 = Array(s.utf8)
        guard utf8.count <= limit else {
            throw FrameError(.tooLong(field: field, length: utf8.count, limit: limit), fieldOffset: bytes.count)
        }
        u16(UInt16(utf8.count))
        bytes.append(contentsOf: utf8)
    }

    mutating func blob(_ v: [UInt8], _ field: String, limit: Int) throws(FrameError) {
        guard v.count <= limit else { throw FrameError(.tooLong(field: field, length: v.count, limit: limit), fieldOffset: bytes.count) }
        u32(UInt32(v.count))
        bytes.append(contentsOf: v)
    }

    mutating func raw(_ v: some Sequence<UInt8>) { bytes.append(contentsOf: v) }
}
