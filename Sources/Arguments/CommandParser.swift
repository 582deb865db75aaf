/// Parses argument arrays against a `Command` tree.
///
/// Pure: no global state, no printing, no exiting. `parse` returns what to do (run a
/// command, show help, show the version) or throws a `UsageError` for the caller to print.
///
/// Rules:
/// - `--name VALUE`, `--name=VALUE` and `-s VALUE`; flags take no value.
/// - A value that starts with "-" is only taken when it looks like a number ("-1.5") or is "-".
/// - `--` ends options: everything after it is positional.
/// - Options of every command on the path so far are accepted (root options are global).
/// - `-h`/`--help` anywhere (before `--`) shows help for the deepest command named, even
///   when the rest of the line has errors; `help COMMAND...` does the same.
/// - `--version` anywhere shows the root's version when it has one.
public struct CommandParser: Sendable {
    /// The root of the tree; its name is the program name.
    public let root: Command

    /// Creates a parser for `root`.
    public init(root: Command) {
        self.root = root
    }

    /// Parses `arguments` (without the program name).
    public func parse(_ arguments: [String]) throws(UsageError) -> ParseResult {
        let wantsHelp = arguments.prefix { $0 != "--" }.contains { $0 == "--help" || $0 == "-h" }
        do {
            return try parseStrictly(arguments)
        } catch {
            if wantsHelp, let text = help(for: Array(error.commandPath.dropFirst())) { return .help(text) }
            throw error
        }
    }

    /// The help text for the command at `path` (names below the root), or nil if there is none.
    public func help(for path: [String]) -> String? {
        guard let chain = resolve(path) else { return nil }
        return HelpFormatter(chain: chain).render()
    }

    /// The commands from the root along `path`, or nil when a name does not match.
    private func resolve(_ path: [String]) -> [Command]? {
        var chain = [root]
        for name in path {
            guard let next = chain.last!.subcommand(named: name) else { return nil }
            chain.append(next)
        }
        return chain
    }

    private func parseStrictly(_ arguments: [String]) throws(UsageError) -> ParseResult {
        var state = ParseState(chain: [root])
        var index = 0
        var optionsEnded = false
        var wantsHelp = false
        var wantsVersion = false

        while index < arguments.count {
            let arg = arguments[index]
            index += 1
            if !optionsEnded {
                if arg == "--" {
                    optionsEnded = true
                    continue
                }
                if arg == "--help" || arg == "-h" {
                    wantsHelp = true
                    continue
                }
                if arg == "--version", root.version != nil {
                    wantsVersion = true
                    continue
                }
                if arg.hasPrefix("-"), arg != "-", !Self.looksNumeric(arg) {
                    try state.parseOption(arg, arguments: arguments, index: &index)
                    continue
                }
            }
            let current = state.chain.last!
            if !current.subcommands.isEmpty {
                if state.chain.count == 1, arg == "help" {
                    return try helpCommand(Array(arguments[index...]).filter { !$0.hasPrefix("-") })
                }
                guard let next = current.subcommand(named: arg) else {
                    throw state.error("unknown command '\(arg)' for '\(state.name)' (expected one of: \(Self.commandList(current, isRoot: state.chain.count == 1)))")
                }
                state.chain.append(next)
                continue
            }
            state.positionals.append(arg)
        }

        if wantsVersion, let version = root.version { return .version(version) }
        if wantsHelp { return .help(HelpFormatter(chain: state.chain).render()) }
        let current = state.chain.last!
        if !current.subcommands.isEmpty {
            throw state.error("missing command for '\(state.name)' (expected one of: \(Self.commandList(current, isRoot: state.chain.count == 1)))")
        }
        try state.assignPositionals()
        state.applyDefaults()
        return .run(Invocation(path: state.chain.dropFirst().map(\.name), commandName: state.name, values: state.values))
    }

    /// `help [COMMAND...]`.
    private func helpCommand(_ names: [String]) throws(UsageError) -> ParseResult {
        var chain = [root]
        for name in names {
            guard let next = chain.last!.subcommand(named: name) else {
                let path = chain.map(\.name)
                throw UsageError("unknown command '\(name)' for '\(path.joined(separator: " "))' (expected one of: \(Self.commandList(chain.last!, isRoot: chain.count == 1)))",
                                 commandPath: path)
            }
            chain.append(next)
        }
        return .help(HelpFormatter(chain: chain).render())
    }

