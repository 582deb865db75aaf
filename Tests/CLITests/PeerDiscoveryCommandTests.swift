import Control
import Foundation
import TestSupport
import Testing
@testable import CLI

/// `peerlink peer advertise | browse | invite | watch` against a scripted daemon: the requests
/// they make, the lines they print, and an invitation by display name found by browsing.
@Suite(.ownThreads, .memoryHeavy) struct PeerDiscoveryCommandTests {
    static let idA = String(repeating: "a1", count: 32)
    static let idB = String(repeating: "b2", count: 32)
    static func peer(_ id: String, _ name: String, _ address: String) -> JSONValue {
        ["peer": .string(id), "peer_text": "AAAAAAA-BBBBBBB", "short": .string(String(id.prefix(7)).uppercased()), "name": .string(name),
         "addresses": [.string(address)], "info": ["room": "lab"], "versions": [1], "compatible": true]
    }

    @Test func advertiseSendsTheInfoAndShowsWarnings() throws {
        let daemon = try FakeDaemon { c in
            let r = try c.expect("peer.advertise")
            #expect(r.params.values == ["type": "cmj-stream", "info": ["room": "lab", "note": "a=b"]])
            try c.reply(r, ["type": "cmj-stream", "service_type": "_cmj-stream._tcp", "name": "KenshinCui_Advertiser", "port": 4711,
                            "state": "established", "warnings": ["the discovery record is 420 bytes"]])
            c.waitForClose()
        }
        let run = peerlink(["peer", "advertise", "cmj-stream", "--info", "room=lab", "--info", "note=a=b"], daemon: daemon)
        #expect(run.code == 0, "\(run.err)")
        #expect(run.out == "advertising _cmj-stream._tcp as KenshinCui_Advertiser on port 4711 (established)\nwarning: the discovery record is 420 bytes\n")
    }

    @Test func advertiseInfoValueMayStartWithACombiningMark() throws {
        let daemon = try FakeDaemon { c in
            let r = try c.expect("peer.advertise")
            #expect(r.params.values == ["type": "cmj-stream", "info": ["room": "\u{301}a"]])
            try c.reply(r, ["type": "cmj-stream", "service_type": "_cmj-stream._tcp", "name": "n", "port": 1, "state": "established"])
            c.waitForClose()
        }
        let run = peerlink(["peer", "advertise", "cmj-stream", "--info", "room=\u{301}a"], daemon: daemon)
        #expect(run.code == 0, "\(run.err)")
    }

    @Test func advertiseInfoMustBeKeyValue() {
        let run = peerlink(["peer", "advertise", "cmj-stream", "--info", "novalue"])
        #expect(run.code == 2 && run.err.contains("--info expects key=value"), "\(run.err)")
    }

    @Test func browsePrintsFoundAndLost() throws {
        let daemon = try FakeDaemon { c in
            try c.reply(try c.expect("peer.browse"), ["browse_id": "b1", "type": "cmj-stream", "peers": [Self.peer(Self.idA, "KenshinCui_Advertiser", "10.0.0.1:4711")]])
            try c.event("peer.lost", ["browse_id": "b1", "peer": .string(Self.idA), "short": "A1A1A1A", "name": "KenshinCui_Advertiser"])
            c.waitForClose()
        }
        let run = peerlink(["peer", "browse", "cmj-stream", "--timeout", "0.5"], daemon: daemon)
        #expect(run.code == 0, "\(run.err)")
        #expect(run.out == "+ KenshinCui_Advertiser A1A1A1A addresses 10.0.0.1:4711 info room=lab\n- KenshinCui_Advertiser A1A1A1A\n")
    }

