/// Why a JSON text was rejected, and where.
public struct JSONParseError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The byte offset (from 0) at which the problem was found.
    public let offset: Int
    /// What was wrong, e.g. "unexpected character '}'".
    public let reason: String

    /// Creates an error at `offset`.
    public init(offset: Int, reason: String) {
        self.offset = offset
        self.reason = reason
    }

    /// "at byte 12: unexpected character '}'".
    public var description: String { "at byte \(offset): \(reason)" }
}

extension JSONValue {
    /// Parses one JSON text (RFC 8259, strict) from UTF-8 bytes.
    ///
    /// Only whitespace may follow the value. Nesting deeper than `maxDepth` arrays and
    /// objects is an error, so hostile input cannot exhaust the stack.
    public static func parse(_ bytes: some Collection<UInt8>, maxDepth: Int = 64) throws(JSONParseError) -> JSONValue {
        let result: Result<JSONValue, JSONParseError>? = bytes.withContiguousStorageIfAvailable { buffer in
            var parser = JSONParser(buffer, maxDepth: maxDepth)
            return Result { () throws(JSONParseError) in try parser.parseDocument() }
        }
        if let result { return try result.get() }
        let copy = Array(bytes)
        return try copy.withUnsafeBufferPointer { buffer in
            var parser = JSONParser(buffer, maxDepth: maxDepth)
            return Result { () throws(JSONParseError) in try parser.parseDocument() }
        }.get()
    }

    /// Parses one JSON text from a string.
    public static func parse(_ text: String) throws(JSONParseError) -> JSONValue {
        var copy = text
        return try copy.withUTF8 { buffer in
            var parser = JSONParser(buffer, maxDepth: 64)
            return Result { () throws(JSONParseError) in try parser.parseDocument() }
        }.get()
    }
}

/// A recursive-descent parser over a contiguous byte buffer.
///
/// Strings without escapes are validated and copied in one step; the common case for
/// control-protocol traffic (short ASCII keys and values) never builds a `Character`.
struct JSONParser {
    private let bytes: UnsafeBufferPointer<UInt8>
    private let maxDepth: Int
    private var index = 0
    private var depth = 0
    /// Scratch space for strings with escapes, reused across strings.
    private var scratch: [UInt8] = []

    init(_ bytes: UnsafeBufferPointer<UInt8>, maxDepth: Int) {
        self.bytes = bytes
        self.maxDepth = maxDepth
    }

    mutating func parseDocument() throws(JSONParseError) -> JSONValue {
        skipWhitespace()
        let value = try parseValue()
        skipWhitespace()
        if index < bytes.count {
            throw fail("unexpected \(describe(bytes[index])) after the JSON value")
        }
        return value
    }

    // MARK: - Values

    private mutating func parseValue() throws(JSONParseError) -> JSONValue {
        guard index < bytes.count else { throw fail("unexpected end of input") }
        switch bytes[index] {
        case UInt8(ascii: "{"): return try parseObject()
        case UInt8(ascii: "["): return try parseArray()
        case UInt8(ascii: "\""): return .string(try parseString())
        case UInt8(ascii: "t"): try expectLiteral("true"); return .bool(true)
        case UInt8(ascii: "f"): try expectLiteral("false"); return .bool(false)
        case UInt8(ascii: "n"): try expectLiteral("null"); return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try parseNumber()
        default: throw fail("unexpected \(describe(bytes[index]))")
        }
    }

    private mutating func enterContainer() throws(JSONParseError) {
        depth += 1
        if depth > maxDepth { throw fail("nesting deeper than \(maxDepth) levels") }
    }

