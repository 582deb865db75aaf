#if canImport(Glibc)
import Glibc
#endif
import FoundationEssentials
import Logging
import SystemKit

/// Which D-Bus bus the daemon talks to BlueZ on.
public enum BusChoice: Sendable, Equatable, CustomStringConvertible {
    /// The system bus (where BlueZ lives).
    case system
    /// The user's session bus (for tests and development).
    case session
    /// An explicit D-Bus server address, e.g. `unix:path=/run/dbus/system_bus_socket`.
    case address(String)

    /// Parses "system", "session" (any case) or a D-Bus address (`transport:key=value,...`).
    public init?(parsing text: String) {
        switch text.lowercased() {
        case "system": self = .system
        case "session": self = .session
        default:
            guard BusChoice.isAddress(text) else { return nil }
            self = .address(text)
        }
    }

    /// "system", "session" or the address.
    public var description: String {
        switch self {
        case .system: "system"
        case .session: "session"
        case .address(let a): a
        }
    }

    /// Checks the shape of a D-Bus address: `;`-separated `transport:` entries with an
    /// alphanumeric transport name and `key=value` pairs after it.
    static func isAddress(_ text: String) -> Bool { addressProblem(text) == nil }

    /// What is wrong with a D-Bus address for connecting to a bus (nil: nothing): its shape,
    /// and for the transports a board uses, the keys libdbus needs to connect (a typo such as
    /// `unix:pth=…` was taken and retried every 30 s for ever, naming no key).
    static func addressProblem(_ text: String) -> String? {
        let entries = text.split(separator: ";", omittingEmptySubsequences: false)
        guard !text.isEmpty else { return "the address is empty" }
        for entry in entries {
            guard let colon = entry.firstIndex(of: ":") else { return "\"\(entry)\" has no transport (transport:key=value,...)" }
            let transport = entry[..<colon]
            guard !transport.isEmpty,
                  transport.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-") })
            else { return "\"\(transport)\" is not a transport name" }
            var keys: [Substring: Substring] = [:]
            for pair in entry[entry.index(after: colon)...].split(separator: ",") {
                guard let eq = pair.firstIndex(of: "="), eq != pair.startIndex else { return "\"\(pair)\" is not key=value" }
                let value = pair[pair.index(after: eq)...]
                guard !value.isEmpty else { return "\(pair[..<eq]) has no value" }
                keys[pair[..<eq]] = value
            }
            switch transport {
            case "unix":
                let found = ["path", "abstract"].filter { keys[Substring($0)] != nil }
                guard found.count == 1 else {
                    return found.isEmpty ? "a unix address needs path= or abstract= (got \(keys.keys.sorted().joined(separator: ", ")))"
                                         : "a unix address takes one of path= and abstract=, not both"
                }
            case "tcp", "nonce-tcp":
                guard let port = keys["port"] else { return "a \(transport) address needs port=" }
                guard let n = Int(port), (1...65_535).contains(n) else { return "port \(port) is not 1-65535" }
            default:
                break  // unixexec, autolaunch, systemd, launchd: libdbus checks them
            }
        }
        return nil
    }
}

/// Returns the normalised form of an adapter selector, or nil if it is neither `hciN` nor a
/// Bluetooth address: "HCI0" gives "hci0", "00:1a:7d:da:71:13" gives "00:1A:7D:DA:71:13".
public func validateAdapterSelector(_ s: String) -> String? {
    let lower = s.lowercased()
    if lower.hasPrefix("hci") {
        let digits = lower.dropFirst(3)
        guard !digits.isEmpty, digits.count <= 5, digits.allSatisfy({ $0.isASCII && $0.isNumber }),
              let index = Int(digits), index <= Int(UInt16.max) else { return nil }
        return "hci\(index)"
    }
    let groups = s.split(separator: ":", omittingEmptySubsequences: false)
    guard groups.count == 6,
          groups.allSatisfy({ $0.count == 2 && $0.allSatisfy { $0.isASCII && $0.isHexDigit } })
    else { return nil }
    return s.uppercased()
}

