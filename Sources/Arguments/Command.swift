/// One command of a command-line tree: its name, help texts, options, arguments and subcommands.
///
/// A command with subcommands is a group: it only selects one of them. A command without
/// subcommands is a leaf and takes positional arguments. Options declared on a command are
/// accepted anywhere after its name, including after a subcommand's name, so options on the
/// root are global. A subcommand may declare an option with the same name as an ancestor's;
/// after the subcommand's name the subcommand's option wins.
public struct Command: Sendable {
    /// The name typed on the command line (for the root: the program name).
    public var name: String
    /// One line shown in the parent's subcommand list and at the top of the help.
    public var abstract: String
    /// Longer help text, shown below the abstract (may be empty).
    public var discussion: String
    /// Options and flags accepted by this command and its subcommands.
    public var options: [Option]
    /// Positional arguments, in order (leaf commands only).
    public var arguments: [Positional]
    /// Subcommands, in the order help lists them.
    public var subcommands: [Command]
    /// The version printed for `--version` (the root only; nil disables `--version`).
    public var version: String?

    /// Creates a command.
    public init(
        _ name: String,
        abstract: String,
        discussion: String = "",
        options: [Option] = [],
        arguments: [Positional] = [],
        subcommands: [Command] = [],
        version: String? = nil
    ) {
        precondition(subcommands.isEmpty || arguments.isEmpty, "\(name): a command has subcommands or positional arguments, not both")
        self.name = name
        self.abstract = abstract
        self.discussion = discussion
        self.options = options
        self.arguments = arguments
        self.subcommands = subcommands
        self.version = version
    }

    /// The direct subcommand called `name`.
    public func subcommand(named name: String) -> Command? {
        subcommands.first { $0.name == name }
    }
}

/// A named option (`--name VALUE`, `--name=VALUE`, `-n VALUE`) or a boolean flag (`--name`).
public struct Option: Sendable {
    /// What the option takes.
    public enum Kind: Sendable {
        /// A boolean flag: present or not.
        case flag
        /// An option with a value; `defaultValue` (parsed like a typed value) applies when it
        /// is not given; a `repeating` option collects every occurrence.
        case value(ValueParser, valueName: String, defaultValue: String?, repeating: Bool)
    }

    /// The long name, without the leading "--".
    public var name: String
    /// The one-letter alias, used as `-x`.
    public var short: Character?
    /// Where the value is stored in `ParsedValues` (defaults to `name`).
    public var key: String
    /// One line of help.
    public var help: String
    /// Flag or value.
    public var kind: Kind

    /// A boolean flag, `--name` (or `-s`).
    public static func flag(_ name: String, short: Character? = nil, key: String? = nil, help: String) -> Option {
        Option(name: name, short: short, key: key ?? name, help: help, kind: .flag)
    }

    /// An option taking a value, `--name VALUE` or `--name=VALUE` (or `-s VALUE`).
    ///
    /// `valueName` is shown in help as `<valueName>` (default: the option's name).
    public static func value(
        _ name: String,
        short: Character? = nil,
        key: String? = nil,
        valueName: String? = nil,
        parser: ValueParser = .string,
        default defaultValue: String? = nil,
        repeating: Bool = false,
        help: String
    ) -> Option {
        if let defaultValue {
            precondition((try? parser.parse(defaultValue)) != nil, "--\(name): default '\(defaultValue)' is not valid for its parser")
        }
        return Option(name: name, short: short, key: key ?? name, help: help,
                      kind: .value(parser, valueName: valueName ?? name, defaultValue: defaultValue, repeating: repeating))
    }

    /// True for flags.
    public var isFlag: Bool {
        if case .flag = kind { return true }
        return false
    }

    /// "--name <value>" or "--name": how help and errors spell the option.
    public var synopsis: String {
        switch kind {
        case .flag: return "--\(name)"
        case .value(_, let valueName, _, _): return "--\(name) <\(valueName)>"
        }
    }
}

/// A positional argument of a leaf command.
public struct Positional: Sendable {
    /// The name shown in help as `<name>`, and the key in `ParsedValues`.
    public var name: String
    /// One line of help.
    public var help: String
    /// How the value is checked and converted.
    public var parser: ValueParser
    /// False when the argument must be given.
    public var isOptional: Bool
    /// True when the argument takes all remaining positional values (must be last).
    public var isRepeating: Bool

    /// Creates a positional argument (required unless `optional`).
    public init(_ name: String, parser: ValueParser = .string, optional: Bool = false, repeating: Bool = false, help: String) {
        self.name = name
        self.help = help
        self.parser = parser
        self.isOptional = optional
        self.isRepeating = repeating
    }

    /// "<name>", "[<name>]", "<name> ..." or "[<name> ...]".
    public var synopsis: String {
        let base = "<\(name)>" + (isRepeating ? " ..." : "")
        return isOptional ? "[\(base)]" : base
    }
}
