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
        let h = bytes.map { b -> String in
            let s = String(b, radix: 16)
            return b < 16 ? "0" + s : s
        }.joined()
        let u = Array(h)
        return [u[0..<8], u[8..<12], u[12..<16], u[16..<20], u[20..<32]].map { String($0) }.joined(separator: "-")
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
