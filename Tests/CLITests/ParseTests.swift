import Arguments
import Control
import TestSupport
import Testing
@testable import CLI

/// Command-line parsing of every `peerlink` command, good and bad (exit 2, message checked).
@Suite(.ownThreads, .memoryHeavy) struct ParseTests {
    private let parser = CommandParser(root: CommandTable.root)

    private func invocation(_ args: [String]) throws -> Invocation {
        guard case .run(let invocation) = try parser.parse(args) else { throw UsageError("not a run", commandPath: []) }
        return invocation
    }

    @Test func status() throws {
        let v = try invocation(["status"])
        #expect(v.path == ["status"])
        #expect(v.values.double("timeout") == 30)
        let j = try invocation(["--json", "--socket", "/tmp/s", "status", "--timeout", "2.5"])
        #expect(j.values.flag("json") && j.values.string("socket") == "/tmp/s" && j.values.double("timeout") == 2.5)
    }

    @Test func adapterList() throws {
        #expect(try invocation(["adapter", "list", "--json"]).path == ["adapter", "list"])
    }

    @Test func adapterPowerBuildsItsRequest() throws {
        let on = try invocation(["adapter", "power", "on"])
        #expect(try AdapterCommands.powerRequest(on.values) == RPCCall(method: "adapter.power", params: ["on": true]))
        let off = try invocation(["--timeout", "3", "adapter", "power", "off", "--adapter", "00:AA:01:00:00:01", "--timeout=12"])
        #expect(try AdapterCommands.powerRequest(off.values)
            == RPCCall(method: "adapter.power", params: ["on": false, "adapter": "00:AA:01:00:00:01", "timeout": 12.0], minimumReplyTimeout: 17))
        #expect(off.values.double("timeout") == 3)
    }

    @Test func watch() throws {
        let v = try invocation(["watch", "--topic", "adapter", "--topic", "bluez.available", "--count", "2", "--timeout", "1.5"])
        #expect(v.values.strings("topic") == ["adapter", "bluez.available"])
        #expect(v.values.int("count") == 2)
        #expect(v.values.double("watch-timeout") == 1.5)
        #expect(v.values.double("timeout") == 30)
    }

    @Test(arguments: [
        ([], "missing command for 'peerlink' (expected one of: status, adapter, watch, gatt, advertise, agent, scan, connect, disconnect, devices, services, read, write, subscribe, pair, trust, forget, dnssd, peer, help)", "peerlink"),
        (["stat"], "unknown command 'stat' for 'peerlink' (expected one of: status, adapter, watch, gatt, advertise, agent, scan, connect, disconnect, devices, services, read, write, subscribe, pair, trust, forget, dnssd, peer, help)", "peerlink"),
        (["status", "now"], "unexpected argument 'now' for 'peerlink status'", "peerlink status"),
        (["status", "--timeout", "0"], "invalid value '0' for '--timeout <seconds>': must be more than 0 seconds", "peerlink status"),
        (["--timeout", "soon", "status"], "invalid value 'soon' for '--timeout <seconds>': expected a number of seconds", "peerlink"),
        (["--socket"], "missing value for '--socket <path>'", "peerlink"),
        (["status", "--json=1"], "flag '--json' does not take a value", "peerlink status"),
        (["adapter"], "missing command for 'peerlink adapter' (expected one of: list, power)", "peerlink adapter"),
        (["adapter", "show"], "unknown command 'show' for 'peerlink adapter' (expected one of: list, power)", "peerlink adapter"),
        (["adapter", "list", "--adapter", "hci0"], "unknown option '--adapter' for 'peerlink adapter list'", "peerlink adapter list"),
        (["adapter", "power"], "missing argument '<state>' for 'peerlink adapter power'", "peerlink adapter power"),
        (["adapter", "power", "yes"], "invalid value 'yes' for '<state>': expected one of: on, off", "peerlink adapter power"),
        (["adapter", "power", "on", "--adapter"], "missing value for '--adapter <hciN|address>'", "peerlink adapter power"),
        (["adapter", "power", "on", "--adapter="], "invalid value '' for '--adapter <hciN|address>': must not be empty", "peerlink adapter power"),
        (["adapter", "power", "on", "--timeout", "-1"], "invalid value '-1' for '--timeout <seconds>': must be more than 0 seconds", "peerlink adapter power"),
        (["watch", "--count", "0"], "invalid value '0' for '--count <n>': must be at least 1", "peerlink watch"),
        (["watch", "--count", "many"], "invalid value 'many' for '--count <n>': expected an integer", "peerlink watch"),
        (["watch", "--count", "1", "--count", "2"], "'--count <n>' given more than once", "peerlink watch"),
        (["watch", "--topic"], "missing value for '--topic <topic>'", "peerlink watch"),
        (["watch", "adapter"], "unexpected argument 'adapter' for 'peerlink watch'", "peerlink watch"),
        (["help", "nope"], "unknown command 'nope' for 'peerlink' (expected one of: status, adapter, watch, gatt, advertise, agent, scan, connect, disconnect, devices, services, read, write, subscribe, pair, trust, forget, dnssd, peer, help)", "peerlink"),
    ] as [([String], String, String)])
    func usageErrorsExitTwo(args: [String], message: String, command: String) {
        let run = peerlink(args)
        #expect(run.code == 2)
        #expect(run.out == "")
        #expect(run.err == "peerlink: error: \(message)\nRun '\(command) --help'.\n")
    }

    @Test func helpAndVersion() {
        let help = peerlink(["--help"])
        #expect(help.code == 0 && help.err == "")
        #expect(help.out.contains("USAGE: peerlink [--socket <path>] [--json] [--verbose] [--timeout <seconds>] <subcommand>"))
        for args in [["help", "adapter", "power"], ["adapter", "power", "--help"], ["adapter", "power", "-h", "bogus"]] {
            let run = peerlink(args)
            #expect(run.code == 0)
            #expect(run.out.hasPrefix("OVERVIEW: Power an adapter on or off.\n"), "\(args)")
            #expect(run.out.contains("USAGE: peerlink adapter power [--adapter <hciN|address>] [--timeout <seconds>] <state>\n"))
        }
        #expect(peerlink(["help", "watch"]).out.contains("USAGE: peerlink watch [--topic <topic> ...] [--count <n>] [--timeout <seconds>] [--ready-file <path>]\n"))
        let version = peerlink(["--version"])
        #expect(version.code == 0 && version.out == "peerlink \(PeerlinkCLI.version)\n")
    }

    @Test func everyCommandHasHelp() {
        for command in CommandTable.commands {
            let run = peerlink(["help"] + command.path)
            #expect(run.code == 0)
            #expect(run.out.hasPrefix("OVERVIEW: \(command.abstract)\n"))
        }
    }
}
