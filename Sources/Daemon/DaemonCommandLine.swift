import Arguments
import FoundationEssentials
import SystemKit
import Glibc
import Logging
import DBus

/// `peerlinkd`'s command line: flags that override the configuration file.
public enum DaemonCommandLine {
    /// The command description (also the source of `--help`).
    public static let command = Command(
        "peerlinkd",
        abstract: "PeerLink daemon: BLE peripheral and central, DNS-SD and peer sessions over BlueZ and Avahi.",
        discussion: """
        Runs in the foreground and logs to standard error with journald priority prefixes.
        Settings come from the configuration file (default \(DaemonConfig.defaultPath); every key
        is optional) and the flags below, which win over the file. Control it with 'peerlink'
        through the control socket. SIGTERM or SIGINT stops it cleanly; SIGHUP re-reads the file.
        Several daemons can run side by side, each with its own --socket, --adapter and --state-dir.
        """,
        options: [
            .value("config", valueName: "file", parser: .nonEmptyString,
                   help: "Configuration file (default \(DaemonConfig.defaultPath); a missing default file means all defaults)."),
            .value("socket", valueName: "path", parser: .custom(helpNote: "an absolute path") { text throws(ValueError) in
                // As the file's `socket` key: relative, it would be taken from / under systemd;
                // too long, the start failed with a status systemd retries.
                guard text.hasPrefix("/"), text.utf8.count <= UnixSocket.maxPathLength, !text.contains("\0") else {
                    throw ValueError("expected an absolute path of at most \(UnixSocket.maxPathLength) bytes")
                }
                return .string(text)
            }, help: "Control socket path (default /run/peerlink/control.sock)."),
            .value("adapter", valueName: "hciN|address", parser: .custom(helpNote: "hciN or XX:XX:XX:XX:XX:XX") { text throws(ValueError) in
                guard let v = validateAdapterSelector(text) else { throw ValueError("expected hciN or an address like 00:AA:01:00:00:00") }
                return .string(v)
            }, help: "The adapter this daemon uses by default (default: the first adapter)."),
            .value("state-dir", valueName: "dir", parser: .custom(helpNote: "an absolute path") { text throws(ValueError) in
                // As the file's `state_dir` key (relative, it was blamed on peer.inbox_dir).
                guard text.hasPrefix("/"), !text.contains("\0") else { throw ValueError("expected an absolute path") }
                return .string(text)
            }, help: "Directory for persistent state (default /var/lib/peerlink)."),
            .value("bus", valueName: "system|session|address", parser: .custom(helpNote: "system, session or a D-Bus address") { text throws(ValueError) in
                guard BusChoice(parsing: text) != nil else {
                    let why = text.contains(":") ? BusChoice.addressProblem(text).map { " (\($0))" } ?? "" : ""
                    throw ValueError("expected system, session or a D-Bus address like unix:path=/run/dbus/system_bus_socket\(why)")
                }
                return .string(text)
            }, help: "The D-Bus bus where bluetoothd is (default system)."),
            // The names the file's `log_level` takes (`warn` too, any case).
            .value("log-level", valueName: "level", parser: ValueParser(helpNote: "values: \(Self.levelNames)", choices: LogLevel.allCases.map(\.name)) {
                text throws(ValueError) in
                guard let level = LogLevel(name: text) else { throw ValueError("expected one of: \(Self.levelNames) (or warn)") }
                return .string(level.name)
            }, help: "Log level (default info)."),
        ],
        version: PeerlinkDaemon.version)

    private static let levelNames = LogLevel.allCases.map(\.name).joined(separator: ", ")

    /// Parses arguments (without the program name), runs the daemon, and returns the exit code:
    /// 0 after a clean stop, 1 when it cannot start (the machine refused: a read-only state
    /// directory, a port in use) or fails while running, 2 for a usage or configuration error.
    /// Raises the soft RLIMIT_NOFILE to the hard one (1024 is the usual soft default, systemd's
    /// too, while its hard one is 524288): every peer, client and watch is a descriptor, and a
    /// process that runs out is stopped by libdispatch. The peer listener keeps a reserve below
    /// whatever the limit is (`PeerNode`).
    static func raiseDescriptorLimit() {
        var limit = rlimit()
        let resource = __rlimit_resource_t(RLIMIT_NOFILE.rawValue)
        guard getrlimit(resource, &limit) == 0, limit.rlim_cur < limit.rlim_max else { return }
        limit.rlim_cur = limit.rlim_max
        _ = setrlimit(resource, &limit)
    }

    public static func main(_ arguments: [String]) async -> Int32 {
        let invocation: Invocation
        do {
            switch try CommandParser(root: command).parse(arguments) {
            case .help(let text):
                print(text)
                return 0
            case .version(let v):
                print("peerlinkd \(v)")
                return 0
            case .run(let inv):
                invocation = inv
            }
        } catch {
            try? writeAll(2, Array("peerlinkd: \(error.message)\n\(error.hint)\n".utf8))
            return 2
        }
        let v = invocation.values
        var overrides = DaemonOverrides()
        overrides.configPath = v.string("config")
        overrides.socketPath = v.string("socket")
        overrides.adapter = v.string("adapter")
        overrides.stateDirectory = v.string("state-dir")
        overrides.logLevel = v.string("log-level").flatMap(LogLevel.init(name:))
        overrides.bus = v.string("bus").flatMap(BusChoice.init(parsing:))
        raiseDescriptorLimit()
        // A transfer's chunks come and go faster than the kernel should be asked for pages.
        ProcessMemory.keepFreed(upTo: 4 << 20)
        let daemon: PeerlinkDaemon
        do {
            // libdbus-1 is loaded with dlopen (Sources/CDBus/shim.h); the configuration's D-Bus
            // names are validated with it before the bus is reached, so load it first.
            try DBusLibrary.require()
            var config = try DaemonConfig.load(path: overrides.configPath)
            config.apply(overrides)
            daemon = try PeerlinkDaemon(config: config, configPath: overrides.configPath, overrides: overrides)
        } catch let error as ConfigError {
            try? writeAll(2, Array("<3>peerlinkd: configuration error: \(error)\n".utf8))
            return 2
        } catch {
            // What the machine refused (a read-only or full state directory, a port or socket
            // in use): not the configuration's fault, and it may pass, so a restart may help.
            try? writeAll(2, Array("<3>peerlinkd: cannot start: \(error)\n".utf8))
            return 1
        }
        do {
            try await daemon.run(signals: signalStream([.terminate, .interrupt, .hangup]))
            return 0
        } catch {
            try? writeAll(2, Array("<2>peerlinkd: \(error)\n".utf8))
            return 1
        }
    }
}
