import Testing
@testable import Arguments

/// A small tree shaped like `peerlink`'s, independent of the CLI module.
let tool = Command(
    "tool",
    abstract: "Talk to the daemon.",
    options: [
        .value("socket", valueName: "path", help: "The control socket."),
        .flag("json", help: "Print JSON."),
        .value("timeout", valueName: "seconds", parser: .double(in: 0.1...3600), default: "30", help: "Seconds to wait."),
        .flag("verbose", short: "v", help: "Say more."),
    ],
    subcommands: [
        Command("status", abstract: "Show status."),
        Command("adapter", abstract: "Manage adapters.", subcommands: [
            Command("list", abstract: "List adapters."),
            Command("power", abstract: "Power an adapter on or off.",
                    discussion: "Waits until the adapter reports the new state.",
                    options: [
                        .value("adapter", short: "a", help: "Adapter name or address."),
                        .value("timeout", key: "power-timeout", valueName: "seconds", parser: .double(in: 0...300), help: "Seconds for the change."),
                    ],
                    arguments: [Positional("state", parser: .choice(["on", "off"]), help: "The new state.")]),
        ]),
        Command("watch", abstract: "Print events.", options: [
            .value("topic", repeating: true, help: "Only this topic."),
            .value("count", valueName: "n", parser: .int(in: 1...1000), help: "Stop after n events."),
            .value("mac", parser: .custom(helpNote: "AA:BB:CC:DD:EE:FF") { text throws(ValueError) in
                guard text.split(separator: ":").count == 6 else { throw ValueError("expected six hex pairs") }
                return .string(text.uppercased())
            }, help: "A device address."),
        ]),
        Command("send", abstract: "Send files.", arguments: [
            Positional("target", help: "Where to."),
            Positional("files", optional: true, repeating: true, help: "What."),
        ]),
    ],
    version: "tool 1.2.3"
)

let parser = CommandParser(root: tool)

func run(_ args: [String]) throws -> Invocation {
    guard case .run(let invocation) = try parser.parse(args) else {
        Issue.record("expected .run for \(args)")
        throw UsageError("not run", commandPath: [])
    }
    return invocation
}

@Suite struct ParsingTests {
    @Test func selectsTheCommandPath() throws {
        let status = try run(["status"])
        #expect(status.path == ["status"])
        #expect(status.commandName == "tool status")
        let power = try run(["adapter", "power", "on"])
        #expect(power.path == ["adapter", "power"])
        #expect(power.values.string("state") == "on")
    }

    @Test func optionsInBothSpellings() throws {
        let a = try run(["adapter", "power", "--adapter", "hci1", "off"])
        let b = try run(["adapter", "power", "--adapter=hci1", "off"])
        let c = try run(["adapter", "power", "-a", "hci1", "off"])
        for v in [a, b, c] {
            #expect(v.values.string("adapter") == "hci1")
            #expect(v.values.string("state") == "off")
        }
        #expect(try run(["adapter", "power", "--adapter=", "on"]).values.string("adapter") == "")
        // "=" then a combining mark is one Character; the option still ends at the "=".
        #expect(try run(["adapter", "power", "--adapter=\u{301}x", "on"]).values.string("adapter") == "\u{301}x")
    }

    @Test func globalOptionsBeforeOrAfterTheSubcommand() throws {
        for args in [["--json", "--socket", "/s", "status"], ["status", "--json", "--socket=/s"], ["--json", "status", "--socket", "/s"]] {
            let v = try run(args)
            #expect(v.values.flag("json"), "\(args)")
            #expect(v.values.string("socket") == "/s")
        }
        #expect(try run(["adapter", "-v", "list"]).values.flag("verbose"))
    }

    @Test func defaultsAndShadowing() throws {
        let status = try run(["status"])
        #expect(status.values.double("timeout") == 30)
        #expect(!status.values.isExplicit("timeout"))
        #expect(!status.values.flag("json"))
        #expect(status.values.string("socket") == nil)

        // Before "power", --timeout is the root's; after it, power's own (another key).
        let v = try run(["--timeout", "5", "adapter", "power", "--timeout", "12.5", "on"])
        #expect(v.values.double("timeout") == 5)
        #expect(v.values.isExplicit("timeout"))
        #expect(v.values.double("power-timeout") == 12.5)
    }

