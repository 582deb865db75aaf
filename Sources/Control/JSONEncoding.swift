/// Compact JSON encoding of `JSONValue`.
///
/// The output is deterministic: object keys are sorted (by their UTF-8 bytes), there is
/// no insignificant whitespace, and strings escape `"`, `\` and every control character
/// below U+0020. Non-finite doubles have no JSON spelling and are written as `null`.
extension JSONValue {
    /// The compact UTF-8 encoding, without a trailing newline.
    public func encoded() -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(128)
        JSONWriter.write(self, into: &out)
        return out
    }

    /// Appends the compact encoding to `out` (for building larger frames without copies).
    public func encode(into out: inout [UInt8]) {
        JSONWriter.write(self, into: &out)
    }
}

/// The encoder's internals: a few static functions appending to a byte buffer.
enum JSONWriter {
    private static let hexDigits: [UInt8] = Array("0123456789abcdef".utf8)

    static func write(_ value: JSONValue, into out: inout [UInt8]) {
        switch value {
        case .null:
            out.append(contentsOf: [0x6E, 0x75, 0x6C, 0x6C])  // null
        case .bool(let b):
            if b {
                out.append(contentsOf: [0x74, 0x72, 0x75, 0x65])  // true
            } else {
                out.append(contentsOf: [0x66, 0x61, 0x6C, 0x73, 0x65])  // false
            }
        case .int(let i):
            writeInteger(i, into: &out)
        case .double(let d):
            writeDouble(d, into: &out)
        case .string(let s):
            writeString(s, into: &out)
        case .array(let elements):
            out.append(UInt8(ascii: "["))
            var first = true
            for element in elements {
                if !first { out.append(UInt8(ascii: ",")) }
                first = false
                write(element, into: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let members):
            out.append(UInt8(ascii: "{"))
            // Sorting by UTF-8 bytes gives the same order on every platform and is what
            // byte-comparing tests and humans diffing logs expect.
            let keys = members.keys.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
            var first = true
            for key in keys {
                if !first { out.append(UInt8(ascii: ",")) }
                first = false
                writeString(key, into: &out)
                out.append(UInt8(ascii: ":"))
                write(members[key]!, into: &out)
            }
            out.append(UInt8(ascii: "}"))
        }
    }

    static func writeInteger(_ value: Int64, into out: inout [UInt8]) {
        // At most 20 characters: fits String's small-string storage, no allocation.
        out.append(contentsOf: String(value).utf8)
    }

    static func writeDouble(_ value: Double, into out: inout [UInt8]) {
        guard value.isFinite else {
            out.append(contentsOf: [0x6E, 0x75, 0x6C, 0x6C])
            return
        }
        // Swift's shortest round-trip description is valid JSON for finite values:
        // "2.0", "0.1", "1e+20", "5e-324", "-0.0".
        out.append(contentsOf: value.description.utf8)
    }

    static func writeString(_ string: String, into out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        var s = string
        s.withUTF8 { bytes in
            var runStart = 0
            var i = 0
            let n = bytes.count
            while i < n {
                let b = bytes[i]
                if b >= 0x20 && b != 0x22 && b != 0x5C {
                    i += 1
                    continue
                }
                if runStart < i { out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart..<i])) }
                out.append(UInt8(ascii: "\\"))
                switch b {
                case 0x22: out.append(0x22)
                case 0x5C: out.append(0x5C)
                case 0x0A: out.append(UInt8(ascii: "n"))
                case 0x0D: out.append(UInt8(ascii: "r"))
                case 0x09: out.append(UInt8(ascii: "t"))
                case 0x08: out.append(UInt8(ascii: "b"))
                case 0x0C: out.append(UInt8(ascii: "f"))
                default:
                    out.append(contentsOf: [UInt8(ascii: "u"), 0x30, 0x30, hexDigits[Int(b >> 4)], hexDigits[Int(b & 0x0F)]])
                }
                i += 1
                runStart = i
            }
            if runStart < n { out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart..<n])) }
        }
        out.append(UInt8(ascii: "\""))
    }
}
