import FoundationEssentials
import SystemKit

/// Writes one line per record to standard error, in the form journald understands.
///
///     <6>peerlinkd.control: client connected client.id=3 peer.pid=42
///
/// The `<N>` prefix is the syslog priority, which journald strips and records as the entry's
/// priority. Metadata follows the message as `key=value` pairs sorted by key; a value that is
/// empty or holds spaces, quotes, `=`, backslashes or control characters is double-quoted with
/// backslash escapes. Newlines in the message are escaped so a record is always one line, and
/// each line is written with a single `write(2)` so lines from different threads never mix.
public struct StderrLogHandler: LogHandler {
    private let timestamps: Bool
    private let output: Int32

    /// Creates a handler; `timestamps` adds an ISO 8601 UTC time after the priority (leave it
    /// off under journald, which stamps entries itself).
    public init(timestamps: Bool = false) {
        self.init(timestamps: timestamps, output: 2)
    }

    /// Creates a handler writing to descriptor `output` instead of standard error (for tests).
    init(timestamps: Bool, output: Int32) {
        self.timestamps = timestamps
        self.output = output
    }

    /// Formats `record` and writes it as one line; write errors are ignored.
    public func log(_ record: LogRecord) {
        let line = StderrLogHandler.format(record, timestamps: timestamps)
        // One write(2) for the whole line (writeAll loops only on a short write, which for
        // a line this size on a pipe or journald stream does not happen).
        try? writeAll(output, Array(line.utf8))
    }

    /// The line `log` writes for `record`, newline included.
    public static func format(_ record: LogRecord, timestamps: Bool = false) -> String {
        var line = "<\(record.level.rawValue)>"
        if timestamps {
            line += record.date.formatted(
                Date.ISO8601FormatStyle(includingFractionalSeconds: true, timeZone: .gmt))
            line += " "
        }
        if !record.label.isEmpty {
            line += escapeMessage(record.label)
            line += ": "
        }
        line += escapeMessage(record.message)
        for key in record.metadata.keys.sorted() {
            line += " "
            line += escapeKey(key)
            line += "="
            line += quoteValue(record.metadata[key]!)
        }
        line += "\n"
        return line
    }

    /// Escapes control characters so the message stays on one line.
    static func escapeMessage(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: isControl) else { return text }
        var out = ""
        for scalar in text.unicodeScalars {
            if scalar == "\t" {
                out.unicodeScalars.append(scalar)
            } else if isControl(scalar) {
                out += escape(scalar)
            } else {
                out.unicodeScalars.append(scalar)
            }
        }
        return out
    }

    /// Makes a key safe to print bare: spaces, `=`, quotes and control characters become `_`.
    static func escapeKey(_ key: String) -> String {
        if key.isEmpty { return "_" }
        var out = ""
        for scalar in key.unicodeScalars {
            if scalar == " " || scalar == "=" || scalar == "\"" || isControl(scalar) {
                out += "_"
            } else {
                out.unicodeScalars.append(scalar)
            }
        }
        return out
    }

    /// Returns `value` bare when it is safe, else double-quoted with backslash escapes.
    static func quoteValue(_ value: String) -> String {
        let needsQuotes = value.isEmpty || value.unicodeScalars.contains { scalar in
            scalar == " " || scalar == "\"" || scalar == "=" || scalar == "\\" || isControl(scalar)
        }
        guard needsQuotes else { return value }
        var out = "\""
        for scalar in value.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            default:
                if isControl(scalar) { out += escape(scalar) } else { out.unicodeScalars.append(scalar) }
            }
        }
        out += "\""
        return out
    }

    private static func isControl(_ scalar: Unicode.Scalar) -> Bool {
        scalar.value < 0x20 || scalar.value == 0x7F || scalar == "\u{2028}" || scalar == "\u{2029}"
    }

    private static func escape(_ scalar: Unicode.Scalar) -> String {
        switch scalar {
        case "\n": return "\\n"
        case "\r": return "\\r"
        case "\t": return "\\t"
        default:
            if scalar.value <= 0xFF {
                let hex = String(scalar.value, radix: 16, uppercase: true)
                return "\\x" + (hex.count == 1 ? "0" + hex : hex)
            }
            return "\\u{" + String(scalar.value, radix: 16, uppercase: true) + "}"
        }
    }
}