/// An error in the configuration file: where, which key, and what was wrong.
///
/// Printed as `/etc/peerlink/peerlink.conf:7: max_clients: expected a whole number from 1 to
/// 4096, got "lots"`; the line and key are left out when they do not apply.
public struct ConfigError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The file's path (as given, or the default path).
    public let file: String
    /// The 1-based line number, when the error is on one line.
    public let line: Int?
    /// The key involved (with its section prefix), if any.
    public let key: String?
    /// What is wrong, as a sentence fragment.
    public let reason: String

    /// Creates an error.
    public init(file: String, line: Int? = nil, key: String? = nil, reason: String) {
        self.file = file
        self.line = line
        self.key = key
        self.reason = reason
    }

    /// "file:line: key: reason".
    public var description: String {
        var text = file
        if let line { text += ":\(line)" }
        text += ": "
        if let key { text += "\(key): " }
        return text + reason
    }
}

/// Values given on the command line; each one set overrides the file.
public struct DaemonOverrides: Sendable, Equatable {
    /// `--config FILE`: the file to read instead of `DaemonConfig.defaultPath`.
    public var configPath: String?
    /// `--socket PATH`.
    public var socketPath: String?
    /// `--adapter hciN|ADDR` (already normalised with `validateAdapterSelector`).
    public var adapter: String?
    /// `--state-dir DIR`.
    public var stateDirectory: String?
    /// `--log-level L`.
    public var logLevel: LogLevel?
    /// `--bus system|session|ADDRESS`.
    public var bus: BusChoice?

    /// No overrides.
    public init() {}
}

/// The daemon's settings: defaults, then the configuration file, then command-line overrides.
public struct DaemonConfig: Sendable, Equatable {
    /// Where the daemon looks for its file when `--config` is not given.
    public static let defaultPath = "/etc/peerlink/peerlink.conf"
    /// The largest configuration file accepted.
    public static let maximumFileSize = 1 << 20

    /// `socket`: the control socket's path.
    public var socketPath: String = "/run/peerlink/control.sock"
    /// `socket_group`: the group owning the control socket (nil: the daemon's group).
    public var socketGroup: String?
    /// `socket_mode`: the control socket's permission bits.
    public var socketMode: UInt32 = 0o660
    /// `adapter`: `hciN` or an uppercase address (nil: the first adapter that can be powered).
    public var adapter: String?
    /// `state_dir`: where persistent state is kept.
    public var stateDirectory: String = "/var/lib/peerlink"
    /// `log_level`: the most verbose level logged.
    public var logLevel: LogLevel = .info
    /// `bus`: the D-Bus bus to use.
    public var bus: BusChoice = .system
    /// `max_clients`: the most control clients connected at once.
    public var maxClients: Int = 256
    /// `max_request_bytes`: the longest request line a client may send.
    public var maxRequestBytes: Int = 1 << 20
    /// `request_timeout`: seconds a client has to finish a request line it has started.
    public var requestTimeout: Double = 30
    /// `watchdog`: whether to send `WATCHDOG=1` when systemd sets `WATCHDOG_USEC`.
    public var watchdog: Bool = true
    /// Values of keys in `registeredSectionKeys`, by full key (`section.key`), as written.
    public var extra: [String: String] = [:]
    /// The line each of `extra`'s keys was read from (for errors found in their values).
    public var extraLines: [String: Int] = [:]

    /// Section keys (`section.key`) accepted into `extra`: those of `ConfigKeys.all`. Later
    /// modules that need settings of their own add their keys there (a section is known when
    /// one of its keys is listed); every other key is an error, so typos never pass silently.
    /// Their values are checked by the capability that owns them, when the daemon starts.
    public static let registeredSectionKeys: Set<String> = Set(ConfigKeys.all.filter { $0.section != nil }.map(\.name))

    /// The top-level keys, in the order they are documented (`ConfigKeys.all`).
    public static let knownKeys: [String] = ConfigKeys.all.filter { $0.section == nil }.map(\.name)

