import Foundation
import Testing
@testable import Session

/// The TXT record a browse finds, read back: what `discoveryInfo` publishes parses to the
/// same peer, name and info; a record from the network that breaks a rule is rejected with
/// the rule named.
@Suite struct DiscoveryRecordTests {
    static let peer = Fixtures.peer(0x42)

    static func bytes(_ entries: [String]) -> [[UInt8]] { entries.map { Array($0.utf8) } }

    @Test func whatIsPublishedReadsBack() throws {
        let published = try SessionValidation.discoveryInfo(["room": "kitchen", "Flag": ""], peerID: Self.peer, displayName: "KenshinCui_Advertiser")
        let read = try DiscoveredRecord(entries: Self.bytes(published.entries))
        #expect(read.peer == Self.peer)
        #expect(read.displayName == "KenshinCui_Advertiser")
        #expect(read.info == ["room": "kitchen", "Flag": ""])
        #expect(read.versions == Wire.supportedVersions && read.isCompatible)
        // A key alone (no '='), reserved keys in capitals, and a future version alongside ours.
        let pid = Self.peer.text
        let other = try DiscoveredRecord(entries: Self.bytes(["PV=1,7", "PID=\(pid)", "pn=b", "solo"]))
        #expect(other.versions == [1, 7] && other.isCompatible && other.info == ["solo": ""])
        #expect(!(try DiscoveredRecord(entries: Self.bytes(["pv=9", "pid=\(pid)", "pn=b"]))).isCompatible)
    }

    @Test(arguments: [
        (["pid=P", "pn=b"], "no \"pv\""),
        (["pv=1", "pn=b"], "no \"pid\""),
        (["pv=1", "pid=P"], "no \"pn\""),
        (["pv=", "pid=P", "pn=b"], "\"pv\" must be"),
        (["pv=1,,2", "pid=P", "pn=b"], "\"pv\" must be"),
        (["pv=0", "pid=P", "pn=b"], "\"pv\" must be"),
        (["pv=1", "pid=NOT-AN-ID", "pn=b"], "\"pid\":"),
        (["pv=1", "pid=P", "pn="], "pn: must not be empty"),
        (["pv=1", "pid=P", "pn=a\u{7}b"], "control characters"),
        (["pv=1", "pid=P", "pn=b", "x=1", "X=2"], "appears twice"),
        (["pv=1", "pid=P", "pn=b", "=v"], "empty or non-ASCII key"),
    ])
    func aBrokenRecordIsRejectedWithTheRule(entries: [String], expected: String) {
        let filled = entries.map { $0.replacingOccurrences(of: "pid=P", with: "pid=\(Self.peer.text)") }
        #expect {
            _ = try DiscoveredRecord(entries: Self.bytes(filled))
        } throws: { e in
            "\(e)".contains(expected)
        }
    }

    @Test func invalidUTF8AndOversizeEntriesAreRejected() {
        #expect(throws: ValidationError.self) {
            _ = try DiscoveredRecord(entries: [Array("pv=1".utf8), Array("pid=\(Self.peer.text)".utf8), Array("pn=".utf8) + [0xFF, 0xFE]])
        }
        #expect(throws: ValidationError.self) {
            _ = try DiscoveredRecord(entries: [Array("pv=1".utf8), Array("pid=\(Self.peer.text)".utf8), Array("pn=b".utf8),
                                              Array("k=".utf8) + Array(repeating: 0x61, count: 300)])
        }
    }

    /// Found by the discovery-record fuzz target (Tests/Fuzz/regressions/discovery-record): a
    /// lone 255-byte key parsed, but re-published as "key=" it is 256 bytes, which
    /// `discoveryInfo` refuses. A 254-byte lone key and a 255-byte "key=value" still parse.
    @Test func aRecordThatParsesCanBePublishedAgain() throws {
        let head = [Array("pv=1".utf8), Array("pid=\(Self.peer.text)".utf8), Array("pn=b".utf8)]
        #expect(throws: ValidationError.self) {
            _ = try DiscoveredRecord(entries: head + [[UInt8](repeating: 0x6B, count: 255)])
        }
        for entry in [[UInt8](repeating: 0x6B, count: 254), Array("k=".utf8) + [UInt8](repeating: 0x61, count: 253)] {
            let record = try DiscoveredRecord(entries: head + [entry])
            let published = try SessionValidation.discoveryInfo(record.info, peerID: record.peer, displayName: record.displayName)
            #expect(try DiscoveredRecord(entries: published.entries.map { Array($0.utf8) }) == record)
        }
    }
}
