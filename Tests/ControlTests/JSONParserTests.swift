import Testing
@testable import Control

@Suite struct JSONParserTests {
    @Test func parsesScalars() throws {
        #expect(try JSONValue.parse("null") == .null)
        #expect(try JSONValue.parse("true") == .bool(true))
        #expect(try JSONValue.parse(" false ") == .bool(false))
        #expect(try JSONValue.parse("\"hi\"") == .string("hi"))
        #expect(try JSONValue.parse("0") == .int(0))
        #expect(try JSONValue.parse("-0") == .int(0))
        #expect(try JSONValue.parse("\t\r\n 42\n") == .int(42))
    }

    @Test func parsesContainers() throws {
        let v = try JSONValue.parse(#"{"a": [1, 2.5, "x", null, true, {}], "b": {"c": []}}"#)
        #expect(v == ["a": [1, 2.5, "x", nil, true, [:]], "b": ["c": []]])
        #expect(v["a"]?.arrayValue?.count == 6)
        #expect(v["b"]?["c"] == .array([]))
        #expect(v["missing"] == nil)
    }

    @Test func duplicateKeysLastWins() throws {
        #expect(try JSONValue.parse(#"{"a":1,"a":2}"#) == ["a": 2])
    }

    @Test(arguments: [
        ("9223372036854775807", JSONValue.int(.max)),
        ("-9223372036854775808", .int(.min)),
        ("9223372036854775808", .double(9_223_372_036_854_775_808.0)),
        ("-9223372036854775809", .double(-9_223_372_036_854_775_809.0)),
        ("123456789012345678901234567890", .double(1.2345678901234568e29)),
        ("1.5", .double(1.5)),
        ("-0.25", .double(-0.25)),
        ("1e3", .double(1000)),
        ("1E+3", .double(1000)),
        ("2.5e-3", .double(0.0025)),
        ("0.0", .double(0)),
        ("10", .int(10)),
    ])
    func parsesNumbers(text: String, expected: JSONValue) throws {
        #expect(try JSONValue.parse(text) == expected)
    }

    @Test func parsesEscapesAndUnicode() throws {
        #expect(try JSONValue.parse(#""a\"b\\c\/d\b\f\n\r\t""#) == .string("a\"b\\c/d\u{8}\u{c}\n\r\t"))
        #expect(try JSONValue.parse(#""\u0041\u00e9\u20AC""#) == .string("Aé€"))
        #expect(try JSONValue.parse(#""\ud83d\ude00""#) == .string("😀"))
        #expect(try JSONValue.parse(#""x\uD83D\uDE00y""#) == .string("x😀y"))
        #expect(try JSONValue.parse("\"héllo 😀 日本\"") == .string("héllo 😀 日本"))
        #expect(try JSONValue.parse(#""\u0000""#) == .string("\u{0}"))
    }

    @Test func parsesNonContiguousCollections() throws {
        let bytes: [UInt8] = Array(#"{"k":[1,2]}"#.utf8)
        #expect(try JSONValue.parse(bytes.lazy.map { $0 }) == ["k": [1, 2]])
        #expect(try JSONValue.parse(bytes[...]) == ["k": [1, 2]])
    }

    @Test(arguments: [
        ("", 0, "unexpected end of input"),
        ("   ", 3, "unexpected end of input"),
        ("[1,]", 3, "trailing comma in array"),
        (#"{"a":1,}"#, 7, "trailing comma in object"),
        ("[1 2]", 3, "expected ',' or ']' in array, got character '2'"),
        (#"{"a" 1}"#, 5, "expected ':' after object key, got character '1'"),
        ("{a:1}", 1, "expected a string key in object, got character 'a'"),
        (#"{"a":1"#, 6, "unexpected end of input in object"),
        ("[1", 2, "unexpected end of input in array"),
        ("01", 0, "leading zeros are not allowed"),
        ("-01", 1, "leading zeros are not allowed"),
        ("-", 1, "unexpected end of input"),
        ("-a", 1, "expected a digit after '-'"),
        ("1.", 2, "expected a digit after the decimal point"),
        ("1.e5", 2, "expected a digit after the decimal point"),
        ("1e", 2, "expected a digit in the exponent"),
        ("1e+", 3, "expected a digit in the exponent"),
        (".5", 0, "unexpected character '.'"),
        ("+1", 0, "unexpected character '+'"),
        ("1e400", 0, "number out of range"),
        ("NaN", 0, "unexpected character 'N'"),
        ("tru", 3, "unexpected end of input"),
        ("trUe", 2, "unexpected character 'U'"),
        ("nul l", 3, "unexpected character ' '"),
        ("// c\n1", 0, "unexpected character '/'"),
        ("1 2", 2, "unexpected character '2' after the JSON value"),
        ("{} x", 3, "unexpected character 'x' after the JSON value"),
        ("\"abc", 0, "unterminated string"),
        ("\"a\nb\"", 2, "control character 0x0A in string must be escaped"),
        (#""\x""#, 1, "invalid escape '\\x' in string"),
        (#""\u12""#, 1, "invalid \\u escape: expected 4 hex digits"),
        (#""\u12G4""#, 1, "invalid \\u escape: expected 4 hex digits"),
        (#""\uD800""#, 1, "lone surrogate \\uD800 in string"),
        (#""\uD800x""#, 1, "lone surrogate \\uD800 in string"),
        (#""\uD800\u0041""#, 1, "lone surrogate \\uD800 in string"),
        (#""\uDC00""#, 1, "lone surrogate \\uDC00 in string"),
        ("'a'", 0, "unexpected character '''"),
        ("[1]]", 3, "unexpected character ']' after the JSON value"),
    ])
    func rejectsInvalidJSON(text: String, offset: Int, reason: String) {
        #expect(throws: JSONParseError(offset: offset, reason: reason)) { try JSONValue.parse(text) }
    }

    @Test(arguments: [
        [0x22, 0xC3, 0x28, 0x22],  // bad continuation
        [0x22, 0xFF, 0x22],  // never valid
        [0x22, 0xED, 0xA0, 0x80, 0x22],  // UTF-8 encoded surrogate
        [0x22, 0xC0, 0xAF, 0x22],  // overlong
        [0x22, 0x5C, 0x6E, 0xE2, 0x82, 0x22],  // truncated, after an escape
    ] as [[UInt8]])
    func rejectsInvalidUTF8(bytes: [UInt8]) {
        #expect(throws: JSONParseError(offset: 0, reason: "invalid UTF-8 in string")) { try JSONValue.parse(bytes) }
    }

    @Test func rejectsNonASCIIOutsideStrings() {
        #expect(throws: JSONParseError(offset: 0, reason: "unexpected byte 0xC3")) { try JSONValue.parse([0xC3, 0xA9]) }
    }

    @Test func deepNestingIsAnErrorNotACrash() {
        let deep = [UInt8](repeating: UInt8(ascii: "["), count: 100_000)
        #expect(throws: JSONParseError(offset: 64, reason: "nesting deeper than 64 levels")) { try JSONValue.parse(deep) }
        let objects = String(repeating: #"{"a":"#, count: 100_000)
        #expect(throws: JSONParseError.self) { try JSONValue.parse(objects) }
    }

    @Test func nestingAtTheLimitIsAccepted() throws {
        let ok = String(repeating: "[", count: 64) + String(repeating: "]", count: 64)
        _ = try JSONValue.parse(ok)
        let tooDeep = "[" + ok + "]"
        #expect(throws: JSONParseError.self) { try JSONValue.parse(tooDeep) }
        _ = try JSONValue.parse(Array(tooDeep.utf8), maxDepth: 65)
    }

    @Test func errorDescription() {
        #expect(JSONParseError(offset: 12, reason: "unexpected character '}'").description == "at byte 12: unexpected character '}'")
    }
}
