import FoundationEssentials
import Glibc
import Session
import Synchronization
import SystemKit

/// The peers this board trusts (their IDs pinned: a peer ID is its certificate's SHA-256, so
/// a trusted ID cannot be claimed with another certificate), kept in a JSON file written
/// atomically: `{"peers": [{"id": "<64 hex>", "name": "...", "since": <unix seconds>}]}`.
public final class TrustStore: Sendable {
    /// One trusted peer.
    public struct Entry: Sendable, Hashable {
        /// Its ID.
        public let peer: PeerID
        /// The name it had when trusted.
        public let name: String
        /// When it was trusted (seconds since 1970).
        public let since: Int64
    }

    /// The file (nil: in memory only).
    public let path: String?
    private let entries: Mutex<[PeerID: Entry]>

    /// Loads `path` (a missing file is an empty store; a corrupt one is an error naming it).
    public init(path: String?) throws {
        self.path = path
        var loaded: [PeerID: Entry] = [:]
        if let path, let bytes = try AtomicFile.readIfPresent(path, maximumSize: 4 << 20) {
            let file: StoredFile
            do { file = try JSONDecoder().decode(StoredFile.self, from: Data(bytes)) } catch {
                throw SystemError(call: "read", code: EINVAL, context: "\(path): not a trust store (expected {\"peers\": [{\"id\": ...}]}): \(error)")
            }
            for (i, p) in file.peers.enumerated() {
                guard let id = PeerID(hex: p.id) else {
                    throw SystemError(call: "read", code: EINVAL, context: "\(path): peers[\(i)].id is not 64 hex digits")
                }
                loaded[id] = Entry(peer: id, name: p.name ?? "", since: p.since ?? 0)
            }
        }
        entries = Mutex(loaded)
    }

    /// Whether `peer` is trusted.
    public func isTrusted(_ peer: PeerID) -> Bool { entries.withLock { $0[peer] != nil } }

    /// Every trusted peer, by name.
    public var all: [Entry] { entries.withLock { $0.values.sorted { ($0.name, $0.peer.text) < ($1.name, $1.peer.text) } } }

    /// Trusts `peer` (saved at once); false when it already was.
    @discardableResult
    public func trust(_ peer: PeerID, name: String) -> Bool {
        let added = entries.withLock { e -> Bool in
            if e[peer] != nil { return false }
            e[peer] = Entry(peer: peer, name: name, since: Int64(Date().timeIntervalSince1970))
            return true
        }
        if added { save() }
        return added
    }

    /// Forgets `peer` (saved at once); false when it was not trusted.
    @discardableResult
    public func forget(_ peer: PeerID) -> Bool {
        let removed = entries.withLock { $0.removeValue(forKey: peer) != nil }
        if removed { save() }
        return removed
    }

    /// The last save's error, if it failed (the store in memory is still right).
    public var saveError: String? { lastError.withLock { $0 } }
    private let lastError = Mutex<String?>(nil)

    private func save() {
        guard let path else { return }
        let file = StoredFile(peers: all.map { StoredPeer(id: $0.peer.hex, name: $0.name, since: $0.since) })
        do {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
            let data = try encoder.encode(file)
            try AtomicFile.write(Array(data), to: path, mode: 0o600)
            lastError.withLock { $0 = nil }
        } catch {
            lastError.withLock { $0 = "saving \(path): \(error)" }
        }
    }
}

/// The file's shape (`name` and `since` may be missing in a file written by hand).
private struct StoredFile: Codable {
    var peers: [StoredPeer]
}

private struct StoredPeer: Codable {
    var id: String
    var name: String?
    var since: Int64?
}