    /// "list, power" (plus "help" for the root, which has the built-in help command).
    static func commandList(_ command: Command, isRoot: Bool) -> String {
        (command.subcommands.map(\.name) + (isRoot ? ["help"] : [])).joined(separator: ", ")
    }

    /// "-1", "-0.5", "-1e3": negative numbers are values, not options.
    static func looksNumeric(_ arg: String) -> Bool {
        Double(arg) != nil
    }
}

/// The mutable state of one parse.
private struct ParseState {
    var chain: [Command]
    var values = ParsedValues()
    var positionals: [String] = []

    init(chain: [Command]) {
        self.chain = chain
    }

    /// "peerlink adapter power".
    var name: String { chain.map(\.name).joined(separator: " ") }

    func error(_ message: String) -> UsageError {
        UsageError(message, commandPath: chain.map(\.name))
    }

    /// The option called `name` (long) on the path, innermost first.
    func option(long name: String) -> Option? {
        for command in chain.reversed() {
            if let o = command.options.first(where: { $0.name == name }) { return o }
        }
        return nil
    }

    func option(short: Character) -> Option? {
        for command in chain.reversed() {
            if let o = command.options.first(where: { $0.short == short }) { return o }
        }
        return nil
    }

    /// Handles one argument starting with "-" (and its value, advancing `index`).
    mutating func parseOption(_ arg: String, arguments: [String], index: inout Int) throws(UsageError) {
        let option: Option
        var inlineValue: String?
        if arg.hasPrefix("--") {
            let body = arg.dropFirst(2)
            let name: Substring
            // The "=" scalar: a value starting with a combining mark would make "=" and the
            // mark one Character, and "--name=\u{301}x" an unknown option.
            if let eq = body.unicodeScalars.firstIndex(of: "=") {
                name = Substring(body.unicodeScalars[..<eq])
                inlineValue = String(body.unicodeScalars[body.unicodeScalars.index(after: eq)...])
            } else {
                name = body
            }
            guard let found = self.option(long: String(name)) else {
                throw error("unknown option '--\(name)' for '\(self.name)'")
            }
            option = found
        } else {
            let letters = arg.dropFirst()
            guard letters.count == 1, let found = self.option(short: letters.first!) else {
                throw error("unknown option '\(arg)' for '\(self.name)'")
            }
            option = found
        }

        switch option.kind {
        case .flag:
            if inlineValue != nil { throw error("flag '--\(option.name)' does not take a value") }
            values.add(.bool(true), for: option.key, explicit: true)
        case .value(let parser, _, _, let repeating):
            let text: String
            if let inlineValue {
                text = inlineValue
            } else if index < arguments.count,
                      !arguments[index].hasPrefix("-") || arguments[index] == "-" || CommandParser.looksNumeric(arguments[index]) {
                text = arguments[index]
                index += 1
            } else {
                throw error("missing value for '\(option.synopsis)'")
            }
            if !repeating, values.isExplicit(option.key) {
                throw error("'\(option.synopsis)' given more than once")
            }
            do {
                values.add(try parser.parse(text), for: option.key, explicit: true)
            } catch {
                throw self.error("invalid value '\(text)' for '\(option.synopsis)': \(error.reason)")
            }
        }
    }

    /// Matches the collected positionals to the leaf's declared arguments.
    mutating func assignPositionals() throws(UsageError) {
        let declared = chain.last!.arguments
        var remaining = positionals[...]
        for argument in declared {
            if remaining.isEmpty {
                if argument.isOptional { continue }
                throw error("missing argument '<\(argument.name)>' for '\(name)'")
            }
            let texts = argument.isRepeating ? Array(remaining) : [remaining.first!]
            remaining = argument.isRepeating ? [] : remaining.dropFirst()
            for text in texts {
                do {
                    values.add(try argument.parser.parse(text), for: argument.name, explicit: true)
                } catch {
                    throw self.error("invalid value '\(text)' for '<\(argument.name)>': \(error.reason)")
                }
            }
        }
        if let extra = remaining.first {
            throw error("unexpected argument '\(extra)' for '\(name)'")
        }
    }

    /// Fills in defaults for options not given, innermost declaration first.
    mutating func applyDefaults() {
        for command in chain.reversed() {
            for option in command.options {
                guard case .value(let parser, _, let defaultValue?, _) = option.kind, !values.contains(option.key) else { continue }
                if let value = try? parser.parse(defaultValue) {
                    values.add(value, for: option.key, explicit: false)
                }
            }
        }
    }
}