    @Test func repeatableOptionsAndTypedValues() throws {
        let v = try run(["watch", "--topic", "adapter", "--topic=bluez", "--count", "3", "--mac", "aa:bb:cc:dd:ee:ff"])
        #expect(v.values.strings("topic") == ["adapter", "bluez"])
        #expect(v.values.values("topic") == [.string("adapter"), .string("bluez")])
        #expect(v.values.int("count") == 3)
        #expect(v.values.string("mac") == "AA:BB:CC:DD:EE:FF")
        #expect(try run(["watch"]).values.strings("topic") == [])
    }

    @Test func doubleDashEndsOptions() throws {
        let v = try run(["send", "--", "--json", "-v", "x"])
        #expect(v.values.strings("target") == ["--json"])
        #expect(v.values.strings("files") == ["-v", "x"])
        #expect(!v.values.flag("json"))
        let w = try run(["send", "host"])
        #expect(w.values.string("target") == "host")
        #expect(!w.values.contains("files"))
        #expect(try run(["send", "-", "-"]).values.strings("files") == ["-"])
    }

    @Test func negativeNumbersAreValues() throws {
        #expect(throws: UsageError("invalid value '-1' for '--count <n>': must be between 1 and 1000", commandPath: ["tool", "watch"])) {
            try parser.parse(["watch", "--count", "-1"])
        }
    }

    @Test func helpAndVersion() throws {
        guard case .help(let root) = try parser.parse(["--help"]) else { Issue.record("root help"); return }
        #expect(root.hasPrefix("OVERVIEW: Talk to the daemon.\n"))
        #expect(try parser.parse(["-h"]) == .help(root))
        #expect(try parser.parse(["help"]) == .help(root))
        let power = parser.help(for: ["adapter", "power"])!
        #expect(try parser.parse(["adapter", "power", "--help"]) == .help(power))
        #expect(try parser.parse(["help", "adapter", "power"]) == .help(power))
        #expect(try parser.parse(["adapter", "power", "--bogus", "-h"]) == .help(power), "help wins over errors")
        #expect(try parser.parse(["adapter", "-h", "power"]) == .help(power))
        #expect(try parser.parse(["--version"]) == .version("tool 1.2.3"))
        #expect(try parser.parse(["status", "--version"]) == .version("tool 1.2.3"))
        #expect(parser.help(for: ["nope"]) == nil)
    }

    @Test func helpText() {
        let expected = """
            OVERVIEW: Power an adapter on or off.

            Waits until the adapter reports the new state.

            USAGE: tool adapter power [--adapter <adapter>] [--timeout <seconds>] <state>

            ARGUMENTS:
              <state>                 The new state. (values: on, off)

            OPTIONS:
              -a, --adapter <adapter>
                                      Adapter name or address.
              --timeout <seconds>     Seconds for the change. (0-300)
              -h, --help              Show help information.

            GLOBAL OPTIONS:
              --socket <path>         The control socket.
              --json                  Print JSON.
              -v, --verbose           Say more.

            """
        #expect(parser.help(for: ["adapter", "power"]) == expected)

        let root = parser.help(for: [])!
        #expect(root.contains("USAGE: tool [--socket <path>] [--json] [--timeout <seconds>] [--verbose] <subcommand>\n"))
        #expect(root.contains("  --timeout <seconds>     Seconds to wait. (0.1-3600; default: 30)\n"))
        #expect(root.contains("  --version               Show the version.\n"))
        #expect(root.contains("SUBCOMMANDS:\n  status                  Show status.\n  adapter                 Manage adapters.\n"))
        #expect(root.contains("  help                    Show help for a command.\n\n  See 'tool help <subcommand>' for detailed help.\n"))
        #expect(!root.contains("GLOBAL OPTIONS"))

        let group = parser.help(for: ["adapter"])!
        #expect(group.contains("USAGE: tool adapter <subcommand>\n"))
        #expect(group.contains("See 'tool help adapter <subcommand>' for detailed help."))

        let watch = parser.help(for: ["watch"])!
        #expect(watch.contains("USAGE: tool watch [--topic <topic> ...] [--count <n>] [--mac <mac>]\n"))
        #expect(watch.contains("  --topic <topic>         Only this topic. (repeatable)\n"))
        #expect(watch.contains("  --mac <mac>             A device address. (AA:BB:CC:DD:EE:FF)\n"))
        #expect(parser.help(for: ["send"])!.contains("USAGE: tool send <target> [<files> ...]\n"))
    }
}