    @Test func inviteByNameBrowsesThenInvitesTheIDFound() throws {
        let daemon = try FakeDaemon { c in
            try c.reply(try c.expect("peer.browse"), ["browse_id": "b1", "type": "cmj-stream", "peers": []])
            try c.event("peer.found", Self.peer(Self.idB, "someone-else", "10.0.0.2:1"))
            try c.event("peer.found", Self.peer(Self.idA, "KenshinCui_Advertiser", "10.0.0.1:4711"))
            let r = try c.expect("peer.invite")
            #expect(r.params.values == ["peer": .string(Self.idA), "context_base64": .string(Data("hi".utf8).base64EncodedString()), "timeout": 5.0])
            try c.reply(r, ["peer": .string(Self.idA), "short": "A1A1A1A", "name": "KenshinCui_Advertiser", "address": "10.0.0.1:4711",
                            "encrypted": true, "pairing_code": "123456"])
            c.waitForClose()
        }
        let run = peerlink(["peer", "invite", "KenshinCui_Advertiser", "--type", "cmj-stream", "--context", "hi", "--wait", "5"], daemon: daemon)
        #expect(run.code == 0, "\(run.err)")
        #expect(run.out == "KenshinCui_Advertiser A1A1A1A at 10.0.0.1:4711: TLS 1.3, pairing code 123456\n")
    }

    /// Two boards with the same name (the host name by default): the second, found a moment
    /// after the first, makes the invite by name an error listing both, not an invitation to
    /// whichever was found first (the check could never fire before). A whole ID is taken.
    @Test func inviteByANameTwoPeersHaveIsRefusedAndAnIDIsTaken() throws {
        let twice = try FakeDaemon { c in
            try c.reply(try c.expect("peer.browse"), ["browse_id": "b1", "type": "cmj-stream", "peers": []])
            try c.event("peer.found", Self.peer(Self.idA, "raspberrypi", "10.0.0.1:4711"))
            try c.event("peer.found", Self.peer(Self.idB, "raspberrypi", "10.0.0.2:4711"))
            c.waitForClose()
        }
        let run = peerlink(["peer", "invite", "raspberrypi", "--type", "cmj-stream"], daemon: twice)
        #expect(run.code == 1 && run.err.contains("more than one peer is called \"raspberrypi\" (A1A1A1A, B2B2B2B)"), "\(run.err)")
        #expect(!twice.requests.contains { $0.method == "peer.invite" })
        let short = try FakeDaemon { c in
            try c.reply(try c.expect("peer.browse"), ["browse_id": "b1", "type": "cmj-stream", "peers": [Self.peer(Self.idB, "b", "10.0.0.2:1")]])
            try c.event("peer.found", Self.peer(Self.idA, "raspberrypi", "10.0.0.1:4711"))
            let r = try c.expect("peer.invite")
            #expect(r.params["peer"] == .string(Self.idA))
            try c.reply(r, ["peer": .string(Self.idA), "short": "A1A1A1A", "name": "raspberrypi", "address": "10.0.0.1:4711", "encrypted": true, "pairing_code": "1"])
            c.waitForClose()
        }
        #expect(peerlink(["peer", "invite", Self.idA, "--type", "cmj-stream"], daemon: short).code == 0)
    }

    @Test func inviteOfAPeerNeverFoundFailsNamingIt() throws {
        let daemon = try FakeDaemon { c in
            try c.reply(try c.expect("peer.browse"), ["browse_id": "b1", "type": "cmj-stream", "peers": []])
            c.waitForClose()
        }
        let run = peerlink(["peer", "invite", "nobody", "--type", "cmj-stream", "--find", "0.3"], daemon: daemon)
        #expect(run.code == 1 && run.err.contains("no peer \"nobody\" advertising cmj-stream was found"), "\(run.err)")
    }

    /// A browse that fails (avahi-daemon refused it) has stopped: the command says so and
    /// exits 1 (it waited until its timeout and exited 0).
    @Test func aFailedBrowseExitsOne() throws {
        let daemon = try FakeDaemon { c in
            try c.reply(try c.expect("peer.browse"), ["browse_id": "b1", "type": "cmj-stream", "peers": []])
            try c.event("peer.browse-failed", ["browse_id": "b1", "error": "Bad state"])
            c.waitForClose()
        }
        let run = peerlink(["peer", "browse", "cmj-stream", "--timeout", "30"], daemon: daemon)
        #expect(run.code == 1 && run.out.contains("! browse failed: Bad state"), "\(run.code) \(run.out) \(run.err)")
    }

