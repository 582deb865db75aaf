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
}
