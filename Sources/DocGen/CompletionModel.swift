import Arguments

/// What the shell completion scripts know about a command tree, flattened per command path.
///
/// Both scripts (bash and zsh) are generated from this one model, which is read from the same
/// `Command` tree the parser uses, so a new command or option is completed as soon as it is
/// in the table.
struct CompletionModel {
    /// What a value (an option's or a positional argument's) is completed with.
    enum ValueKind: Equatable {
        /// A flag: no value.
        case flag
        /// Free text: nothing is offered.
        case text
        /// A path.
        case file
        /// One of these words.
        case choices([String])
        /// Asked of the program at completion time (`CompletionKind.dynamic`).
        case dynamic(String)

        /// The word the scripts use: "flag", "text", "file", "choice:a b", "dynamic:adapter".
        var word: String {
            switch self {
            case .flag: "flag"
            case .text: "text"
            case .file: "file"
            case .choices(let values): "choice:" + values.joined(separator: " ")
            case .dynamic(let name): "dynamic:" + name
            }
        }

        init(_ parser: ValueParser) {
            if let choices = parser.choices, !choices.isEmpty {
                self = .choices(choices)
                return
            }
            switch parser.completion {
            case .none: self = .text
            case .file: self = .file
            case .dynamic(let name): self = .dynamic(name)
            }
        }
    }

    /// One option as typed: `--name` (and `-s`), its help, and what follows it.
    struct OptionEntry {
        var names: [String]
        var help: String
        var value: ValueKind
    }

    /// One command, group or leaf, by its path below the program ("" for the program itself).
    struct Node {
        /// "adapter power"; "" for the root.
        var path: String
        /// Subcommands with their abstracts (the root also has "help").
        var subcommands: [(name: String, abstract: String)]
        /// Every option accepted after this path: its own, then the inherited ones that it
        /// does not shadow, then -h/--help (and --version at the root).
        var options: [OptionEntry]
        /// The kinds of the positional arguments, in order (leaves only).
        var arguments: [ValueKind]
        /// True when the last positional takes every remaining word.
        var lastRepeats: Bool
    }

    /// The program's name.
    let program: String
    /// Every node, depth first, in the table's order.
    let nodes: [Node]

    /// Reads the tree under `root`.
    init(root: Command) {
        program = root.name
        var nodes: [Node] = []
        Self.walk([root], into: &nodes)
        self.nodes = nodes
    }

    /// The dynamic value names used anywhere in the tree ("adapter", "uuid").
    var dynamicNames: [String] {
        var names: [String] = []
        for node in nodes {
            for kind in node.options.map(\.value) + node.arguments {
                if case .dynamic(let name) = kind, !names.contains(name) { names.append(name) }
            }
        }
        return names
    }

    private static func walk(_ chain: [Command], into nodes: inout [Node]) {
        let command = chain.last!
        let isRoot = chain.count == 1
        var seen = Set<String>()
        var options: [OptionEntry] = []
        for ancestor in chain.reversed() {
            for option in ancestor.options where !seen.contains(option.name) {
                seen.insert(option.name)
                var names = ["--" + option.name]
                if let short = option.short { names.append("-\(short)") }
                let value: ValueKind
                switch option.kind {
                case .flag: value = .flag
                case .value(let parser, _, _, _): value = ValueKind(parser)
                }
                options.append(OptionEntry(names: names, help: option.help, value: value))
            }
        }
        options.append(OptionEntry(names: ["--help", "-h"], help: "Show help information.", value: .flag))
        if isRoot, command.version != nil {
            options.append(OptionEntry(names: ["--version"], help: "Show the version.", value: .flag))
        }
        var subcommands = command.subcommands.map { (name: $0.name, abstract: $0.abstract) }
        if isRoot, !subcommands.isEmpty { subcommands.append((name: "help", abstract: "Show help for a command.")) }
        nodes.append(Node(path: chain.dropFirst().map(\.name).joined(separator: " "),
                          subcommands: subcommands, options: options,
                          arguments: command.arguments.map { ValueKind($0.parser) },
                          lastRepeats: command.arguments.last?.isRepeating ?? false))
        for sub in command.subcommands {
            walk(chain + [sub], into: &nodes)
        }
    }
}

/// How a dynamic value is listed at completion time: a command of the program run with
/// `--json`, and the JSON keys whose string values are offered.
struct DynamicSource {
    /// The command's words, e.g. ["adapter", "list"].
    var command: [String]
    /// The keys, e.g. ["name", "address"].
    var keys: [String]

    /// The sources `peerlink`'s completions know. The generator refuses a tree that uses a
    /// name missing here, so a new kind cannot be completed with nothing by mistake.
    static let peerlink: [String: DynamicSource] = [
        "adapter": DynamicSource(command: ["adapter", "list"], keys: ["name", "address"]),
        "uuid": DynamicSource(command: ["gatt", "list"], keys: ["uuid"]),
    ]
}

/// Quoting for the generated shell scripts.
enum Shell {
    /// `text` in single quotes, safe for bash and zsh.
    static func quote(_ text: String) -> String {
        "'" + text.replacingOccurrences(of: "'", with: "'\\''") + "'"
    }
}
