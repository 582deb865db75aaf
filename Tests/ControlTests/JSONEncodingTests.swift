import Testing
import Foundation
@testable import Control

@Suite struct JSONEncodingTests {
    private func text(_ v: JSONValue) -> String { String(decoding: v.encoded(), as: UTF8.self) }

    @Test func encodesCompactWithSortedKeys() {
        let v: JSONValue = ["b": [1, 2], "a": nil, "c": ["z": true, "y": false], "B": "x"]
        #expect(text(v) == #"{"B":"x","a":null,"b":[1,2],"c":{"y":false,"z":true}}"#)
        #expect(v.description == text(v))
    }

    @Test func encodesNumbers() {
        #expect(text(.int(0)) == "0")
        #expect(text(.int(-12)) == "-12")
        #expect(text(.int(.min)) == "-9223372036854775808")
        #expect(text(.int(.max)) == "9223372036854775807")
        #expect(text(.double(2)) == "2.0")
        #expect(text(.double(0.1)) == "0.1")
        #expect(text(.double(-1.5)) == "-1.5")
        #expect(text(.double(1e20)) == "1e+20")
        #expect(text(.double(.nan)) == "null")
        #expect(text(.double(.infinity)) == "null")
        #expect(text(.double(-.infinity)) == "null")
    }

    @Test func escapesStrings() {
        #expect(text("a\"b\\c") == #""a\"b\\c""#)
        #expect(text("\n\r\t\u{8}\u{c}") == #""\n\r\t\b\f""#)
        #expect(text("\u{0}\u{1f}\u{7f}") == "\"\\u0000\\u001f\u{7f}\"")
        #expect(text("é😀/") == "\"é😀/\"")
    }

    @Test(arguments: [
        #"{"a":[1,-2,3.25,"x",null,true,false,{"b":{}}],"c":"\u0001é😀"}"#,
        #"[[],{},[[[]]],"",0,-0.5,1e-05]"#,
        #"{"jsonrpc":"2.0","method":"event","params":{"data":{"powered":false},"time":"2026-11-29T18:00:00.123Z","topic":"adapter.powered"}}"#,
    ])
    func roundTrips(original: String) throws {
        let v = try JSONValue.parse(original)
        let again = try JSONValue.parse(v.encoded())
        #expect(again == v)
        #expect(again.encoded() == v.encoded())
    }

    @Test func everyControlCharacterRoundTrips() throws {
        let s = String(String.UnicodeScalarView((0..<0x80).map { Unicode.Scalar(UInt8($0)) }))
        #expect(try JSONValue.parse(JSONValue.string(s).encoded()) == .string(s))
    }

    @Test func accessors() {
        let v: JSONValue = ["s": "x", "b": true, "i": 3, "d": 3.0, "f": 3.5, "a": [1], "o": ["k": nil]]
        #expect(v["s"]?.stringValue == "x")
        #expect(v["b"]?.boolValue == true)
        #expect(v["i"]?.intValue == 3)
        #expect(v["d"]?.intValue == 3)
        #expect(v["f"]?.intValue == nil)
        #expect(JSONValue.double(1e30).intValue == nil)
        #expect(v["i"]?.doubleValue == 3.0)
        #expect(v["f"]?.doubleValue == 3.5)
        #expect(v["a"]?.arrayValue == [1])
        #expect(v["o"]?.objectValue == ["k": .null])
        #expect(v["o"]?["k"]?.isNull == true)
        #expect(v["s"]?.intValue == nil)
        #expect(JSONValue.string("x")["k"] == nil)
        #expect(v.typeName == "object")
    }

    @Test func encodedLineEndsWithNewline() {
        #expect((["a": 1] as JSONValue).encodedLine() == Array("{\"a\":1}\n".utf8))
    }

    @Test func parsesAFewThousandEventsQuickly() throws {
        // ~510-byte notifications at 2000/s is the expected load; this must take far less than a second.
        var data: [String: JSONValue] = [:]
        for i in 0..<12 { data["field\(i)"] = .string(String(repeating: "v", count: 20)) }
        let event = ControlEvent.notification(topic: "adapter.changed", time: .init(timeIntervalSince1970: 0), data: .object(data))
        let line = event.json.encoded()
        #expect(line.count > 400)
        let clock = ContinuousClock()
        let elapsed = try clock.measure {
            for _ in 0..<4000 { _ = try JSONValue.parse(line) }
        }
        #expect(elapsed < .seconds(2))
    }
}
