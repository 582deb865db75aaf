/// The values parsed for one invocation, by key, with typed getters.
///
/// Option values are stored under the option's `key` (its long name unless set), positional
/// arguments under their name. Defaults are filled in; `isExplicit` tells them apart.
public struct ParsedValues: Sendable, Equatable {
    private var storage: [String: [ArgumentValue]] = [:]
    private var explicit: Set<String> = []

    /// An empty bag.
    public init() {}

    /// Records `value` for `key`; `explicit` is false for defaults.
    mutating func add(_ value: ArgumentValue, for key: String, explicit isExplicit: Bool) {
        storage[key, default: []].append(value)
        if isExplicit { explicit.insert(key) }
    }

    /// True when `key` has any value (given or defaulted).
    public func contains(_ key: String) -> Bool { storage[key] != nil }

    /// True when `key` was given on the command line (not filled in from a default).
    public func isExplicit(_ key: String) -> Bool { explicit.contains(key) }

    /// Every value of `key`, in command-line order.
    public func values(_ key: String) -> [ArgumentValue] { storage[key] ?? [] }

    /// The last value of `key`.
    public func value(_ key: String) -> ArgumentValue? { storage[key]?.last }

    /// True when the flag `key` was given.
    public func flag(_ key: String) -> Bool {
        if case .bool(true)? = value(key) { return true }
        return false
    }

    /// The text of `key` (for string-typed values).
    public func string(_ key: String) -> String? {
        if case .string(let s)? = value(key) { return s }
        return nil
    }

    /// Every text value of a repeating `key`.
    public func strings(_ key: String) -> [String] {
        values(key).compactMap { if case .string(let s) = $0 { return s } else { return nil } }
    }

    /// The integer `key`.
    public func int(_ key: String) -> Int? {
        if case .int(let i)? = value(key) { return i }
        return nil
    }

    /// The number `key` (integers are converted).
    public func double(_ key: String) -> Double? {
        switch value(key) {
        case .double(let d)?: return d
        case .int(let i)?: return Double(i)
        default: return nil
        }
    }
}

/// A successful parse that selects a command to run.
public struct Invocation: Sendable, Equatable {
    /// The subcommand names below the root, e.g. ["adapter", "power"].
    public var path: [String]
    /// The program name followed by `path`, e.g. "peerlink adapter power".
    public var commandName: String
    /// The parsed values of the command and its ancestors.
    public var values: ParsedValues

    /// Creates an invocation.
    public init(path: [String], commandName: String, values: ParsedValues) {
        self.path = path
        self.commandName = commandName
        self.values = values
    }
}

/// What parsing a command line produced.
public enum ParseResult: Sendable, Equatable {
    /// Run the selected command.
    case run(Invocation)
    /// Print this help text (for `--help`, `-h` or `help COMMAND`) and exit successfully.
    case help(String)
    /// Print this version and exit successfully.
    case version(String)
}

/// A command line the parser rejected: the message, the command it concerned and a hint.
public struct UsageError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What was wrong, naming the offending argument, e.g. "unknown option '--frob'".
    public var message: String
    /// The command being parsed, from the program name, e.g. ["peerlink", "adapter", "power"].
    public var commandPath: [String]

    /// Creates an error.
    public init(_ message: String, commandPath: [String]) {
        self.message = message
        self.commandPath = commandPath
    }

    /// "Run 'peerlink adapter power --help'."
    public var hint: String { "Run '\(commandPath.joined(separator: " ")) --help'." }

    /// "error: <message>\nRun '... --help'."
    public var description: String { "error: \(message)\n\(hint)" }
}
