import Control

/// Helpers that turn result objects into text for humans.
public enum Rendering {
    /// Columns padded to their widest cell plus two spaces; trailing spaces trimmed.
    public static func table(header: [String], rows: [[String]]) -> String {
        let all = [header] + rows
        var widths = [Int](repeating: 0, count: header.count)
        for row in all {
            for (i, cell) in row.enumerated() where i < widths.count {
                widths[i] = max(widths[i], cell.count)
            }
        }
        return all.map { row in
            var line = ""
            for (i, cell) in row.enumerated() {
                line += cell
                if i < row.count - 1 { line += String(repeating: " ", count: widths[i] - cell.count + 2) }
            }
            while line.hasSuffix(" ") { line.removeLast() }
            return line
        }.joined(separator: "\n")
    }

    /// "42s", "5m 3s", "2h 5m", "3d 4h".
    public static func duration(seconds: Double) -> String {
        let total = Int64(max(0, seconds.rounded(.down)))
        let days = total / 86_400, hours = total / 3600 % 24, minutes = total / 60 % 60, secs = total % 60
        if days > 0 { return "\(days)d \(hours)h" }
        if hours > 0 { return "\(hours)h \(minutes)m" }
        if minutes > 0 { return "\(minutes)m \(secs)s" }
        return "\(secs)s"
    }

    /// "hci0 (00:AA:01:00:00:00)", or just the name when the address is missing.
    public static func adapterLabel(_ adapter: JSONValue) -> String {
        let name = adapter["name"]?.stringValue ?? "?"
        guard let address = adapter["address"]?.stringValue else { return name }
        return "\(name) (\(address))"
    }

    /// A value as words: a plain string bare, a string with spaces, quotes, `=` or `,` in
    /// double quotes (so `key=value` pairs stay readable), numbers and booleans as they are,
    /// a list comma-joined ("-" when empty), an object as `(key=value ...)`; never a JSON
    /// document, which is what `--json` is for.
    public static func scalar(_ value: JSONValue) -> String {
        switch value {
        case .string(let s):
            return word(s, quotingEquals: true)
        case .array(let elements):
            // Inside a list an "=" is not ambiguous (TXT entries are key=value themselves).
            return elements.isEmpty ? "-" : elements.map { $0.stringValue.map { word($0, quotingEquals: false) } ?? scalar($0) }.joined(separator: ",")
        case .object(let members):
            return "(" + members.keys.sorted().map { "\($0)=\(scalar(members[$0]!))" }.joined(separator: " ") + ")"
        default:
            return value.description
        }
    }

    /// `s` bare, or in double quotes (JSON's escapes) when it is empty or has a space, quote,
    /// comma, line break, (when asked) "=", or a scalar that is not shown as it is (`text`).
    private static func word(_ s: String, quotingEquals: Bool) -> String {
        // Scalars: a space or "=" followed by a combining mark is another Character, and would
        // go unquoted (read back as two words, or as key=value).
        let plain = !s.isEmpty && !s.contains(where: \.isNewline)
            && !s.unicodeScalars.contains { $0 == " " || $0 == "\"" || $0 == "," || (quotingEquals && $0 == "=") || isHidden($0) }
        return plain ? s : quoted(s)
    }

    /// Text from outside (a peer's name, a CLOSE's text, a context) for a line a person
    /// reads: as it is, or in quotes with its hidden scalars escaped when it has any. A
    /// peer's control characters could otherwise move the cursor, clear a line or recolour
    /// the terminal, and bidirectional controls reorder what follows: either could make a
    /// line, its pairing code say, read otherwise than it is.
    public static func text(_ s: String) -> String {
        s.unicodeScalars.contains(where: isHidden) ? quoted(s) : s
    }

    /// Control characters (C0, DEL, C1) and the invisible scalars that reorder text.
    static func isHidden(_ u: Unicode.Scalar) -> Bool {
        switch u.value {
        case 0..<0x20, 0x7F...0x9F, 0x061C, 0x200E, 0x200F, 0x2028, 0x2029, 0x202A...0x202E, 0x2066...0x2069: true
        default: false
        }
    }

    /// `s` in double quotes with JSON's escapes, hidden scalars as `\uXXXX` (JSON escapes
    /// only the C0 ones).
    static func quoted(_ s: String) -> String {
        var out = "\""
        for u in s.unicodeScalars {
            switch u {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case _ where isHidden(u):
                let hex = String(u.value, radix: 16)
                out += "\\u" + String(repeating: "0", count: max(0, 4 - hex.count)) + hex
            default: out.unicodeScalars.append(u)
            }
        }
        return out + "\""
    }

    /// `key=value` words for an object's members, sorted; a nested object's members are
    /// spelled `key.member=value`.
    public static func pairs(_ members: [String: JSONValue], prefix: String = "") -> [String] {
        members.keys.sorted().flatMap { key -> [String] in
            if case .object(let nested) = members[key]!, !nested.isEmpty {
                return pairs(nested, prefix: prefix + key + ".")
            }
            return ["\(prefix)\(key)=\(scalar(members[key]!))"]
        }
    }

    /// The keys that name what an event is about, rendered first as a bare name.
    static let subjectKeys = ["adapter", "device", "peer", "service"]

    /// An event's data as "hci0 powered=false": the subject's name first, then key=value pairs
    /// (sorted, nested objects as `key.member=value`); for a "changed" list, the new values of
    /// the changed properties follow.
    public static func eventData(_ data: JSONValue) -> String {
        guard case .object(var members) = data else { return data.isNull ? "" : scalar(data) }
        var words: [String] = []
        var subject: [String: JSONValue]?
        for key in subjectKeys {
            guard let value = members[key] else { continue }
            if case .object(let object) = value, let name = object["name"]?.stringValue ?? object["address"]?.stringValue {
                words.append(name)
                subject = subject ?? object
                members[key] = nil
            } else if let name = value.stringValue {
                words.append(name)
                members[key] = nil
            }
        }
        let changed = members["changed"]?.arrayValue?.compactMap(\.stringValue) ?? []
        words += pairs(members)
        if let subject {
            for key in changed where members[key] == nil {
                if let value = subject[key] { words.append("\(key)=\(scalar(value))") }
            }
        }
        return words.joined(separator: " ")
    }
}
