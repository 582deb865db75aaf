/// Renders the `--help` text of one command, in swift-argument-parser's layout:
///
/// ```
/// OVERVIEW: Power an adapter on or off.
///
/// USAGE: peerlink adapter power [--adapter <adapter>] <state>
///
/// ARGUMENTS:
///   <state>                 Power on or off. (values: on, off)
///
/// OPTIONS:
///   --adapter <adapter>     Adapter name (hciN) or address.
///   -h, --help              Show help information.
///
/// GLOBAL OPTIONS:
///   --json                  Print results as JSON.
/// ```
struct HelpFormatter {
    /// The commands from the root to the one described.
    let chain: [Command]

    private static let column = 26

    private var command: Command { chain.last! }
    private var isRoot: Bool { chain.count == 1 }
    private var fullName: String { chain.map(\.name).joined(separator: " ") }

    func render() -> String {
        var sections: [String] = []
        sections.append("OVERVIEW: \(command.abstract)")
        if !command.discussion.isEmpty { sections.append(command.discussion) }
        sections.append("USAGE: \(usage())")

        if !command.arguments.isEmpty {
            sections.append("ARGUMENTS:\n" + command.arguments.map { row($0.synopsis, $0.help, notes(parser: $0.parser)) }.joined(separator: "\n"))
        }

        var ownRows = command.options.map(optionRow)
        if isRoot, command.version != nil { ownRows.append(row("--version", "Show the version.", [])) }
        ownRows.append(row("-h, --help", "Show help information.", []))
        sections.append("OPTIONS:\n" + ownRows.joined(separator: "\n"))

        let inherited = inheritedOptions()
        if !inherited.isEmpty {
            sections.append("GLOBAL OPTIONS:\n" + inherited.map(optionRow).joined(separator: "\n"))
        }

        if !command.subcommands.isEmpty {
            var rows = command.subcommands.map { row($0.name, $0.abstract, []) }
            if isRoot { rows.append(row("help", "Show help for a command.", [])) }
            sections.append("SUBCOMMANDS:\n" + rows.joined(separator: "\n")
                + "\n\n  See '\(chain[0].name) help \(chain.dropFirst().map { $0.name + " " }.joined())<subcommand>' for detailed help.")
        }
        return sections.joined(separator: "\n\n") + "\n"
    }

    /// "peerlink adapter power [--adapter <adapter>] [--timeout <seconds>] <state>".
    func usage() -> String {
        var parts = [fullName]
        for option in command.options {
            var text = option.synopsis
            if case .value(_, _, _, true) = option.kind { text += " ..." }
            parts.append("[\(text)]")
        }
        if !command.subcommands.isEmpty {
            parts.append("<subcommand>")
        } else {
            parts.append(contentsOf: command.arguments.map(\.synopsis))
        }
        return parts.joined(separator: " ")
    }

    /// Options of ancestors that are not shadowed by a nearer declaration.
    private func inheritedOptions() -> [Option] {
        var seen = Set(command.options.map(\.name))
        var result: [Option] = []
        for ancestor in chain.dropLast().reversed() {
            for option in ancestor.options where !seen.contains(option.name) {
                seen.insert(option.name)
                result.append(option)
            }
        }
        return result
    }

    private func optionRow(_ option: Option) -> String {
        let names = (option.short.map { "-\($0), " } ?? "") + option.synopsis
        var extra: [String] = []
        if case .value(let parser, _, let defaultValue, let repeating) = option.kind {
            extra = notes(parser: parser)
            if let defaultValue { extra.append("default: \(defaultValue)") }
            if repeating { extra.append("repeatable") }
        }
        return row(names, option.help, extra)
    }

    private func notes(parser: ValueParser) -> [String] {
        parser.helpNote.isEmpty ? [] : [parser.helpNote]
    }

    /// Two-space indent, the name padded to a column, then the help and notes in parentheses.
    private func row(_ name: String, _ help: String, _ notes: [String]) -> String {
        var text = help
        if !notes.isEmpty { text += (text.isEmpty ? "" : " ") + "(\(notes.joined(separator: "; ")))" }
        let lead = "  " + name
        if lead.count + 2 > Self.column {
            return lead + "\n" + String(repeating: " ", count: Self.column) + text
        }
        return lead + String(repeating: " ", count: Self.column - lead.count) + text
    }
}