    /// Options the daemon bounds too are checked here, as usage errors naming the option; an
    /// accept-stream without --to writes the stream to standard output, so --json is refused
    /// there; --peer must look like an ID.
    @Test func usageErrorsNameTheOption() {
        let wait = peerlink(["peer", "connect", "127.0.0.1:1", "--wait", "900"])
        #expect(wait.code == 2 && wait.err.contains("--wait") && wait.err.contains("between 1 and 600"), "\(wait.err)")
        let json = peerlink(["--json", "peer", "accept-stream"])
        #expect(json.code == 2 && json.err.contains("--json needs --to FILE"), "\(json.err)")
        let peer = peerlink(["peer", "accept-stream", "--peer", "x5j"])
        #expect(peer.code == 2 && peer.err.contains("--peer expects a peer ID"), "\(peer.err)")
        let fraction = peerlink(["peer", "accept-stream", "--wait", "1.5", "--to", "/nonexistent-dir/x"])
        #expect(fraction.code != 2, "fractions of a second are taken: \(fraction.err)")
    }

    @Test func watchLines() {
        let inv: JSONValue = ["invitation": 3, "name": "KenshinCui", "short": "B2B2B2B", "pairing_code": "042042",
                              "context_base64": .string(Data("let's talk".utf8).base64EncodedString())]
        #expect(PeerDiscoveryCommands.line("peer.invitation", inv) == "invitation 3 from KenshinCui B2B2B2B pairing code 042042 context \"let's talk\"")
        #expect(PeerDiscoveryCommands.line("peer.disconnected", ["name": "a", "short": "A1", "reason": "lost", "by_peer": false, "detail": "3 pings unanswered"])
            == "disconnected a A1: lost 3 pings unanswered")
        #expect(PeerDiscoveryCommands.line("peer.message", ["short": "A1", "reliable": true, "data_base64": .string(Data("hello".utf8).base64EncodedString())])
            == "message from A1: hello")
        #expect(PeerDiscoveryCommands.line("peer.message", ["short": "A1", "reliable": false, "data_base64": "AAEC"]) == "message from A1 (unreliable): 3 bytes")
        #expect(PeerDiscoveryCommands.line("peer.reconnecting", ["short": "A1", "attempt": 2, "in_seconds": 1.5]) == "reconnecting A1 attempt 2 in 1.5 s")
    }

    /// Text a peer chose (its context, its CLOSE's text, its TXT values, a resource's name)
    /// cannot move the cursor, clear or reorder a line: control characters, C1 and
    /// bidirectional controls are shown escaped, in quotes, so a forged pairing code or a
    /// forged "found" line reads as what it is.
    @Test func textFromPeersIsShownEscaped() {
        let forged = "hi\r\u{1B}[2Kinvitation 3 from Bank B2B2B2B pairing code 111111"
        let inv: JSONValue = ["invitation": 3, "name": "KenshinCui", "short": "B2B2B2B", "pairing_code": "042042",
                              "context_base64": .string(Data(forged.utf8).base64EncodedString())]
        #expect(PeerDiscoveryCommands.line("peer.invitation", inv)
            == "invitation 3 from KenshinCui B2B2B2B pairing code 042042 context \"hi\\r\\u001b[2Kinvitation 3 from Bank B2B2B2B pairing code 111111\"")
        #expect(PeerDiscoveryCommands.line("peer.disconnected", ["name": "a", "short": "A1", "reason": "declined", "by_peer": true, "detail": "no\u{9B}31m"])
            == "disconnected a A1: declined (by the peer) \"no\\u009b31m\"")
        #expect(PeerDiscoveryCommands.line("peer.found", ["name": "a", "short": "A1", "addresses": ["10.0.0.2:7000"], "info": ["k": "x\n+ Bank 1a2b"]])
            == "+ a A1 addresses 10.0.0.2:7000 info k=\"x\\n+ Bank 1a2b\"")
        #expect(Rendering.text("invoice\u{202E}fdp.exe") == "\"invoice\\u202efdp.exe\"")
        #expect(Rendering.text("Küche 2") == "Küche 2", "text without hidden scalars is shown as it is")
        #expect(Rendering.scalar("a\u{1B}b") == "\"a\\u001bb\"")
    }
}
