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

    /// A value as a bare word when it is a plain string, else compact JSON;
    /// arrays of strings are comma-joined.
    public static func scalar(_ value: JSONValue) -> String {
        switch value {
        case .string(let s):
            let plain = !s.isEmpty && !s.contains(where: { $0 == " " || $0 == "\"" || $0 == "=" || $0.isNewline })
            return plain ? s : value.description
        case .array(let elements):
            let strings = elements.compactMap(\.stringValue)
            if strings.count == elements.count, !strings.isEmpty, strings.allSatisfy({ !$0.contains(",") && !$0.contains(" ") }) {
                return strings.joined(separator: ",")
            }
            return value.description
        default:
            return value.description
        }
    }

    /// The keys that name what an event is about, rendered first as a bare name.
    static let subjectKeys = ["adapter", "device", "peer", "service"]

    /// An event's data as "hci0 powered=false": the subject's name first, then key=value pairs
    /// (sorted); for a "changed" list, the new values of the changed properties follow.
    public static func eventData(_ data: JSONValue) -> String {
        guard case .object(var members) = data else { return data.isNull ? "" : data.description }
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
        for key in members.keys.sorted() {
            words.append("\(key)=\(scalar(members[key]!))")
        }
        if let subject {
            for key in changed where members[key] == nil {
                if let value = subject[key] { words.append("\(key)=\(scalar(value))") }
            }
        }
        return words.joined(separator: " ")
    }
}
