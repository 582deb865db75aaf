import Arguments
import Control

/// Every `peerlink` command, in one place.
///
/// To add a command: write a `CLICommand` (usually `.call` with a request builder and a
/// renderer, in a file for its area such as `GATTCommands.swift`) and list it in `commands`.
/// Groups (`adapter`, `gatt`, ...) need a line in `groups` for their abstract.
public enum CommandTable {
    /// The abstracts of command groups, by path.
    public static let groups: [[String]: String] = [
        ["adapter"]: "Inspect and control Bluetooth adapters.",
        ["gatt"]: "Serve GATT applications (the peripheral role).",
        ["advertise"]: "Advertise over LE.",
        ["agent"]: "The built-in pairing agent.",
        ["dnssd"]: DNSSDCommands.groupAbstract,
        ["peer"]: PeerCommands.groupAbstract,
    ]

    /// The leaf commands, in the order help lists them.
    public static let commands: [CLICommand] = [
        StatusCommands.status,
        AdapterCommands.list,
        AdapterCommands.power,
        WatchCommand.watch,
        PeripheralCommands.register,
        PeripheralCommands.unregister,
        PeripheralCommands.list,
        PeripheralCommands.set,
        PeripheralCommands.notify,
        PeripheralCommands.stream,
        PeripheralCommands.advertiseStart,
        PeripheralCommands.advertiseStop,
        PeripheralCommands.advertiseList,
        PeripheralCommands.agentPolicy,
        PeripheralCommands.agentConfirm,
        CentralCommands.scan,
        CentralCommands.connect,
        CentralCommands.disconnect,
        CentralCommands.devices,
        CentralCommands.services,
        CentralCommands.read,
        CentralCommands.write,
        CentralCommands.subscribe,
        CentralCommands.pair,
        CentralCommands.trust,
        CentralCommands.forget,
        DNSSDCommands.publish,
        DNSSDCommands.unpublish,
        DNSSDCommands.update,
        DNSSDCommands.list,
        DNSSDCommands.browse,
        DNSSDCommands.resolve,
        DNSSDCommands.types,
        PeerCommands.identity,
        PeerCommands.connect,
        PeerCommands.invitations,
        PeerCommands.accept,
        PeerCommands.decline,
        PeerCommands.sessions,
        PeerCommands.send,
        PeerStreamCommand.command,
        PeerTransferCommands.sendFile,
        PeerTransferCommands.sendImage,
        PeerTransferCommands.transfers,
        PeerTransferCommands.cancel,
        PeerTransferCommands.acceptResource,
        PeerTransferCommands.declineResource,
        PeerTransferCommands.inbox,
        PeerByteStreamCommands.open,
        PeerByteStreamCommands.accept,
        PeerByteStreamCommands.decline,
        PeerByteStreamCommands.close,
        PeerByteStreamCommands.list,
        PeerCommands.disconnect,
        PeerCommands.trust,
        PeerCommands.forget,
        PeerCommands.trusted,
        PeerDiscoveryCommands.advertise,
        PeerDiscoveryCommands.browse,
        PeerDiscoveryCommands.invite,
        PeerDiscoveryCommands.watch,
    ]

    /// The options every command accepts (before or after the command name).
    public static let globalOptions: [Option] = [
        .value("socket", valueName: "path", parser: ValueParser.string.completing(.file),
               help: "The daemon's control socket (default: $\(ControlDefaults.socketEnvironmentVariable), else \(ControlDefaults.socketPath))."),
        .flag("json", help: "Print results as one JSON object per line (a daemon error as {\"error\": {...}})."),
        .flag("verbose", help: "On an error from the daemon, also print its JSON-RPC code, name and data."),
        .value("timeout", valueName: "seconds", parser: .seconds, default: "30",
               help: "Seconds to wait for each reply from the daemon."),
    ]

    /// The command tree built from `commands` and `groups`.
    public static let root: Command = buildRoot()

    /// The command at `path`.
    public static func command(at path: [String]) -> CLICommand? {
        commands.first { $0.path == path }
    }

    private static func buildRoot() -> Command {
        var root = Command("peerlink", abstract: "Control the PeerLink daemon (peerlinkd).",
                           discussion: """
                               Talks JSON-RPC to peerlinkd over its control socket. Exit status: 0 success, \
                               1 the daemon reported an error, 2 usage error, 3 the daemon is unreachable \
                               or did not reply.
                               """,
                           options: globalOptions, version: "peerlink \(PeerlinkCLI.version)")
        for definition in commands {
            insert(definition, into: &root, depth: 0)
        }
        return root
    }

    private static func insert(_ definition: CLICommand, into parent: inout Command, depth: Int) {
        let name = definition.path[depth]
        if depth == definition.path.count - 1 {
            parent.subcommands.append(Command(name, abstract: definition.abstract, discussion: definition.discussion,
                                              options: definition.options, arguments: definition.arguments))
            return
        }
        let groupPath = Array(definition.path[...depth])
        if !parent.subcommands.contains(where: { $0.name == name }) {
            parent.subcommands.append(Command(name, abstract: groups[groupPath] ?? ""))
        }
        let index = parent.subcommands.firstIndex { $0.name == name }!
        insert(definition, into: &parent.subcommands[index], depth: depth + 1)
    }
}
