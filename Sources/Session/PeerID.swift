/// A peer's identity: the SHA-256 of its certificate (DER), 32 bytes.
///
/// Ordered byte-wise (the first byte is the most significant), which is the order of the
/// tie-break between simultaneous connections and of the pairing-code context.
///
/// Its text form is Syncthing's device ID: the bytes in base32 (RFC 4648 alphabet, no
/// padding, 52 characters), cut into 4 groups of 13, each followed by a Luhn mod 32 check
/// character (56 characters), shown as 8 groups of 7 joined by '-'.
public struct PeerID: Sendable, Hashable, Comparable, CustomStringConvertible {
    /// The length of a peer ID in bytes.
    public static let byteCount = 32
    /// The base32 alphabet of RFC 4648.
    static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567".utf8)

    /// The 32 bytes.
    public let bytes: [UInt8]

    /// A peer ID from exactly 32 bytes; nil for any other length.
    public init?(bytes: [UInt8]) {
        guard bytes.count == Self.byteCount else { return nil }
        self.bytes = bytes
    }

    /// The bytes hashed in one call: the derived hash fed them one at a time, and a peer ID
    /// is looked up for every batch of messages that arrives.
    public func hash(into hasher: inout Hasher) {
        bytes.withUnsafeBytes { hasher.combine(bytes: $0) }
    }

    /// A peer ID from 64 hex digits (either case); nil for anything else.
    public init?(hex: String) {
        let digits = Array(hex.utf8)
        guard digits.count == Self.byteCount * 2 else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(Self.byteCount)
        var i = 0
        while i < digits.count {
            guard let hi = Self.nibble(digits[i]), let lo = Self.nibble(digits[i + 1]) else { return nil }
            out.append(hi << 4 | lo)
            i += 2
        }
        bytes = out
    }

