import Session
import SystemKit

/// Resources (MultipeerConnectivity's `sendResource`): the node's commands; `NodeTransfers`
/// keeps the transfers and `PeerConnection` moves their bytes.
extension PeerNode {
    /// Offers the file at `path` to each of `peers` (every session when empty) as `name` (the
    /// file's own name when nil). The file is hashed once, here, and read once for all of
    /// them (the receivers share the page cache); the transfers start as each peer accepts.
    /// `imagesOnly`: refuse a file that is not a PNG or JPEG (`send-image`).
    public func sendResource(path: String, name: String? = nil, mediaType: String? = nil, to peers: [PeerID],
                             imagesOnly: Bool = false) async throws -> [ResourceTransfer] {
        if let name { try Self.checkResourceName(name) }
        let targets = try sessionConnections(peers)
        guard !targets.isEmpty else { throw PeerError.notConnected("(no session is up)") }
        // Hashing a large file takes seconds: off the cooperative pool.
        let file = try await onOwnThread { try OutgoingFile(path: path, name: name, mediaType: mediaType) }  // hashes the file
        if imagesOnly, file.image == nil {
            throw PeerError.invalid("path", "\(path) is not a PNG or JPEG image (its first bytes say \(file.mediaType))")
        }
        return transfers.send(file, name: file.name, to: targets)
    }

    /// Transfers in progress or waiting, both ways.
    public var resourceTransfers: [ResourceTransfer] { transfers.all }

    /// Answers a peer's offer that a client was asked about (`accept_resources = ask`).
    public func answer(resource id: UInt64, accept: Bool) throws {
        try transfers.answer(id, accept: accept)
    }

    /// Cancels a transfer, either way: both sides hear `cancelled`.
    public func cancel(resource id: UInt64) throws {
        try transfers.cancel(id)
    }

    static func checkResourceName(_ name: String) throws(PeerError) {
        guard !name.isEmpty else { throw .invalid("name", "empty") }
        guard name.utf8.count <= Wire.maxResourceName else {
            throw .invalid("name", "\(name.utf8.count) bytes, at most \(Wire.maxResourceName)")
        }
    }
}
