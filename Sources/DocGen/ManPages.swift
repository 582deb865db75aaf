import Arguments
import CLI
import Control
import Daemon

/// The three man pages, each written from the table its program reads: `peerlink(1)` from
/// `CommandTable.root`, `peerlinkd(8)` from `DaemonCommandLine.command`, `peerlink.conf(5)`
/// from `ConfigKeys.all`. Only the sections no table holds (exit status, files, the file
/// format) are written here.
enum ManPages {
    // MARK: peerlink(1)

    static func peerlink(root: Command = CommandTable.root) -> String {
        var page = Roff(title: "PEERLINK", section: 1, source: root.version ?? root.name,
                        generatedFrom: "the CLI's command table (Sources/CLI/CommandTable.swift)")
        page.section("NAME")
        page.raw("\(root.name) \\- \(Roff.text(sentence(root.abstract)))")

        page.section("SYNOPSIS")
        page.raw(".B \(root.name)")
        page.raw((root.options.map(Roff.optionSynopsis) + [Roff.italic("command"), "[" + Roff.italic("argument") + " ...]"]).joined(separator: " "))
        page.raw(".br")
        page.raw(".B \(root.name) help")
        page.raw("[" + Roff.italic("command") + " ...]")

        page.section("DESCRIPTION")
        page.paragraph(root.discussion, break: false)
        page.paragraph("""
            Global options are accepted before or after the command name. Every command also takes \
            -h or --help, which prints its help; 'peerlink help COMMAND...' does the same. Output \
            is words and aligned columns for people; --json prints each result, or event, as one \
            JSON object per line for scripts.
            """)

        page.section("GLOBAL OPTIONS")
        for option in root.options { page.tagged(Roff.optionTag(option), Roff.optionHelp(option)) }
        if root.version != nil { page.tagged(Roff.bold("--version"), "Print the version and exit.") }
        page.tagged(Roff.bold("-h") + ", " + Roff.bold("--help"), "Print help for the command named so far and exit.")

        page.section("COMMANDS")
        for child in root.subcommands { commandSections(child, parents: [root.name], into: &page) }

        page.section("EXIT STATUS")
        for (code, meaning) in [
            ("0", "Success (also --help and --version)."),
            ("1", "The daemon reported an error (one line in its words; --verbose adds the JSON-RPC code and data), or a command's own failure, such as 'watch --count' running out of time."),
            ("2", "A usage error: the message names the argument, and the next line the command's --help."),
            ("3", "The daemon is unreachable, closed the connection before replying, did not reply within --timeout, or sent an invalid reply."),
        ] { page.tagged(Roff.bold(code), meaning) }

        page.section("ENVIRONMENT")
        page.tagged(Roff.bold(ControlDefaults.socketEnvironmentVariable),
                    "The control socket when --socket is not given (ignored when empty).")
        page.section("FILES")
        page.tagged(Roff.italic(ControlDefaults.socketPath), "The daemon's control socket by default.")
        page.section("SEE ALSO")
        page.raw("\\fBpeerlinkd\\fR(8), \\fBpeerlink.conf\\fR(5); docs/cli.md and docs/control-protocol.md in the source tree.")
        return page.text
    }

    /// A group's paragraph and its leaves, or one leaf: `.SS` with its full name, synopsis,
    /// abstract, discussion, arguments and options.
    private static func commandSections(_ command: Command, parents: [String], into page: inout Roff) {
        let name = (parents + [command.name]).joined(separator: " ")
        page.subsection(name)
        if !command.subcommands.isEmpty {
            page.paragraph(command.abstract, break: false)
            page.paragraph("Commands: " + command.subcommands.map { "\(name) \($0.name)" }.joined(separator: ", ") + ".")
            for sub in command.subcommands { commandSections(sub, parents: parents + [command.name], into: &page) }
            return
        }
        page.raw(".B \(Roff.text(name))")
        let synopsis = command.options.map(Roff.optionSynopsis) + command.arguments.map(Roff.argumentSynopsis)
        if !synopsis.isEmpty { page.raw(synopsis.joined(separator: " ")) }
        page.paragraph(command.abstract)
        page.paragraph(command.discussion)
        for argument in command.arguments {
            let note = argument.parser.helpNote.isEmpty ? "" : " (\(argument.parser.helpNote))"
            page.tagged(Roff.italic(argument.name), argument.help + note)
        }
        for option in command.options { page.tagged(Roff.optionTag(option), Roff.optionHelp(option)) }
    }

    // MARK: peerlinkd(8)