    /// Keys whose new value a SIGHUP reload applies at once; a change to any other key is
    /// reported as needing a restart.
    public static let liveKeys: Set<String> = Set(ConfigKeys.all.filter(\.live).map(\.name))

    /// The defaults.
    public init() {}

    /// Applies command-line overrides (they win over the file).
    public mutating func apply(_ overrides: DaemonOverrides) {
        if let v = overrides.socketPath { socketPath = v }
        if let v = overrides.adapter { adapter = v }
        if let v = overrides.stateDirectory { stateDirectory = v }
        if let v = overrides.logLevel { logLevel = v }
        if let v = overrides.bus { bus = v }
    }

    /// The file keys whose values differ between `self` and `other`, in documented order
    /// (section keys last, sorted); a reload compares the running and the re-read config.
    public func changedKeys(comparedTo other: DaemonConfig) -> [String] {
        var keys: [String] = []
        if socketPath != other.socketPath { keys.append("socket") }
        if socketGroup != other.socketGroup { keys.append("socket_group") }
        if socketMode != other.socketMode { keys.append("socket_mode") }
        if adapter != other.adapter { keys.append("adapter") }
        if stateDirectory != other.stateDirectory { keys.append("state_dir") }
        if logLevel != other.logLevel { keys.append("log_level") }
        if bus != other.bus { keys.append("bus") }
        if maxClients != other.maxClients { keys.append("max_clients") }
        if maxRequestBytes != other.maxRequestBytes { keys.append("max_request_bytes") }
        if requestTimeout != other.requestTimeout { keys.append("request_timeout") }
        if watchdog != other.watchdog { keys.append("watchdog") }
        let extraKeys = Set(extra.keys).union(other.extra.keys)
        keys += extraKeys.filter { extra[$0] != other.extra[$0] }.sorted()
        return keys
    }

    /// Reads the configuration at `path`, or at `defaultPath` when `path` is nil.
    ///
    /// A missing default file gives the defaults; a file named explicitly must exist and be
    /// readable. `/dev/null` reads as an empty file.
    public static func load(path: String? = nil) throws(ConfigError) -> DaemonConfig {
        let file = path ?? defaultPath
        let bytes: [UInt8]
        do {
            bytes = try readFile(file, limit: maximumFileSize)
        } catch let error as SystemError {
            if path == nil && error.code == ENOENT { return DaemonConfig() }
            throw ConfigError(file: file, reason: "cannot read the file: \(error.reason)")
        } catch {
            throw ConfigError(file: file, reason: "cannot read the file: \(error)")
        }
        let config = try parse(bytes: bytes, file: file)
        try config.checkSections(file: file)
        return config
    }

    /// The section keys' values, checked as the capabilities that take them will check them:
    /// at start, so an error names the file and the line (it named "configuration" only), and
    /// at a reload, so a value that would keep the next start from happening (after an
    /// upgrade, or a reboot, with RestartPreventExitStatus) is refused now, the running
    /// configuration kept.
    func checkSections(file: String) throws(ConfigError) {
        do {
            _ = try AgentCapability.settings(extra)
            _ = try PeerCapability.settings(extra)
            _ = try PeerCapability.inboxSettings(extra, stateDirectory: stateDirectory)
        } catch {
            throw ConfigError(file: file, line: error.key.flatMap { extraLines[$0] }, key: error.key, reason: error.reason)
        }
    }

    /// Parses configuration text; `file` names it in errors.
    public static func parse(_ text: String, file: String) throws(ConfigError) -> DaemonConfig {
        guard text.utf8.count <= maximumFileSize else {
            throw ConfigError(file: file, reason: "the file is larger than 1 MiB")
        }
        return try ConfigParser(file: file, registeredKeys: registeredSectionKeys).parse(text)
    }

