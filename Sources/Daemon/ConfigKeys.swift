/// One key of the configuration file, as a reader of `peerlink.conf(5)` needs it.
public struct ConfigKey: Sendable, Equatable {
    /// The full name: `socket`, or `section.key` for a key written under `[section]`.
    public let name: String
    /// What values are accepted, in words ("whole number 1-4096").
    public let values: String
    /// The default, as written in the file, or in words when it is computed ("the host name").
    public let defaultValue: String
    /// What it does: one or more sentences.
    public let meaning: String
    /// True when a SIGHUP reload applies a new value at once.
    public let live: Bool

    init(_ name: String, values: String, default defaultValue: String, _ meaning: String, live: Bool = false) {
        self.name = name
        self.values = values
        self.defaultValue = defaultValue
        self.meaning = meaning
        self.live = live
    }

    /// The section (`agent` for `agent.policy`), or nil for a top-level key.
    public var section: String? {
        guard let dot = name.firstIndex(of: ".") else { return nil }
        return String(name[..<dot])
    }
}

/// Every key the configuration file accepts, in the order they are documented.
///
/// The parser's lists of known keys (`DaemonConfig.knownKeys`, `registeredSectionKeys`,
/// `liveKeys`) are derived from this table, and `peerlink.conf(5)` is generated from it, so
/// a key cannot be accepted without being documented, nor documented without being
/// accepted. Values of section keys are checked by the capability that owns them
/// (`AgentParams`, `PeerParams`); top-level ones by `ConfigParser`.
public enum ConfigKeys {
    /// The table.
    public static let all: [ConfigKey] = [
        ConfigKey("socket", values: "absolute path, at most 107 bytes", default: "/run/peerlink/control.sock",
                  "The control socket the peerlink CLI connects to."),
        ConfigKey("socket_group", values: "group name", default: "the daemon's group",
                  "Group that owns the control socket, so its members may use the CLI. The group must exist when the file is read, and the daemon must be in it (or run as root; under the packaged unit only its own group, peerlink). Empty: the daemon's own group."),
        ConfigKey("socket_mode", values: "octal 0000-0777 (0660, 660 or 0o660)", default: "0660",
                  "Permission bits of the control socket."),
        ConfigKey("adapter", values: "hciN or XX:XX:XX:XX:XX:XX", default: "the first adapter",
                  "The Bluetooth adapter to use by default. HCI0 is read as hci0; addresses are stored uppercase. Either follows its controller when it comes back under another hciN (a name, until another controller takes it). Empty: the first adapter that can be powered on."),
        ConfigKey("state_dir", values: "absolute path", default: "/var/lib/peerlink",
                  "Where persistent state is kept (the peer identity, trusted peers, DNS-SD names)."),
        ConfigKey("log_level", values: "error, warning (or warn), notice, info, debug", default: "info",
                  "The most verbose messages logged. Logs go to standard error with a <N> priority prefix, which journald records as the message priority.",
                  live: true),
        ConfigKey("bus", values: "system, session or a D-Bus address", default: "system",
                  "The D-Bus bus BlueZ is reached on. An address is transport:key=value,..., e.g. unix:path=/run/dbus/system_bus_socket; several may be joined with ';'."),
        ConfigKey("max_clients", values: "whole number 1-4096", default: "256",
                  "Most control clients connected at once; further connections are refused."),
        ConfigKey("max_request_bytes", values: "whole number 1024-67108864", default: "1048576",
                  "Longest request line a client may send."),
        ConfigKey("request_timeout", values: "seconds 0.1-3600", default: "30",
                  "How long a client may take to finish a request line once it has started sending it. An idle connection is not timed out."),
        ConfigKey("watchdog", values: "yes or no (also true/false, on/off, 1/0)", default: "yes",
                  "Send WATCHDOG=1 to systemd when the unit sets WatchdogSec= (systemd passes WATCHDOG_USEC). A unit that sets it gets the pings even with no (a warning says so: systemd would kill a silent daemon); turn them off with WatchdogSec=0 in a drop-in."),
        ConfigKey("agent.policy", values: "just-works, confirm, passkey NNNNNN, reject", default: "just-works",
                  "How the built-in pairing agent answers pairing requests."),
        ConfigKey("agent.timeout", values: "seconds 1-600", default: "30",
                  "How long an agent.request event waits for 'peerlink agent confirm'."),
        ConfigKey("peer.name", values: "1-63 bytes of UTF-8, no control characters", default: "the host name",
                  "The display name peers see."),
        ConfigKey("peer.port", values: "0-65535", default: "0",
                  "TCP port for peer sessions (0: any; 'peerlink peer identity' shows it)."),
        ConfigKey("peer.listen", values: "all, loopback, off", default: "all",
                  "Listen on every address (IPv6 and IPv4), on 127.0.0.1 only, or not at all (this board only dials)."),
        ConfigKey("peer.encryption", values: "required, optional, none", default: "required",
                  "MultipeerConnectivity's encryption preference: whether sessions must, may or must not use TLS."),
        ConfigKey("peer.accept", values: "ask, trusted, all, none", default: "ask",
                  "Who answers invitations: a client (ask), the daemon for trusted peers, for everyone, or nobody."),
        ConfigKey("peer.max_peers", values: "1-64", default: "8",
                  "Sessions at once; more invitations are declined with 'full'."),
        ConfigKey("peer.ping_interval", values: "seconds 0.2-60", default: "2",
                  "Quiet time before a ping."),
        ConfigKey("peer.missed_pings", values: "1-20", default: "3",
                  "Unanswered pings before a peer is reported lost."),
        ConfigKey("peer.accept_resources", values: "ask, trusted, all, none", default: "ask",
                  "Who takes resources peers send: a client (ask), the daemon for trusted peers, for everyone, or nobody."),
        ConfigKey("peer.max_resource_bytes", values: "bytes (at least 1), or with K, M, G, T (powers of 1024)", default: "4G",
                  "The largest resource accepted; a larger offer is declined with 'too-large'."),
        ConfigKey("peer.transfer_idle_timeout", values: "seconds 1-3600", default: "60",
                  "A resource being received that gets no data this long while the peer could send it is cancelled with 'timeout'; so is one being sent that the peer's windows hold back this long while nothing moves, or whose verdict does not come within this and a second more for every 4 MiB once the peer has every byte; what arrived is kept for a resume."),
        ConfigKey("peer.inbox_dir", values: "an absolute path", default: "<state_dir>/peer/inbox",
                  "Where received resources are saved (transfers in progress under .part/)."),
    ]

    /// The key called `name`.
    public static func key(named name: String) -> ConfigKey? {
        all.first { $0.name == name }
    }
}