@Suite struct UsageErrorTests {
    @Test(arguments: [
        ([], ["tool"], "missing command for 'tool' (expected one of: status, adapter, watch, send, help)"),
        (["frob"], ["tool"], "unknown command 'frob' for 'tool' (expected one of: status, adapter, watch, send, help)"),
        (["adapter"], ["tool", "adapter"], "missing command for 'tool adapter' (expected one of: list, power)"),
        (["adapter", "fly"], ["tool", "adapter"], "unknown command 'fly' for 'tool adapter' (expected one of: list, power)"),
        (["help", "adapter", "fly"], ["tool", "adapter"], "unknown command 'fly' for 'tool adapter' (expected one of: list, power)"),
        (["--frob", "status"], ["tool"], "unknown option '--frob' for 'tool'"),
        (["status", "--frob=1"], ["tool", "status"], "unknown option '--frob' for 'tool status'"),
        (["status", "-x"], ["tool", "status"], "unknown option '-x' for 'tool status'"),
        (["status", "-vv"], ["tool", "status"], "unknown option '-vv' for 'tool status'"),
        (["--adapter", "hci0", "adapter", "power", "on"], ["tool"], "unknown option '--adapter' for 'tool'"),
        (["status", "--json=yes"], ["tool", "status"], "flag '--json' does not take a value"),
        (["status", "--socket"], ["tool", "status"], "missing value for '--socket <path>'"),
        (["--socket", "--json", "status"], ["tool"], "missing value for '--socket <path>'"),
        (["--timeout", "abc", "status"], ["tool"], "invalid value 'abc' for '--timeout <seconds>': expected a number"),
        (["status", "--timeout", "0"], ["tool", "status"], "invalid value '0' for '--timeout <seconds>': must be between 0.1 and 3600"),
        (["status", "--socket", "a", "--socket", "b"], ["tool", "status"], "'--socket <path>' given more than once"),
        (["status", "extra"], ["tool", "status"], "unexpected argument 'extra' for 'tool status'"),
        (["adapter", "power"], ["tool", "adapter", "power"], "missing argument '<state>' for 'tool adapter power'"),
        (["adapter", "power", "maybe"], ["tool", "adapter", "power"], "invalid value 'maybe' for '<state>': expected one of: on, off"),
        (["adapter", "power", "on", "off"], ["tool", "adapter", "power"], "unexpected argument 'off' for 'tool adapter power'"),
        (["adapter", "power", "--timeout", "301", "on"], ["tool", "adapter", "power"], "invalid value '301' for '--timeout <seconds>': must be between 0 and 300"),
        (["watch", "--count", "x"], ["tool", "watch"], "invalid value 'x' for '--count <n>': expected an integer"),
        (["watch", "--count", "0"], ["tool", "watch"], "invalid value '0' for '--count <n>': must be between 1 and 1000"),
        (["watch", "--mac", "zz"], ["tool", "watch"], "invalid value 'zz' for '--mac <mac>': expected six hex pairs"),
        (["send"], ["tool", "send"], "missing argument '<target>' for 'tool send'"),
    ] as [([String], [String], String)])
    func rejects(args: [String], path: [String], message: String) {
        #expect(throws: UsageError(message, commandPath: path)) { try parser.parse(args) }
    }

    @Test func errorText() {
        let e = UsageError("missing argument '<state>' for 'peerlink adapter power'", commandPath: ["peerlink", "adapter", "power"])
        #expect(e.hint == "Run 'peerlink adapter power --help'.")
        #expect(e.description == "error: missing argument '<state>' for 'peerlink adapter power'\nRun 'peerlink adapter power --help'.")
    }
}