    /// Checks size and UTF-8 before parsing raw file contents.
    package static func parse(bytes: [UInt8], file: String) throws(ConfigError) -> DaemonConfig {
        guard bytes.count <= maximumFileSize else {
            throw ConfigError(file: file, reason: "the file is larger than 1 MiB")
        }
        guard let text = String(validating: bytes, as: UTF8.self) else {
            var line = 1
            for chunk in bytes.split(separator: 0x0A, omittingEmptySubsequences: false) {
                if String(validating: chunk, as: UTF8.self) == nil { break }
                line += 1
            }
            throw ConfigError(file: file, line: line, reason: "the file is not valid UTF-8")
        }
        return try parse(text, file: file)
    }

    /// Reads at most `limit + 1` bytes of `path` (one more than allowed, so an oversized file
    /// is detected without reading all of it).
    private static func readFile(_ path: String, limit: Int) throws -> [UInt8] {
        let fd = try syscall("open", context: path) { open(path, O_RDONLY | O_CLOEXEC) }
        defer { closeQuietly(fd) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        while bytes.count <= limit {
            let n = try chunk.withUnsafeMutableBytes { buf in
                try syscall("read", context: path) { read(fd, buf.baseAddress, buf.count) }
            }
            if n == 0 { break }
            bytes += chunk[..<n]
        }
        return bytes
    }
}

/// The line-oriented parser behind `DaemonConfig.parse`.
struct ConfigParser {
    let file: String
    let registeredKeys: Set<String>

    /// Parses `text` into a config, starting from the defaults.
    func parse(_ text: String) throws(ConfigError) -> DaemonConfig {
        var config = DaemonConfig()
        var section: String?
        var firstSeen: [String: Int] = [:]
        var body = Substring(text)
        if body.first == "\u{FEFF}" { body = body.dropFirst() }
        // Split on "\n" scalars (not Characters, where "\r\n" is one) so CRLF files work.
        let lines = body.unicodeScalars.split(separator: "\n", omittingEmptySubsequences: false)
        for (index, scalars) in lines.enumerated() {
            let number = index + 1
            let line = trim(Substring(scalars))
            if isCommentOrEmpty(line) { continue }
            if line.unicodeScalars.first == "[" {
                section = try sectionName(line, line: number)
                continue
            }
            let (rawKey, value) = try keyAndValue(line, line: number)
            let key = section.map { "\($0).\(rawKey)" } ?? rawKey
            if let first = firstSeen[key] {
                throw ConfigError(file: file, line: number, key: key,
                                  reason: "duplicate key (first set on line \(first))")
            }
            firstSeen[key] = number
            try assign(key, value, to: &config, line: number)
        }
        return config
    }

    // MARK: Lines

    // Every check of the line's syntax looks at code points, never Characters: a space, "=",
    // '"', "#" or "]" followed by a combining mark is one Character that is none of them.

    private func trim(_ s: Substring) -> Substring {
        var v = s.unicodeScalars[...]
        while let c = v.first, c == " " || c == "\t" || c == "\r" { v = v.dropFirst() }
        while let c = v.last, c == " " || c == "\t" || c == "\r" { v = v.dropLast() }
        return Substring(v)
    }

    private func isNameCharacter(_ c: Character) -> Bool {
        c.isASCII && (c.isLetter || c.isNumber || c == "_" || c == "-" || c == ".")
    }

    private func malformed(_ line: Substring, _ number: Int) -> ConfigError {
        let shown = line.count > 60 ? String(line.prefix(57)) + "..." : String(line)
        return ConfigError(file: file, line: number,
                           reason: "expected 'key = value' or '[section]', got \(shown.debugDescription)")
    }

    private func isCommentOrEmpty(_ rest: Substring) -> Bool {
        let first = trim(rest).unicodeScalars.first
        return first == nil || first == "#" || first == ";"
    }

