import Arguments
import Control
import TestSupport
import Testing
@testable import CLI

/// Parsing, request building and rendering of the `peerlink dnssd` commands.
@Suite(.ownThreads, .memoryHeavy) struct DNSSDCommandTests {
    private let parser = CommandParser(root: CommandTable.root)

    private func invocation(_ args: [String]) throws -> Invocation {
        guard case .run(let invocation) = try parser.parse(args) else { throw UsageError("not a run", commandPath: []) }
        return invocation
    }

    @Test func publishTakesTXTAndRepeatedSubtypes() throws {
        let v = try invocation(["dnssd", "publish", "Lab Printer", "_ipp._tcp", "631", "txtvers=1", "note=a b",
                                "--subtype", "_universal", "--subtype", "_x", "--interface", "dummy0"])
        #expect(v.path == ["dnssd", "publish"])
        #expect(v.values.string("name") == "Lab Printer" && v.values.string("type") == "_ipp._tcp" && v.values.int("port") == 631)
        #expect(v.values.strings("txt") == ["txtvers=1", "note=a b"])
        #expect(v.values.strings("subtype") == ["_universal", "_x"])
        #expect(v.values.string("interface") == "dummy0")
    }

    @Test func publishNeedsANumericPort() {
        #expect(throws: UsageError.self) { try parser.parse(["dnssd", "publish", "A", "_http._tcp", "eighty"]) }
        #expect(throws: UsageError.self) { try parser.parse(["dnssd", "publish", "A", "_http._tcp"]) }
    }

    @Test func resolveBuildsItsRequest() throws {
        let v = try invocation(["dnssd", "resolve", "A B", "_http._tcp", "--timeout", "2", "--all-addresses"])
        #expect(try DNSSDCommands.resolveRequest(v.values) == RPCCall(
            method: "dnssd.resolve", params: ["name": "A B", "type": "_http._tcp", "timeout": 2.0, "all_addresses": true],
            minimumReplyTimeout: 7))
        // The global --timeout before the command stays the reply timeout.
        let g = try invocation(["--timeout", "9", "dnssd", "resolve", "A", "_http._tcp"])
        #expect(g.values.double("timeout") == 9)
        #expect(try DNSSDCommands.resolveRequest(g.values).params["timeout"] == nil)
    }

    @Test func browseOptions() throws {
        let v = try invocation(["dnssd", "browse", "_http._tcp", "--resolve", "--timeout", "3"])
        #expect(v.values.flag("resolve") && v.values.double("browse-timeout") == 3)
    }

    @Test func browseLines() {
        let s: JSONValue = ["name": "Avahi Tool Service", "type": "_lab-demo._tcp", "domain": "local", "interface": "dummy0",
                            "protocol": "ipv4", "host": "peerlink-lab.local", "addresses": ["169.254.10.1"], "port": 4242,
                            "txt": ["k1=v1", "flag"]]
        #expect(DNSSDCommands.browseLine("dnssd.found", ["service": s, "browse_id": "b1"])
            == "+ \"Avahi Tool Service\" _lab-demo._tcp local on dummy0/ipv4")
        #expect(DNSSDCommands.browseLine("dnssd.removed", ["service": s])?.hasPrefix("- ") == true)
        #expect(DNSSDCommands.browseLine("dnssd.resolved", ["service": s])
            == "= \"Avahi Tool Service\" _lab-demo._tcp host peerlink-lab.local address 169.254.10.1 port 4242 txt k1=v1,flag")
        #expect(DNSSDCommands.browseLine("dnssd.all-for-now", [:]) == nil)
    }

    @Test func listRendering() {
        #expect(DNSSDCommands.renderList(["avahi": ["available": true], "publications": []]) == "No publications.")
        let text = DNSSDCommands.renderList(["avahi": ["available": false, "reason": "avahi-daemon is not running"],
                                             "publications": [["id": "p1", "name": "A", "type": "_http._tcp", "port": 80,
                                                               "state": "waiting", "txt": ["k=v"]]]])
        #expect(text.contains("avahi-daemon: unavailable (avahi-daemon is not running)"))
        #expect(text.contains("p1  A     _http._tcp  80    waiting  k=v"))
    }
}
