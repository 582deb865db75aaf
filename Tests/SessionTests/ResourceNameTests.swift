import Testing
@testable import Session

/// Resource names from peers become one safe file name in the inbox (the cases the
/// resource issue lists, and the reasons behind each rule).
@Suite struct ResourceNameTests {
    struct Case: Sendable, CustomStringConvertible {
        let name: String
        let safe: String
        var description: String { name.debugDescription }
    }

    static let cases: [Case] = [
        Case(name: "photo.png", safe: "photo.png"),
        Case(name: "../../etc/passwd", safe: "passwd"),
        Case(name: "/etc/passwd", safe: "passwd"),
        Case(name: "a/b", safe: "b"),
        Case(name: "a/b/", safe: "b"),
        Case(name: "..", safe: "unnamed"),
        Case(name: ".", safe: "unnamed"),
        Case(name: "../..", safe: "unnamed"),
        Case(name: "/", safe: "unnamed"),
        Case(name: "", safe: "unnamed"),
        Case(name: "..\\..\\windows\\win.ini", safe: "win.ini"),
        Case(name: "a\u{0}b.txt", safe: "a_b.txt"),
        Case(name: "line\nbreak.jpg", safe: "line_break.jpg"),
        Case(name: "tab\there\u{7F}\u{85}", safe: "tab_here__"),
        Case(name: ".bashrc", safe: "bashrc"),
        Case(name: "..hidden", safe: "hidden"),
        Case(name: "  spaced name.txt  ", safe: "spaced name.txt"),
        Case(name: "trailing.", safe: "trailing"),
        Case(name: "what?: \"yes\" <maybe> | *.txt", safe: "what__ _yes_ _maybe_ _ _.txt"),
        Case(name: "report\u{202E}gpj.exe", safe: "report_gpj.exe"),
        Case(name: "CON", safe: "_CON"),
        Case(name: "con.txt", safe: "_con.txt"),
        Case(name: "lpt9.tar.gz", safe: "_lpt9.tar.gz"),
        Case(name: "console.txt", safe: "console.txt"),
        Case(name: "Kitchen ☕ Pi.png", safe: "Kitchen ☕ Pi.png"),
        // A separator followed by a combining mark is one Character with it, still a
        // separator (found by fuzzing: "a/\u{329}b" kept its '/').
        Case(name: "a/\u{329}b", safe: "\u{329}b"),
        Case(name: "../\u{301}x", safe: "\u{301}x"),
        Case(name: "x\\\u{301}y", safe: "\u{301}y"),
        Case(name: "CON.\u{301}txt", safe: "_CON.\u{301}txt"),
    ]

    @Test("a peer's name becomes a safe file name", arguments: cases)
    func sanitises(_ c: Case) {
        // Bytes: String's == would call canonically equivalent names equal.
        #expect(Array(ResourceName.sanitise(c.name).utf8) == Array(c.safe.utf8))
        #expect(Array(ResourceName.sanitise(c.safe).utf8) == Array(c.safe.utf8), "sanitising again changes it")
    }

    @Test("300 bytes of UTF-8 are cut to 255 between characters, the extension kept")
    func longNamesAreCutBetweenCharacters() {
        let name = String(repeating: "é", count: 148) + ".png"  // 296 + 4 bytes
        let safe = ResourceName.sanitise(name)
        #expect(safe.utf8.count <= ResourceName.maxBytes)
        #expect(safe == String(repeating: "é", count: 125) + ".png")
        let noExtension = String(repeating: "€", count: 100)  // 300 bytes, 3 a character
        #expect(ResourceName.sanitise(noExtension) == String(repeating: "€", count: 85))
    }

    @Test("a long extension is not kept whole: the name is cut as it comes")
    func longExtensionsAreNotKept() {
        let name = String(repeating: "a", count: 250) + "." + String(repeating: "b", count: 40)
        let safe = ResourceName.sanitise(name)
        #expect(safe == String(repeating: "a", count: 250) + "." + String(repeating: "b", count: 4))
    }

    @Test("collisions are numbered before the extension, within 255 bytes")
    func collisionsAreNumbered() {
        #expect(ResourceName.numbered("photo.png", 2) == "photo (2).png")
        #expect(ResourceName.numbered("README", 3) == "README (3)")
        let long = String(repeating: "x", count: 251) + ".png"
        let numbered = ResourceName.numbered(long, 12)
        #expect(numbered.utf8.count == ResourceName.maxBytes)
        #expect(numbered.hasSuffix("x (12).png"))

        let taken: Set = ["photo.png", "photo (2).png"]
        #expect(ResourceName.available("photo.png") { taken.contains($0) } == "photo (3).png")
        #expect(ResourceName.available("new.png") { taken.contains($0) } == "new.png")
        #expect(ResourceName.available("photo.png", limit: 2) { taken.contains($0) } == nil)
    }
}