    /// `[name]`, optionally followed by a comment; the section must have registered keys.
    private func sectionName(_ line: Substring, line number: Int) throws(ConfigError) -> String {
        let scalars = line.unicodeScalars
        guard let close = scalars.firstIndex(of: "]"), isCommentOrEmpty(Substring(scalars[scalars.index(after: close)...]))
        else { throw malformed(line, number) }
        let name = trim(Substring(scalars[scalars.index(after: scalars.startIndex)..<close]))
        guard !name.isEmpty, name.allSatisfy(isNameCharacter) else { throw malformed(line, number) }
        let prefix = name + "."
        guard registeredKeys.contains(where: { $0.hasPrefix(prefix) }) else {
            throw ConfigError(file: file, line: number, reason: "unknown section [\(name)]")
        }
        return String(name)
    }

    /// Splits `key = value`; the value may be double-quoted (with `\"`, `\\`, `\n`, `\t`
    /// escapes) and may be followed by a comment after whitespace.
    private func keyAndValue(_ line: Substring, line number: Int) throws(ConfigError) -> (String, String) {
        guard let equals = line.unicodeScalars.firstIndex(of: "=") else { throw malformed(line, number) }
        let key = trim(Substring(line.unicodeScalars[..<equals]))
        guard !key.isEmpty, key.allSatisfy(isNameCharacter) else { throw malformed(line, number) }
        let rest = trim(Substring(line.unicodeScalars[line.unicodeScalars.index(after: equals)...]))
        if rest.unicodeScalars.first == "\"" {
            return (String(key), try quoted(rest, key: String(key), line: number))
        }
        // An unquoted value ends at a comment that follows whitespace, so "a#b" and the
        // D-Bus address list "unix:path=/a;unix:path=/b" keep theirs; "key = # x" is empty.
        var value = rest
        var previous: Unicode.Scalar = " "
        let scalars = rest.unicodeScalars
        for i in scalars.indices {
            let c = scalars[i]
            if (c == "#" || c == ";") && (previous == " " || previous == "\t") {
                value = trim(Substring(scalars[..<i]))
                break
            }
            previous = c
        }
        return (String(key), String(value))
    }

    private func quoted(_ quoted: Substring, key: String, line number: Int) throws(ConfigError) -> String {
        var out = String.UnicodeScalarView()
        let text = quoted.unicodeScalars
        var i = text.index(after: text.startIndex)
        while i < text.endIndex {
            let c = text[i]
            if c == "\"" {
                guard isCommentOrEmpty(Substring(text[text.index(after: i)...])) else {
                    throw ConfigError(file: file, line: number, key: key,
                                      reason: "unexpected text after the closing quote")
                }
                return String(out)
            }
            if c == "\\" {
                i = text.index(after: i)
                guard i < text.endIndex else { break }
                switch text[i] {
                case "n": out.append("\n")
                case "t": out.append("\t")
                case "\"", "\\": out.append(text[i])
                default:
                    throw ConfigError(file: file, line: number, key: key,
                                      reason: "unknown escape \\\(text[i]) in quoted value")
                }
            } else {
                out.append(c)
            }
            i = text.index(after: i)
        }
        throw ConfigError(file: file, line: number, key: key, reason: "unterminated quoted value")
    }

    // MARK: Keys

