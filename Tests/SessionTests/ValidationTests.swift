import Testing
@testable import Session

/// The checks on user input: each refusal names the rule broken.
@Suite struct ValidationTests {
    @Test(arguments: ["a", "chat", "my-app2", "x1-y2-z3", "abcdefghijklmno", "1a", "a1"])
    func goodServiceTypes(_ t: String) throws {
        #expect(try SessionValidation.serviceType(t) == t)
    }

    @Test(arguments: [
        ("", "service type: must not be empty"),
        ("abcdefghijklmnop", "service type: \"abcdefghijklmnop\" is 16 characters long; at most 15"),
        ("Chat", "service type: \"Chat\" has \"C\" at position 1: only lowercase letters a-z, digits and hyphens are allowed (no capitals)"),
        ("my_app", "service type: \"my_app\" has \"_\" at position 3: only lowercase letters a-z, digits and hyphens are allowed"),
        ("chät", "service type: \"chät\" has \"\u{C3}\" at position 3: only lowercase letters a-z, digits and hyphens are allowed"),
        ("123", "service type: \"123\" must contain at least one letter"),
        ("-chat", "service type: \"-chat\" must not start with a hyphen"),
        ("chat-", "service type: \"chat-\" must not end with a hyphen"),
        ("my--app", "service type: \"my--app\" must not contain two hyphens in a row"),
        ("1-2", "service type: \"1-2\" must contain at least one letter"),
    ])
    func badServiceTypesNameTheRule(_ t: String, _ message: String) {
        do {
            _ = try SessionValidation.serviceType(t)
            Issue.record("\"\(t)\" accepted")
        } catch {
            #expect(error.description == message)
        }
    }

    @Test func displayNames() throws {
        #expect(try SessionValidation.displayName("Kitchen Pi ☕") == "Kitchen Pi ☕")
        #expect(try SessionValidation.displayName(String(repeating: "é", count: 31) + "e").utf8.count == 63)
        #expect(throws: ValidationError(param: "display name", reason: "must not be empty")) { try SessionValidation.displayName("") }
        #expect(throws: ValidationError(param: "display name", reason: "is 64 bytes of UTF-8; at most 63")) {
            try SessionValidation.displayName(String(repeating: "é", count: 32))
        }
        #expect(throws: ValidationError(param: "display name", reason: "must not contain control characters (found U+A)")) {
            try SessionValidation.displayName("a\nb")
        }
        #expect(throws: ValidationError(param: "display name", reason: "must not contain control characters (found U+85)")) {
            try SessionValidation.displayName("a\u{85}b")
        }
    }

    static let me = Fixtures.peer(0x42)

    @Test func discoveryInfoBecomesTheTXTRecord() throws {
        let r = try SessionValidation.discoveryInfo(["room": "kitchen", "flag": ""], peerID: Self.me, displayName: "Pi")
        #expect(r.entries == ["pv=1", "pid=\(Self.me.text)", "pn=Pi", "flag=", "room=kitchen"])
        #expect(r.warnings.isEmpty)
        #expect(r.wireSize == r.entries.reduce(0) { $0 + 1 + $1.utf8.count })
    }

    @Test func discoveryInfoRules() {
        func refused(_ info: [String: String], _ reason: String) {
            #expect(throws: ValidationError(param: "discovery info", reason: reason)) {
                try SessionValidation.discoveryInfo(info, peerID: Self.me, displayName: "Pi")
            }
        }
        refused(["": "x"], "a key is empty")
        refused(["a=b": "x"], "the key \"a=b\" must be printable ASCII without '='")
        refused(["clé": "x"], "the key \"clé\" must be printable ASCII without '='")
        refused(["pid": "x"], "the key \"pid\" is reserved (pv, pid and pn are set by the daemon)")
        refused(["PV": "2"], "the key \"PV\" is reserved (pv, pid and pn are set by the daemon)")
        refused(["Room": "a", "room": "b"], "the keys \"Room\" and \"room\" differ only in case")
        refused(["k": String(repeating: "v", count: 254)], "the entry for \"k\" is 256 bytes as key=value; at most 255")
        #expect(throws: ValidationError(param: "display name", reason: "must not be empty")) {
            try SessionValidation.discoveryInfo([:], peerID: Self.me, displayName: "")
        }
    }

    @Test func aLargeRecordIsAWarningNotAnError() throws {
        // The largest entry is fine on its own.
        let one = try SessionValidation.discoveryInfo(["k": String(repeating: "v", count: 253)], peerID: Self.me, displayName: "Pi")
        #expect(one.entries.last?.utf8.count == 255)
        // pv=1, pid=<63>, pn=Pi: 5 + 68 + 6 = 79 bytes; 255 + 1 more brings it to 335: no warning.
        #expect(one.wireSize == 335 && one.warnings.isEmpty)
        let two = try SessionValidation.discoveryInfo(["k": String(repeating: "v", count: 253), "j": String(repeating: "w", count: 100)],
                                                      peerID: Self.me, displayName: "Pi")
        #expect(two.wireSize == 438)
        #expect(two.warnings == ["the discovery record is 438 bytes (with pv, pid and pn); above 400 it may not fit one mDNS packet"])
    }
}
