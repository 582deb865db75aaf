import FoundationEssentials
import Glibc
import Session
import Synchronization
import SystemKit

/// The peers this board trusts (their IDs pinned: a peer ID is its certificate's SHA-256, so
/// a trusted ID cannot be claimed with another certificate), kept in a JSON file written
/// atomically: `{"peers": [{"id": "<64 hex>", "name": "...", "since": <unix seconds>,
/// "address": "HOST:PORT", "resume": true}]}`. `resume` says the peer's last session was not
/// ended by a choice (it was up when this daemon stopped, or lost): a restarted daemon takes
/// it back without asking, and dials it at `address` (where a dial of this board last
/// reached it) when it has one, so a session and a transfer cut by a restart or a reboot
/// come back by themselves.
public final class TrustStore: Sendable {
    /// One trusted peer.
    public struct Entry: Sendable, Hashable {
        /// Its ID.
        public let peer: PeerID
        /// The name it had when trusted.
        public let name: String
        /// When it was trusted (seconds since 1970).
        public let since: Int64
        /// Where a dial of this board last reached it while trusted (nil: never).
        public var address: HostPort?
        /// Its last session came up and was not ended by a choice (of either side's user):
        /// it comes back after a restart.
        public var resume = false
    }

    /// The file (nil: in memory only).
    public let path: String?
    private let entries: Mutex<[PeerID: Entry]>
    /// What the load passed over, each naming the file and the entry: an `address` that is
    /// not HOST:PORT (only where to dial the peer after a restart: the trust is kept, the
    /// peer dials, or its next session gives the address again).
    public let loadWarnings: [String]

    /// Loads `path` (a missing file is an empty store; a corrupt one is an error naming it:
    /// a trust is never guessed).
    public init(path: String?) throws {
        self.path = path
        var loaded: [PeerID: Entry] = [:]
        var warnings: [String] = []
        if let path, let bytes = try AtomicFile.readIfPresent(path, maximumSize: 4 << 20) {
            let file: StoredFile
            do { file = try JSONDecoder().decode(StoredFile.self, from: Data(bytes)) } catch {
                throw SystemError(call: "read", code: EINVAL, context: "\(path): not a trust store (expected {\"peers\": [{\"id\": ...}]}): \(error)")
            }
            for (i, p) in file.peers.enumerated() {
                guard let id = PeerID(hex: p.id) else {
                    throw SystemError(call: "read", code: EINVAL, context: "\(path): peers[\(i)].id is not 64 hex digits")
                }
                var address: HostPort?
                if let text = p.address {
                    do { address = try HostPort(text) } catch {
                        warnings.append("\(path): peers[\(i)].address is not HOST:PORT (\(error)): passed over, the peer stays trusted")
                    }
                }
                loaded[id] = Entry(peer: id, name: p.name ?? "", since: p.since ?? 0, address: address, resume: p.resume ?? false)
            }
        }
        entries = Mutex(loaded)
        loadWarnings = warnings
    }

    /// Whether `peer` is trusted.
    public func isTrusted(_ peer: PeerID) -> Bool { entries.withLock { $0[peer] != nil } }

    /// Every trusted peer, by name.
    public var all: [Entry] { entries.withLock { $0.values.sorted { ($0.name, $0.peer.text) < ($1.name, $1.peer.text) } } }

    /// Trusts `peer` (saved at once); false when it already was. Throws when the file cannot
    /// be written (a full or read-only disk): the store is then unchanged, in memory and on disk.
    @discardableResult
    public func trust(_ peer: PeerID, name: String) throws(TrustStoreError) -> Bool {
        try change { e in
            if e[peer] != nil { return false }
            e[peer] = Entry(peer: peer, name: name, since: Int64(Date().timeIntervalSince1970))
            return true
        }
    }

    /// A session with trusted `peer` is up (`reachedAt`: where a dial of ours reached it, nil
    /// when the peer dialled): it comes back after a restart. Saved at once when that changes
    /// anything; false when nothing changed or `peer` is not trusted. Throws as `trust` does,
    /// the store unchanged.
    @discardableResult
    public func sessionUp(_ peer: PeerID, reachedAt: HostPort?) throws(TrustStoreError) -> Bool {
        try change { e in
            guard var entry = e[peer] else { return false }
            let before = entry
            entry.resume = true
            if let reachedAt { entry.address = reachedAt }
            e[peer] = entry
            return entry != before
        }
    }

    /// `peer`'s session was ended by a user's choice (either side's): not resumed after a
    /// restart. Saved at once when that changes anything. Throws as `trust` does.
    @discardableResult
    public func sessionEndedByChoice(_ peer: PeerID) throws(TrustStoreError) -> Bool {
        try change { e in
            guard e[peer]?.resume == true else { return false }
            e[peer]?.resume = false
            return true
        }
    }

    /// Forgets `peer` (saved at once); false when it was not trusted. Throws as `trust` does,
    /// the store unchanged.
    @discardableResult
    public func forget(_ peer: PeerID) throws(TrustStoreError) -> Bool {
        try change { $0.removeValue(forKey: peer) != nil }
    }

    /// Applies `edit` to a copy and saves it; the copy becomes the store only once it is on
    /// disk. Under the lock, so saves happen in the order of the changes.
    private func change(_ edit: (inout [PeerID: Entry]) -> Bool) throws(TrustStoreError) -> Bool {
        try entries.withLock { (e: inout [PeerID: Entry]) throws(TrustStoreError) -> Bool in
            var next = e
            guard edit(&next) else { return false }
            if let path { try Self.save(next, to: path) }
            e = next
            return true
        }
    }

    private static func save(_ entries: [PeerID: Entry], to path: String) throws(TrustStoreError) {
        let sorted = entries.values.sorted { ($0.name, $0.peer.text) < ($1.name, $1.peer.text) }
        let file = StoredFile(peers: sorted.map { StoredPeer(id: $0.peer.hex, name: $0.name, since: $0.since, address: $0.address?.description,
                                                      resume: $0.resume ? true : nil) })
        do {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
            try AtomicFile.write(Array(try encoder.encode(file)), to: path, mode: 0o600)
        } catch {
            throw TrustStoreError(path: path, reason: "\(error)")
        }
    }
}

/// The trust store's file could not be written; nothing changed.
public struct TrustStoreError: Error, CustomStringConvertible, Sendable {
    /// The file.
    public let path: String
    /// Why (the system's error, with the call that failed).
    public let reason: String
    public var description: String { "cannot save the trusted peers to \(path): \(reason); nothing changed" }
}

/// The file's shape (`name`, `since`, `address` and `resume` may be missing: a file written by
/// hand, or by a version before addresses were kept).
private struct StoredFile: Codable {
    var peers: [StoredPeer]
}

private struct StoredPeer: Codable {
    var id: String
    var name: String?
    var since: Int64?
    var address: String?
    var resume: Bool?
}
