/// A Bluetooth UUID: 16-bit, 32-bit or 128-bit.
///
/// Short forms are offsets into the Bluetooth base UUID `0000xxxx-0000-1000-8000-00805F9B34FB`;
/// equality compares the full 128-bit value, so `180F` equals
/// `0000180f-0000-1000-8000-00805f9b34fb`.
public struct BluetoothUUID: Sendable, Hashable, Comparable, CustomStringConvertible {
    /// The 16 bytes, most significant first.
    public let bytes: [UInt8]

    /// The Bluetooth base UUID's bytes.
    static let base: [UInt8] = [0, 0, 0, 0, 0x00, 0x00, 0x10, 0x00, 0x80, 0x00, 0x00, 0x80, 0x5F, 0x9B, 0x34, 0xFB]

    /// Why a text is not a UUID.
    public struct ParseError: Error, Sendable, Equatable, CustomStringConvertible {
        /// The text given.
        public let text: String
        /// What is wrong with it.
        public let reason: String
        /// "invalid UUID "xyz": …".
        public var description: String { "invalid UUID \"\(text)\": \(reason)" }
    }

    /// A 16-bit UUID.
    public init(uuid16: UInt16) {
        var b = Self.base
        b[2] = UInt8(uuid16 >> 8)
        b[3] = UInt8(uuid16 & 0xFF)
        bytes = b
    }

    /// A 32-bit UUID.
    public init(uuid32: UInt32) {
        var b = Self.base
        b[0] = UInt8(uuid32 >> 24)
        b[1] = UInt8((uuid32 >> 16) & 0xFF)
        b[2] = UInt8((uuid32 >> 8) & 0xFF)
        b[3] = UInt8(uuid32 & 0xFF)
        bytes = b
    }

    /// A UUID from 16 bytes, most significant first.
    public init?(bytes: [UInt8]) {
        guard bytes.count == 16 else { return nil }
        self.bytes = bytes
    }

    /// Parses `180F`, `0x180F`, `0000180F` (32-bit) or `0000180f-0000-1000-8000-00805f9b34fb`
    /// (any case).
    public init(parsing text: String) throws(ParseError) {
        // The forms people and BlueZ write, read straight from the UTF-8 bytes (this runs for
        // every control request naming a characteristic); anything else, including every
        // error, goes through the general parser below.
        if let b = Self.parseCommonForm(text) {
            self.init(bytes: b)!
            return
        }
        try self.init(parsingSlowly: text)
    }

    /// The 16 bytes of `text` in one of the forms `init(parsing:)` accepts, nil when it is
    /// not one of them (or not ASCII).
    private static func parseCommonForm(_ text: String) -> [UInt8]? {
        var text = text
        return text.withUTF8 { all -> [UInt8]? in
            var u = all[...]
            if u.count >= 2, u[u.startIndex] == 0x30, u[u.startIndex + 1] | 0x20 == 0x78 { u = u.dropFirst(2) }  // 0x, 0X
            func byte(_ i: Int) -> UInt8? {
                guard let hi = hexNibble(u[i]), let lo = hexNibble(u[i + 1]) else { return nil }
                return hi << 4 | lo
            }
            let s = u.startIndex
            switch u.count {
            case 4, 8:
                var b = base
                var i = s, o = u.count == 4 ? 2 : 0  // a 16-bit UUID is bytes 2 and 3 of the base
                while i < u.endIndex {
                    guard let v = byte(i) else { return nil }
                    b[o] = v
                    i += 2
                    o += 1
                }
                return b
            case 36:
                var b = [UInt8](repeating: 0, count: 16)
                var i = s, o = 0
                while i < u.endIndex {
                    let k = i - s
                    if k == 8 || k == 13 || k == 18 || k == 23 {
                        guard u[i] == UInt8(ascii: "-") else { return nil }
                        i += 1
                        continue
                    }
                    guard let v = byte(i) else { return nil }
                    b[o] = v
                    i += 2
                    o += 1
                }
                return b
            default:
                return nil
            }
        }
    }

    private init(parsingSlowly text: String) throws(ParseError) {
        var t = Substring(text)
        if t.hasPrefix("0x") || t.hasPrefix("0X") { t = t.dropFirst(2) }
        func hex(_ s: Substring) throws(ParseError) -> [UInt8] {
            let u = Array(s.utf8)
            guard u.count % 2 == 0 else { throw ParseError(text: text, reason: "odd number of hex digits") }
            var out: [UInt8] = []
            out.reserveCapacity(u.count / 2)
            var i = 0
            while i < u.count {
                guard let hi = hexNibble(u[i]), let lo = hexNibble(u[i + 1]) else {
                    throw ParseError(text: text, reason: "'\(Character(Unicode.Scalar(u[hexNibble(u[i]) == nil ? i : i + 1])))' is not a hex digit")
                }
                out.append(hi << 4 | lo)
                i += 2
            }
            return out
        }
        switch t.count {
        case 4:
            let b = try hex(t)
            self.init(uuid16: UInt16(b[0]) << 8 | UInt16(b[1]))
        case 8:
            let b = try hex(t)
            self.init(uuid32: UInt32(b[0]) << 24 | UInt32(b[1]) << 16 | UInt32(b[2]) << 8 | UInt32(b[3]))
        case 36:
            let parts = t.split(separator: "-", omittingEmptySubsequences: false)
            guard parts.map(\.count) == [8, 4, 4, 4, 12] else {
                throw ParseError(text: text, reason: "expected the form xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx")
            }
            self.init(bytes: try hex(Substring(parts.joined())))!
        case 0:
            throw ParseError(text: text, reason: "empty")
        default:
            throw ParseError(text: text, reason: "expected 4 hex digits (16-bit), 8 (32-bit) or a 128-bit UUID with dashes, got \(t.count) characters")
        }
    }

    /// Whether this is a short (16/32-bit) UUID in the base range.
    public var isShort: Bool { Array(bytes[4...]) == Array(Self.base[4...]) }

    /// The 16-bit value, if it is one.
    public var uuid16: UInt16? {
        guard isShort, bytes[0] == 0, bytes[1] == 0 else { return nil }
        return UInt16(bytes[2]) << 8 | UInt16(bytes[3])
    }

    /// The full lowercase form BlueZ uses: `0000180f-0000-1000-8000-00805f9b34fb`.
    public var uuidString: String {
        String(unsafeUninitializedCapacity: 36) { out in
            let digits: StaticString = "0123456789abcdef"
            var o = 0
            for (i, b) in bytes.enumerated() {
                if i == 4 || i == 6 || i == 8 || i == 10 {
                    out[o] = UInt8(ascii: "-")
                    o += 1
                }
                out[o] = digits.utf8Start[Int(b >> 4)]
                out[o + 1] = digits.utf8Start[Int(b & 0x0F)]
                o += 2
            }
            return o
        }
    }

    /// The full lowercase form.
    public var description: String { uuidString }

    /// Orders by bytes.
    public static func < (a: BluetoothUUID, b: BluetoothUUID) -> Bool { a.bytes.lexicographicallyPrecedes(b.bytes) }

    /// How many bytes the UUID takes in an advertisement (2, 4 or 16).
    public var advertisedSize: Int {
        if uuid16 != nil { return 2 }
        return isShort ? 4 : 16
    }
}