    private func assign(_ key: String, _ value: String, to config: inout DaemonConfig, line: Int) throws(ConfigError) {
        func bad(_ expected: String) -> ConfigError {
            ConfigError(file: file, line: line, key: key, reason: "expected \(expected), got \(value.debugDescription)")
        }
        // Only keys `ConfigKeys` lists (what peerlink.conf(5), `--help` and the completions
        // are made from) are taken, even where a case below would take one: a key added
        // here alone is refused as unknown, so it cannot go undocumented.
        guard DaemonConfig.knownKeys.contains(key) || registeredKeys.contains(key) else { throw unknownKey(key, line: line) }
        switch key {
        case "socket":
            guard value.hasPrefix("/"), value.utf8.count <= UnixSocket.maxPathLength, !value.contains("\0") else {
                throw bad("an absolute path of at most \(UnixSocket.maxPathLength) bytes")
            }
            config.socketPath = value
        case "socket_group":
            if value.isEmpty { config.socketGroup = nil; return }
            guard let gid = UnixSocket.groupID(named: value) else {
                throw ConfigError(file: file, line: line, key: key, reason: "no such group \(value.debugDescription)")
            }
            // Found only when the socket is made: the start failed then, and systemd restarted
            // it in a loop.
            guard UnixSocket.mayGiveFiles(to: gid) else {
                throw ConfigError(file: file, line: line, key: key, reason: "the daemon is not in group \(value.debugDescription), so it cannot give it the control socket "
                                  + "(under the packaged unit only its own group, peerlink, can be given it: add the CLI's users to that group instead)")
            }
            config.socketGroup = value
        case "socket_mode":
            let digits = value.hasPrefix("0o") ? value.dropFirst(2) : Substring(value)
            guard !digits.isEmpty, digits.count <= 4, digits.allSatisfy({ ("0"..."7").contains($0) }),
                  let mode = UInt32(digits, radix: 8), mode <= 0o777
            else { throw bad("an octal mode from 0000 to 0777") }
            config.socketMode = mode
        case "adapter":
            if value.isEmpty { config.adapter = nil; return }
            guard let normalised = validateAdapterSelector(value) else {
                throw bad("hciN or an adapter address like 00:1A:7D:DA:71:13")
            }
            config.adapter = normalised
        case "state_dir":
            guard value.hasPrefix("/"), !value.contains("\0") else { throw bad("an absolute path") }
            config.stateDirectory = value
        case "log_level":
            guard let level = LogLevel(name: value) else {
                throw bad("one of error, warning, notice, info, debug")
            }
            config.logLevel = level
        case "bus":
            guard let bus = BusChoice(parsing: value) else {
                let why = value.contains(":") ? BusChoice.addressProblem(value).map { " (\($0))" } ?? "" : ""
                throw bad("system, session or a D-Bus address like unix:path=/run/dbus/system_bus_socket\(why)")
            }
            config.bus = bus
        case "max_clients":
            config.maxClients = try whole(value, 1...4096, bad)
        case "max_request_bytes":
            config.maxRequestBytes = try whole(value, 1024...67_108_864, bad)
        case "request_timeout":
            guard let seconds = Double(value), seconds.isFinite, (0.1...3600).contains(seconds) else {
                throw bad("a number of seconds from 0.1 to 3600")
            }
            config.requestTimeout = seconds
        case "watchdog":
            switch value.lowercased() {
            case "yes", "true", "on", "1": config.watchdog = true
            case "no", "false", "off", "0": config.watchdog = false
            default: throw bad("yes or no")
            }
        default:
            config.extra[key] = value
            config.extraLines[key] = line
        }
    }

    private func whole(_ value: String, _ range: ClosedRange<Int>,
                       _ bad: (String) -> ConfigError) throws(ConfigError) -> Int {
        guard let n = Int(value), range.contains(n) else {
            throw bad("a whole number from \(range.lowerBound) to \(range.upperBound)")
        }
        return n
    }

    private func unknownKey(_ key: String, line: Int) -> ConfigError {
        let candidates = DaemonConfig.knownKeys + registeredKeys.sorted()
        var best: (key: String, distance: Int)?
        for candidate in candidates {
            let d = editDistance(key.lowercased(), candidate)
            if d <= 2, d < (best?.distance ?? Int.max) { best = (candidate, d) }
        }
        let hint = best.map { "; did you mean '\($0.key)'?" } ?? ""
        return ConfigError(file: file, line: line, key: key, reason: "unknown key" + hint)
    }
}

/// The Levenshtein distance between two strings (insertions, deletions, substitutions).
func editDistance(_ a: String, _ b: String) -> Int {
    let a = Array(a), b = Array(b)
    if a.isEmpty { return b.count }
    if b.isEmpty { return a.count }
    var previous = Array(0...b.count)
    var current = [Int](repeating: 0, count: b.count + 1)
    for i in 1...a.count {
        current[0] = i
        for j in 1...b.count {
            let cost = a[i - 1] == b[j - 1] ? 0 : 1
            current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost)
        }
        swap(&previous, &current)
    }
    return previous[b.count]
}