    private static func nibble(_ c: UInt8) -> UInt8? {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): c - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): c - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): c - UInt8(ascii: "A") + 10
        default: nil
        }
    }

    /// The 64 lowercase hex digits (the form the control protocol and files use).
    public var hex: String {
        let digits = Array("0123456789abcdef".utf8)
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count * 2)
        for b in bytes {
            out.append(digits[Int(b >> 4)])
            out.append(digits[Int(b & 0x0f)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Byte-wise order.
    public static func < (a: PeerID, b: PeerID) -> Bool { a.bytes.lexicographicallyPrecedes(b.bytes) }

    /// The full text form, e.g. "P56IOI7-MZJNU2Y-IQGDREY-DM2MGTI-MGL3BXN-PQ6W5BM-TBBZ4TJ-XZWICQ2".
    public var text: String {
        let plain = Self.base32(bytes)
        var checked: [UInt8] = []
        for g in 0..<4 {
            let group = Array(plain[(g * 13)..<(g * 13 + 13)])
            checked += group
            checked.append(Self.alphabet[Self.luhn32(group)])
        }
        var out: [UInt8] = []
        for (i, c) in checked.enumerated() {
            if i > 0 && i % 7 == 0 { out.append(UInt8(ascii: "-")) }
            out.append(c)
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// The first group of 7 of the text form: enough to tell peers apart on a screen, not
    /// to identify one (compare the full form or the pairing code for that).
    public var shortText: String { String(text.prefix(7)) }

    /// The text form.
    public var description: String { text }

    /// Why a peer ID's text form was refused.
    public enum ParseError: Error, Sendable, Hashable, CustomStringConvertible {
        /// Not 56 characters once dashes and spaces are removed.
        case length(Int)
        /// A character outside the base32 alphabet, at this position of the text given.
        case character(Character, position: Int)
        /// The check character of this group (1 to 4, each 13 characters and its check) is wrong.
        case checkCharacter(group: Int, expected: Character, found: Character)
        /// The characters decode to bits that are not a 32-byte value (the last character's
        /// unused bits are not zero).
        case padding

        /// One line for people.
        public var description: String {
            switch self {
            case .length(let n): "a peer ID has 56 letters and digits (dashes aside), got \(n)"
            case .character(let c, let p): "\"\(c)\" at position \(p + 1) is not a base32 character (A-Z, 2-7)"
            case .checkCharacter(let g, let e, let f):
                "the check character of group \(g) of 4 is \"\(f)\", expected \"\(e)\": a character of characters \((g - 1) * 14 + 1)-\(g * 14) is mistyped"
            case .padding: "the last group does not encode whole bytes (its final character is mistyped)"
            }
        }
    }

    /// Parses the text form: letters in either case, dashes and spaces anywhere (or none).
    /// Every check character is verified; a wrong one names its group.
    public init(parsing text: String) throws(ParseError) {
        var chars: [UInt8] = []
        for (position, c) in text.enumerated() {
            if c == "-" || c == " " { continue }
            guard let ascii = c.asciiValue, let value = Self.value(of: ascii) else { throw .character(c, position: position) }
            chars.append(Self.alphabet[value])
        }
        guard chars.count == 56 else { throw .length(chars.count) }
        var plain: [UInt8] = []
        for g in 0..<4 {
            let group = Array(chars[(g * 14)..<(g * 14 + 13)])
            let expected = Self.alphabet[Self.luhn32(group)]
            let found = chars[g * 14 + 13]
            guard expected == found else {
                throw .checkCharacter(group: g + 1, expected: Character(UnicodeScalar(expected)), found: Character(UnicodeScalar(found)))
            }
            plain += group
        }
        guard let decoded = Self.unbase32(plain), let id = PeerID(bytes: decoded) else { throw .padding }
        self = id
    }

    /// 0...31 for a base32 character in either case.
    static func value(of c: UInt8) -> Int? {
        switch c {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"): Int(c - UInt8(ascii: "A"))
        case UInt8(ascii: "a")...UInt8(ascii: "z"): Int(c - UInt8(ascii: "a"))
        case UInt8(ascii: "2")...UInt8(ascii: "7"): Int(c - UInt8(ascii: "2")) + 26
        default: nil
        }
    }

    /// Syncthing's Luhn mod 32: factors 1, 2, 1, 2, ... from the FIRST character (not the
    /// textbook right-to-left order); kept as Syncthing has it so the forms agree.
    static func luhn32(_ group: [UInt8]) -> Int {
        var factor = 1
        var sum = 0
        for c in group {
            let addend = factor * (value(of: c) ?? 0)
            factor = factor == 2 ? 1 : 2
            sum += addend / 32 + addend % 32
        }
        return (32 - sum % 32) % 32
    }

    /// RFC 4648 base32 without padding.
    static func base32(_ data: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        var buffer: UInt32 = 0
        var bits = 0
        for b in data {
            buffer = buffer << 8 | UInt32(b)
            bits += 8
            while bits >= 5 {
                out.append(alphabet[Int(buffer >> UInt32(bits - 5) & 31)])
                bits -= 5
            }
        }
        if bits > 0 { out.append(alphabet[Int(buffer << UInt32(5 - bits) & 31)]) }
        return out
    }

    /// The inverse of `base32`; nil when the unused low bits of the last character are set.
    static func unbase32(_ text: [UInt8]) -> [UInt8]? {
        var out: [UInt8] = []
        var buffer: UInt32 = 0
        var bits = 0
        for c in text {
            guard let v = value(of: c) else { return nil }
            buffer = (buffer << 5 | UInt32(v)) & 0xFFFF
            bits += 5
            if bits >= 8 {
                out.append(UInt8(truncatingIfNeeded: buffer >> UInt32(bits - 8)))
                bits -= 8
            }
        }
        guard buffer & ((1 << UInt32(bits)) - 1) == 0 else { return nil }
        return out
    }
}

/// The six digits both users compare to know that no one sits between their devices.
///
/// Both sides take 8 bytes from the TLS exporter (label "EXPORTER-peerlink-pairing",
/// context the two peer IDs in ascending byte order; computed by the TLS module), read them
/// as a big-endian u64 and keep the remainder of dividing by 1,000,000, zero-padded to six
/// digits. A man in the middle holds two TLS sessions with two different exporters, so the
/// two screens would show different codes.
public struct PairingCode: Sendable, Hashable, CustomStringConvertible {
    /// The exporter's label.
    public static let exporterLabel = "EXPORTER-peerlink-pairing"
    /// How many exporter bytes are used.
    public static let exporterLength = 8

    /// The code, 0...999,999.
    public let value: UInt32

    /// The code from the exporter's output; nil unless `exporterBytes` is exactly 8 bytes.
    public init?(exporterBytes: [UInt8]) {
        guard exporterBytes.count == Self.exporterLength else { return nil }
        let n = exporterBytes.reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        value = UInt32(n % 1_000_000)
    }

    /// The exporter's context: the two peer IDs, the smaller first, 64 bytes.
    public static func exporterContext(_ a: PeerID, _ b: PeerID) -> [UInt8] {
        a < b ? a.bytes + b.bytes : b.bytes + a.bytes
    }

    /// Six digits, e.g. "004217".
    public var text: String {
        let digits = String(value)
        return String(repeating: "0", count: 6 - digits.count) + digits
    }

    /// The six digits.
    public var description: String { text }
}
