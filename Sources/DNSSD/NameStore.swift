import FoundationEssentials
import Synchronization
import SystemKit

/// The names chosen after collisions, kept in the state directory so that a restart publishes
/// under the same name instead of flipping back and forth with the peer that took the
/// original (avahi #437, #117; docs/reference-flows.md U9).
///
/// The file is JSON: `{"<requested>\u{1F}<type>\u{1F}<domain>": "<chosen>"}`, written to a
/// temporary file and renamed, so a crash leaves the old or the new version.
public final class NameStore: Sendable {
    /// The file, or nil to keep names in memory only.
    public let path: String?
    private let names: Mutex<[String: String]>

    /// Loads the names in `path` (a missing or unreadable file means none).
    public init(path: String?) {
        self.path = path
        var loaded: [String: String] = [:]
        if let path, let bytes = try? AtomicFile.readIfPresent(path, maximumSize: 1 << 20),
           let object = try? JSONDecoder().decode([String: String].self, from: Data(bytes)) {
            loaded = object
        }
        names = Mutex(loaded)
    }

    private static func key(_ requested: String, _ type: String, _ domain: String?) -> String {
        "\(requested)\u{1F}\(type.lowercased())\u{1F}\((domain ?? "local").lowercased())"
    }

    /// The name to publish `requested` under: the one chosen last time, or `requested`.
    public func name(for requested: String, type: String, domain: String?) -> String {
        names.withLock { $0[Self.key(requested, type, domain)] } ?? requested
    }

    /// Remembers that `requested` is published as `chosen` (forgets it when they are equal).
    /// Returns an error text when the file could not be written (the name is kept in memory).
    @discardableResult
    public func record(requested: String, type: String, domain: String?, chosen: String) -> String? {
        let snapshot = names.withLock { n -> [String: String] in
            n[Self.key(requested, type, domain)] = chosen == requested ? nil : chosen
            return n
        }
        guard let path else { return nil }
        do {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys]
            let data = try encoder.encode(snapshot)
            try AtomicFile.makeDirectory(AtomicFile.parent(of: path), mode: 0o755)
            try AtomicFile.write(Array(data), to: path, mode: 0o644)
            return nil
        } catch {
            return "\(error)"
        }
    }
}
