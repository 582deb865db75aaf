import Foundation
import Testing
@testable import Session

/// Peer IDs' text form (Syncthing's device ID form) and the pairing code, with fixed vectors.
@Suite struct IdentityTests {
    /// Syncthing's own example device ID and its bytes.
    static let syncthingText = "P56IOI7-MZJNU2Y-IQGDREY-DM2MGTI-MGL3BXN-PQ6W5BM-TBBZ4TJ-XZWICQ2"
    static let syncthingID = Fixtures.peer(hex: "7f7c8723ecca5b4d22061c4981b34c34d865ec376be1eb74330873c9a6f9b205")

    @Test func theTextFormMatchesSyncthing() throws {
        #expect(Self.syncthingID.text == Self.syncthingText)
        #expect(Self.syncthingID.shortText == "P56IOI7")
        #expect(try PeerID(parsing: Self.syncthingText) == Self.syncthingID)
    }

    @Test func sha256OfAKnownInputHasItsForm() throws {
        // SHA-256("peerlink"), base32 FDJGWO5MRSEPSUAAMH2DSMDI55HNZG2PVFPWS6WNQ3AKW75IHBQQ.
        let id = Fixtures.peer(hex: "28d26b3bac8c88f9500061f4393068ef4edc9b4fa95f697acd86c0ab7fa83861")
        let text = id.text
        #expect(text.count == 63)
        #expect(text.split(separator: "-").count == 8)
        #expect(text.replacingOccurrences(of: "-", with: "").count == 56)
        let plain = text.filter { $0 != "-" }
        let groups = (0..<4).map { String(Array(plain)[($0 * 14)..<($0 * 14 + 13)]) }.joined()
        #expect(groups == "FDJGWO5MRSEPSUAAMH2DSMDI55HNZG2PVFPWS6WNQ3AKW75IHBQQ")
        #expect(try PeerID(parsing: text) == id)
    }

    @Test func hexRoundTripsAndRefusesEverythingElse() throws {
        let id = try #require(PeerID(bytes: (0..<32).map { UInt8($0 * 7 + 1) }))
        #expect(id.hex.count == 64 && id.hex == id.hex.lowercased())
        #expect(PeerID(hex: id.hex) == id && PeerID(hex: id.hex.uppercased()) == id)
        for bad in ["", String(id.hex.dropLast()), id.hex + "0", "g" + id.hex.dropFirst(), String(repeating: "é", count: 32)] {
            #expect(PeerID(hex: bad) == nil, "\(bad)")
        }
    }

    @Test func parsingToleratesCaseAndMissingDashes() throws {
        let lower = Self.syncthingText.lowercased()
        #expect(try PeerID(parsing: lower) == Self.syncthingID)
        #expect(try PeerID(parsing: Self.syncthingText.replacingOccurrences(of: "-", with: "")) == Self.syncthingID)
        #expect(try PeerID(parsing: "P56IOI7 MZJNU2Y IQGDREY DM2MGTI MGL3BXN PQ6W5BM TBBZ4TJ XZWICQ2") == Self.syncthingID)
    }

    @Test func everyRoundTrips() throws {
        var rng = SplitMix(state: 42)
        for _ in 0..<200 {
            let bytes = (0..<32).map { _ in UInt8.random(in: 0...255, using: &rng) }
            guard let id = PeerID(bytes: bytes) else { Issue.record("32 bytes"); return }
            #expect(try PeerID(parsing: id.text) == id)
        }
    }

    @Test func aMistypedCharacterNamesItsGroup() {
        // Change one character in each group in turn (position 3 of group g's 14).
        for g in 0..<4 {
            var chars = Array(Self.syncthingText.filter { $0 != "-" })
            let i = g * 14 + 3
            chars[i] = chars[i] == "A" ? "B" : "A"
            do {
                _ = try PeerID(parsing: String(chars))
                Issue.record("group \(g + 1) not caught")
            } catch {
                guard case .checkCharacter(let group, _, _) = error else { Issue.record("\(error)"); continue }
                #expect(group == g + 1)
            }
        }
        // A wrong check character itself.
        #expect(throws: PeerID.ParseError.checkCharacter(group: 4, expected: "2", found: "3")) {
            try PeerID(parsing: String(Self.syncthingText.dropLast()) + "3")
        }
        let e = PeerID.ParseError.checkCharacter(group: 2, expected: "Y", found: "A")
        #expect(e.description.contains("group 2 of 4") && e.description.contains("characters 15-28"))
    }

    @Test func badTextIsRefusedWithItsReason() {
        #expect(throws: PeerID.ParseError.length(55)) { try PeerID(parsing: String(Self.syncthingText.dropLast())) }
        #expect(throws: PeerID.ParseError.character("1", position: 2)) { try PeerID(parsing: "P51" + Self.syncthingText.dropFirst(3)) }
        #expect(throws: PeerID.ParseError.character("=", position: 0)) { try PeerID(parsing: "=") }
        #expect(PeerID(bytes: [1, 2, 3]) == nil)
    }

    @Test func orderIsByteWise() {
        let a = Fixtures.peer(hex: "00" + String(repeating: "ff", count: 31))
        let b = Fixtures.peer(hex: "01" + String(repeating: "00", count: 31))
        #expect(a < b && !(b < a))
        #expect(Fixtures.peer(1) < Fixtures.peer(2))
        #expect(PairingCode.exporterContext(b, a) == a.bytes + b.bytes)
        #expect(PairingCode.exporterContext(a, b) == a.bytes + b.bytes)
    }

    @Test func pairingCodesFromFixedExporterBytes() {
        func code(_ b: [UInt8]) -> String? { PairingCode(exporterBytes: b)?.text }
        #expect(code([0, 1, 2, 3, 4, 5, 6, 7]) == "306183")  // 0x0001020304050607 = 283686952306183
        #expect(code([0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF]) == "551615")  // 2^64 - 1
        #expect(code([0, 0, 0, 0, 0, 0x0F, 0x42, 0x6A]) == "000042")  // 1,000,042
        #expect(code([0, 0, 0, 0, 0, 0, 0, 0]) == "000000")
        #expect(code([1, 2, 3]) == nil)
        #expect(PairingCode.exporterLabel == "EXPORTER-peerlink-pairing")
    }
}