    static func peerlinkd(command: Command = DaemonCommandLine.command) -> String {
        var page = Roff(title: "PEERLINKD", section: 8, source: "peerlinkd \(command.version ?? "")",
                        generatedFrom: "the daemon's command line (Sources/Daemon/DaemonCommandLine.swift)")
        page.section("NAME")
        page.raw("\(command.name) \\- \(Roff.text(sentence(command.abstract)))")
        page.section("SYNOPSIS")
        page.raw(".B \(command.name)")
        page.raw(command.options.map(Roff.optionSynopsis).joined(separator: " "))
        page.section("DESCRIPTION")
        page.paragraph(command.discussion, break: false)
        page.paragraph("""
            Under systemd it sends READY=1 once the control socket listens, STOPPING=1 on \
            shutdown, RELOADING=1 on SIGHUP and WATCHDOG=1 at half of WatchdogSec. If the bus or \
            bluetoothd is not there, the daemon still starts and answers, and connects when they \
            appear.
            """)
        page.section("OPTIONS")
        for option in command.options { page.tagged(Roff.optionTag(option), Roff.optionHelp(option)) }
        if command.version != nil { page.tagged(Roff.bold("--version"), "Print the version and exit.") }
        page.tagged(Roff.bold("-h") + ", " + Roff.bold("--help"), "Print the help and exit.")
        page.section("SIGNALS")
        page.tagged(Roff.bold("SIGTERM") + ", " + Roff.bold("SIGINT"), "Stop cleanly.")
        page.tagged(Roff.bold("SIGHUP"), "Read the configuration file again. "
                    + "Keys applied at once: \(DaemonConfig.liveKeys.sorted().joined(separator: ", ")); "
                    + "a change to any other key is logged as needing a restart. A file with an error is logged and the running configuration kept.")
        page.section("EXIT STATUS")
        for (code, meaning) in [("0", "A clean stop."), ("1", "It cannot start because the machine refused (a read-only or full state directory, a port or socket in use), or it failed while running."),
                                ("2", "A usage error or a configuration error (naming the file, line and key).")] {
            page.tagged(Roff.bold(code), meaning)
        }
        let defaults = DaemonConfig()
        page.section("FILES")
        page.tagged(Roff.italic(DaemonConfig.defaultPath), "The configuration file; see peerlink.conf(5).")
        page.tagged(Roff.italic(defaults.socketPath), "The control socket by default.")
        page.tagged(Roff.italic(defaults.stateDirectory), "Persistent state by default: the peer identity, trusted peers, DNS-SD names.")
        page.section("SEE ALSO")
        page.raw("\\fBpeerlink\\fR(1), \\fBpeerlink.conf\\fR(5), \\fBbluetoothd\\fR(8), \\fBavahi\\-daemon\\fR(8)")
        return page.text
    }

    // MARK: peerlink.conf(5)

    static func peerlinkConf(keys: [ConfigKey] = ConfigKeys.all) -> String {
        var page = Roff(title: "PEERLINK.CONF", section: 5, source: "peerlinkd \(PeerlinkDaemon.version)",
                        generatedFrom: "the daemon's configuration keys (Sources/Daemon/ConfigKeys.swift)")
        page.section("NAME")
        page.raw("peerlink.conf \\- configuration file of peerlinkd")
        page.section("SYNOPSIS")
        page.raw(Roff.italic(DaemonConfig.defaultPath))
        page.section("DESCRIPTION")
        page.paragraph("""
            peerlinkd(8) takes its settings from built-in defaults, then this file, then its \
            command-line flags, each overriding the one before. Every key is optional; a missing \
            default file means all defaults, while a file named with --config must exist.
            """, break: false)
        page.paragraph("""
            One 'key = value' per line; spaces around the key, the '=' and the value are ignored. \
            Lines starting with '#' or ';' are comments; on a value line '#' or ';' starts a \
            comment only after whitespace. A value may be double-quoted, keeping spaces, '#' and \
            ';', with the escapes \\" \\\\ \\n and \\t. '[section]' starts a section: the keys after \
            it are named section.key (so '[peer]' then 'name = board-1' sets peer.name). Keys are \
            lowercase. The file is UTF-8, at most 1 MiB.
            """)
        page.paragraph("""
            The daemon refuses to start on any error and names the file, line and key: an unknown \
            key (with the nearest known one), a bad value, a key given twice, a malformed line, an \
            unknown section.
            """)
        page.section("KEYS")
        var section: String?
        for key in keys {
            if key.section != section, let name = key.section {
                page.subsection("[\(name)] section")
                section = name
            }
            var body = key.meaning + " Values: \(key.values). Default: \(key.defaultValue)."
            if key.live { body += " A reload (SIGHUP) applies a new value at once." }
            page.tagged(Roff.bold(key.name), body)
        }
        page.section("RELOADING")
        page.paragraph("""
            On SIGHUP the daemon reads the same file again and applies its flags on top. Only \
            \(keys.filter(\.live).map(\.name).joined(separator: ", ")) takes effect at once; a change \
            to any other key is logged as needing a restart.
            """, break: false)
        page.section("EXAMPLE")
        page.example("""
            socket_group = peerlink       # let members of "peerlink" use the CLI
            adapter = hci1                # the USB dongle, not the on-board radio
            log_level = notice

            [peer]
            name = "Living room"
            accept = trusted
            """)
        page.section("SEE ALSO")
        page.raw("\\fBpeerlinkd\\fR(8), \\fBpeerlink\\fR(1); docs/configuration.md in the source tree.")
        return page.text
    }

    /// "Control the PeerLink daemon (peerlinkd)." as "control the PeerLink daemon (peerlinkd)":
    /// the NAME line's description is a fragment.
    private static func sentence(_ abstract: String) -> String {
        var text = abstract
        if text.hasSuffix(".") { text.removeLast() }
        let firstWord = text.prefix { $0 != " " }
        if let first = firstWord.first, first.isUppercase, firstWord.dropFirst().allSatisfy(\.isLowercase) {
            text = first.lowercased() + text.dropFirst()
        }
        return text
    }
}
