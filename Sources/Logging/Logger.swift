import FoundationEssentials

/// Severity of a log record, numbered like syslog/journald priorities (lower is more severe).
///
/// Levels compare by verbosity: `.error < .warning < .notice < .info < .debug`. A logger set to
/// `.info` emits `.error` through `.info` and skips `.debug`.
public enum LogLevel: Int, Sendable, Comparable, CaseIterable, CustomStringConvertible {
    /// Something failed; the daemon or a request could not do what it was asked.
    case error = 3
    /// Something unexpected that the daemon worked around.
    case warning = 4
    /// A normal but significant event: start, stop, reload, configuration changes.
    case notice = 5
    /// Routine operational messages.
    case info = 6
    /// Detail for debugging.
    case debug = 7

    /// Parses a level name: "error", "warning" (or "warn"), "notice", "info", "debug", any case.
    public init?(name: String) {
        switch name.lowercased() {
        case "error": self = .error
        case "warning", "warn": self = .warning
        case "notice": self = .notice
        case "info": self = .info
        case "debug": self = .debug
        default: return nil
        }
    }

    /// The canonical lowercase name, e.g. "warning".
    public var name: String {
        switch self {
        case .error: "error"
        case .warning: "warning"
        case .notice: "notice"
        case .info: "info"
        case .debug: "debug"
        }
    }

    /// Same as `name`.
    public var description: String { name }

    /// Orders by verbosity (by the syslog priority number).
    public static func < (lhs: LogLevel, rhs: LogLevel) -> Bool { lhs.rawValue < rhs.rawValue }
}

/// One log event as handed to a `LogHandler`.
public struct LogRecord: Sendable {
    /// The record's severity.
    public var level: LogLevel
    /// The label of the logger that produced it, e.g. "peerlinkd.control".
    public var label: String
    /// The constant message text; variable data belongs in `metadata`.
    public var message: String
    /// The logger's metadata merged with the call's (the call's values win).
    public var metadata: [String: String]
    /// When the record was made.
    public var date: Date

    /// Creates a record.
    public init(level: LogLevel, label: String, message: String, metadata: [String: String] = [:], date: Date = Date()) {
        self.level = level
        self.label = label
        self.message = message
        self.metadata = metadata
        self.date = date
    }
}

/// A value that logs to a `LogHandler`, in the shape of swift-log's `Logger`.
///
/// Loggers are passed into the code that uses them, never created by a library. Messages are
/// constant text; variable data goes into metadata with dotted keys (`peer.id`, `client.id`).
/// A record more verbose than `level` (or than the handler's `maximumLevel`) is skipped before
/// its message is built.
public struct Logger: Sendable {
    /// The logger's name; children append ".child".
    public var label: String
    /// The most verbose level this logger emits.
    public var level: LogLevel
    /// Metadata attached to every record from this logger.
    public var metadata: [String: String]
    /// Where records go.
    public let handler: any LogHandler

    /// Creates a logger writing to `handler` (stderr in journald's format by default).
    public init(label: String, level: LogLevel = .info, handler: any LogHandler = StderrLogHandler()) {
        self.label = label
        self.level = level
        self.metadata = [:]
        self.handler = handler
    }

    /// Whether a record at `level` would be emitted.
    @inlinable
    public func isEnabled(_ level: LogLevel) -> Bool {
        level <= self.level && level <= handler.maximumLevel
    }

    /// Logs `message` at `level` with extra `metadata`, unless `level` is filtered out.
    public func log(_ level: LogLevel, _ message: @autoclosure () -> String, _ metadata: [String: String] = [:]) {
        guard isEnabled(level) else { return }
        var merged = self.metadata
        if !metadata.isEmpty { merged.merge(metadata) { _, new in new } }
        handler.log(LogRecord(level: level, label: label, message: message(), metadata: merged))
    }

    /// Logs at `.error`.
    public func error(_ message: @autoclosure () -> String, _ metadata: [String: String] = [:]) {
        log(.error, message(), metadata)
    }

    /// Logs at `.warning`.
    public func warning(_ message: @autoclosure () -> String, _ metadata: [String: String] = [:]) {
        log(.warning, message(), metadata)
    }

    /// Logs at `.notice`.
    public func notice(_ message: @autoclosure () -> String, _ metadata: [String: String] = [:]) {
        log(.notice, message(), metadata)
    }

    /// Logs at `.info`.
    public func info(_ message: @autoclosure () -> String, _ metadata: [String: String] = [:]) {
        log(.info, message(), metadata)
    }

    /// Logs at `.debug`.
    public func debug(_ message: @autoclosure () -> String, _ metadata: [String: String] = [:]) {
        log(.debug, message(), metadata)
    }

    /// A copy of this logger with `key = value` added to its metadata.
    public func with(_ key: String, _ value: String) -> Logger {
        var copy = self
        copy.metadata[key] = value
        return copy
    }

    /// A copy labelled "<label>.<name>", keeping level, metadata and handler.
    public func child(_ name: String) -> Logger {
        var copy = self
        copy.label = label.isEmpty ? name : "\(label).\(name)"
        return copy
    }
}