    private mutating func parseArray() throws(JSONParseError) -> JSONValue {
        try enterContainer()
        index += 1  // [
        var elements: [JSONValue] = []
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "]") {
            index += 1
            depth -= 1
            return .array(elements)
        }
        while true {
            skipWhitespace()
            elements.append(try parseValue())
            skipWhitespace()
            guard index < bytes.count else { throw fail("unexpected end of input in array") }
            switch bytes[index] {
            case UInt8(ascii: ","):
                index += 1
                skipWhitespace()
                if index < bytes.count, bytes[index] == UInt8(ascii: "]") { throw fail("trailing comma in array") }
            case UInt8(ascii: "]"):
                index += 1
                depth -= 1
                return .array(elements)
            default:
                throw fail("expected ',' or ']' in array, got \(describe(bytes[index]))")
            }
        }
    }

    private mutating func parseObject() throws(JSONParseError) -> JSONValue {
        try enterContainer()
        index += 1  // {
        var members: [String: JSONValue] = [:]
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "}") {
            index += 1
            depth -= 1
            return .object(members)
        }
        while true {
            skipWhitespace()
            guard index < bytes.count else { throw fail("unexpected end of input in object") }
            guard bytes[index] == UInt8(ascii: "\"") else {
                throw fail("expected a string key in object, got \(describe(bytes[index]))")
            }
            let key = try parseString()
            skipWhitespace()
            guard index < bytes.count else { throw fail("unexpected end of input in object") }
            guard bytes[index] == UInt8(ascii: ":") else {
                throw fail("expected ':' after object key, got \(describe(bytes[index]))")
            }
            index += 1
            skipWhitespace()
            members[key] = try parseValue()  // duplicate keys: the last one wins
            skipWhitespace()
            guard index < bytes.count else { throw fail("unexpected end of input in object") }
            switch bytes[index] {
            case UInt8(ascii: ","):
                index += 1
                skipWhitespace()
                if index < bytes.count, bytes[index] == UInt8(ascii: "}") { throw fail("trailing comma in object") }
            case UInt8(ascii: "}"):
                index += 1
                depth -= 1
                return .object(members)
            default:
                throw fail("expected ',' or '}' in object, got \(describe(bytes[index]))")
            }
        }
    }

    private mutating func expectLiteral(_ literal: StaticString) throws(JSONParseError) {
        let start = index
        let count = literal.utf8CodeUnitCount
        let expected = UnsafeBufferPointer(start: literal.utf8Start, count: count)
        for i in 0..<count {
            guard start + i < bytes.count else {
                index = start + i
                throw fail("unexpected end of input")
            }
            guard bytes[start + i] == expected[i] else {
                index = start + i
                throw fail("unexpected \(describe(bytes[start + i]))")
            }
        }
        index = start + count
    }

    // MARK: - Numbers

    private mutating func parseNumber() throws(JSONParseError) -> JSONValue {
        let start = index
        var negative = false
        if bytes[index] == UInt8(ascii: "-") {
            negative = true
            index += 1
        }
        guard index < bytes.count, isDigit(bytes[index]) else {
            throw index < bytes.count ? fail("expected a digit after '-'") : fail("unexpected end of input")
        }
        if bytes[index] == UInt8(ascii: "0"), index + 1 < bytes.count, isDigit(bytes[index + 1]) {
            throw fail("leading zeros are not allowed")
        }
        // Accumulate negatively so Int64.min parses exactly.
        var magnitude: Int64 = 0
        var overflow = false
        while index < bytes.count, isDigit(bytes[index]) {
            let digit = Int64(bytes[index] &- UInt8(ascii: "0"))
            if !overflow {
                let (m, o1) = magnitude.multipliedReportingOverflow(by: 10)
                let (s, o2) = m.subtractingReportingOverflow(digit)
                if o1 || o2 { overflow = true } else { magnitude = s }
            }
            index += 1
        }
        var integral = true
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            integral = false
            index += 1
            guard index < bytes.count, isDigit(bytes[index]) else { throw fail("expected a digit after the decimal point") }
            while index < bytes.count, isDigit(bytes[index]) { index += 1 }
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
            integral = false
            index += 1
            if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") { index += 1 }
            guard index < bytes.count, isDigit(bytes[index]) else { throw fail("expected a digit in the exponent") }
            while index < bytes.count, isDigit(bytes[index]) { index += 1 }
        }
        if integral && !overflow {
            if negative { return .int(magnitude) }
            if magnitude != .min { return .int(-magnitude) }
        }
        let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
        guard let d = Double(text), d.isFinite else {
            let end = index
            index = start
            defer { index = end }
            throw fail("number out of range")
        }
        return .double(d)
    }

    @inline(__always)
    private func isDigit(_ b: UInt8) -> Bool { b >= UInt8(ascii: "0") && b <= UInt8(ascii: "9") }

    // MARK: - Strings

    /// Parses a string starting at its opening quote.
    private mutating func parseString() throws(JSONParseError) -> String {
        let start = index
        index += 1
        let contentStart = index
        // Fast path: scan to the closing quote, noting whether every byte is ASCII; fall back
        // when an escape appears. Long strings (base64 values) make this loop the parser's
        // hottest: one table look-up a byte finds the quote, a backslash or a control character.
        var seen: UInt8 = 0
        let n = bytes.count
        var i = index
        // Read once: a static inside the loop is a lazy-initialisation check per byte.
        let stops = Self.stopsString
        while i < n {
            let b = bytes[i]
            if stops[Int(b)] {
                index = i
                if b == UInt8(ascii: "\"") {
                    let raw = UnsafeBufferPointer(rebasing: bytes[contentStart..<index])
                    index += 1
                    return try makeString(raw, ascii: seen < 0x80, stringStart: start)
                }
                if b == UInt8(ascii: "\\") { return try parseEscapedString(stringStart: start, contentStart: contentStart) }
                throw fail("control character \(hex(b)) in string must be escaped")
            }
            seen |= b
            i += 1
        }
        index = i
        throw fail("unterminated string", at: start)
    }

    /// The bytes that end the fast scan of a string: `"`, `\` and the control characters.
    private static let stopsString: [Bool] = (0...255).map { $0 < 0x20 || $0 == 0x22 || $0 == 0x5C }

    private func makeString(_ raw: UnsafeBufferPointer<UInt8>, ascii: Bool, stringStart: Int) throws(JSONParseError) -> String {
        // ASCII needs no validation; anything else is checked as UTF-8.
        if ascii { return String(decoding: raw, as: UTF8.self) }
        guard let s = String(validating: raw, as: UTF8.self) else {
            throw fail("invalid UTF-8 in string", at: stringStart)
        }
        return s
    }

    private mutating func parseEscapedString(stringStart: Int, contentStart: Int) throws(JSONParseError) -> String {
        scratch.removeAll(keepingCapacity: true)
        scratch.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[contentStart..<index]))
        while index < bytes.count {
            let b = bytes[index]
            if b == UInt8(ascii: "\"") {
                index += 1
                let s: String? = scratch.withUnsafeBufferPointer { String(validating: $0, as: UTF8.self) }
                guard let s else { throw fail("invalid UTF-8 in string", at: stringStart) }
                return s
            }
            if b < 0x20 { throw fail("control character \(hex(b)) in string must be escaped") }
            if b != UInt8(ascii: "\\") {
                scratch.append(b)
                index += 1
                continue
            }
            index += 1
            guard index < bytes.count else { break }
            let e = bytes[index]
            switch e {
            case UInt8(ascii: "\""): scratch.append(0x22)
            case UInt8(ascii: "\\"): scratch.append(0x5C)
            case UInt8(ascii: "/"): scratch.append(0x2F)
            case UInt8(ascii: "b"): scratch.append(0x08)
            case UInt8(ascii: "f"): scratch.append(0x0C)
            case UInt8(ascii: "n"): scratch.append(0x0A)
            case UInt8(ascii: "r"): scratch.append(0x0D)
            case UInt8(ascii: "t"): scratch.append(0x09)
            case UInt8(ascii: "u"):
                try parseUnicodeEscape()
                continue  // parseUnicodeEscape leaves index after the escape
            default:
                index -= 1
                throw fail("invalid escape '\\\(printable(e))' in string")
            }
            index += 1
        }
        throw fail("unterminated string", at: stringStart)
    }

    /// Parses `\uXXXX` (and a following low surrogate) with `index` at the `u`.
    private mutating func parseUnicodeEscape() throws(JSONParseError) {
        let escapeStart = index - 1
        let first = try readHex4(escapeStart: escapeStart)
        var scalarValue = UInt32(first)
        if (0xD800...0xDBFF).contains(first) {
            // A high surrogate must be followed by "\u" and a low surrogate.
            guard index + 1 < bytes.count, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u") else {
                throw fail("lone surrogate \\u\(hex4(first)) in string", at: escapeStart)
            }
            index += 1
            let second = try readHex4(escapeStart: index - 1)
            guard (0xDC00...0xDFFF).contains(second) else {
                throw fail("lone surrogate \\u\(hex4(first)) in string", at: escapeStart)
            }
            scalarValue = 0x10000 + ((UInt32(first) - 0xD800) << 10) + (UInt32(second) - 0xDC00)
        } else if (0xDC00...0xDFFF).contains(first) {
            throw fail("lone surrogate \\u\(hex4(first)) in string", at: escapeStart)
        }
        let scalar = Unicode.Scalar(scalarValue)!  // surrogates excluded above
        scratch.append(contentsOf: UTF8.encode(scalar)!)
    }

    /// Reads four hex digits after a `u` at `index`; leaves `index` after them.
    private mutating func readHex4(escapeStart: Int) throws(JSONParseError) -> UInt16 {
        index += 1  // u
        var value: UInt16 = 0
        for _ in 0..<4 {
            guard index < bytes.count else { throw fail("unterminated \\u escape", at: escapeStart) }
            let b = bytes[index]
            let digit: UInt8
            switch b {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = b - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = b - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = b - UInt8(ascii: "A") + 10
            default: throw fail("invalid \\u escape: expected 4 hex digits", at: escapeStart)
            }
            value = value << 4 | UInt16(digit)
            index += 1
        }
        return value
    }

    // MARK: - Helpers

    @inline(__always)
    private mutating func skipWhitespace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x0A, 0x0D, 0x09: index += 1
            default: return
            }
        }
    }

    private func fail(_ reason: String, at offset: Int? = nil) -> JSONParseError {
        JSONParseError(offset: offset ?? index, reason: reason)
    }

    private func describe(_ b: UInt8) -> String {
        if b >= 0x20 && b < 0x7F { return "character '\(printable(b))'" }
        return "byte \(hex(b))"
    }

    private func printable(_ b: UInt8) -> String {
        b >= 0x20 && b < 0x7F ? String(UnicodeScalar(b)) : hex(b)
    }

    private func hex(_ b: UInt8) -> String {
        let digits = Array("0123456789ABCDEF")
        return "0x" + String(digits[Int(b >> 4)]) + String(digits[Int(b & 0xF)])
    }

    private func hex4(_ v: UInt16) -> String {
        let s = String(v, radix: 16, uppercase: true)
        return String(repeating: "0", count: 4 - s.count) + s
    }
}
