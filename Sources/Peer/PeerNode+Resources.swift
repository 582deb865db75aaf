import Glibc
import Session
import SystemKit

/// Resources (MultipeerConnectivity's `sendResource`): the node's commands; `NodeTransfers`
/// keeps the transfers and `PeerConnection` moves their bytes.
extension PeerNode {
    /// Offers the file at `path` to each of `peers` (every session when empty) as `name` (the
    /// file's own name when nil). The file is hashed once, here (unless its hash is remembered
    /// from an earlier offer: `FileHashes`), and read once for all of
    /// them (the receivers share the page cache); the transfers start as each peer accepts.
    /// `imagesOnly`: refuse a file that is not a PNG or JPEG (`send-image`).
    public func sendResource(path: String, name: String? = nil, mediaType: String? = nil, to peers: [PeerID],
                             imagesOnly: Bool = false) async throws -> [ResourceTransfer] {
        try await sendResource(.path(path), name: name, mediaType: mediaType, to: peers, imagesOnly: imagesOnly).transfers
    }

    /// Offers the bytes of `source` (see `sendResource(path:)`). A descriptor is read in
    /// place when its path names the same file and this node may open it; otherwise its bytes
    /// are copied into the outbox first (`copied`), and the copy is what is offered, resumed
    /// after a restart, and removed once every transfer of it is done.
    public func sendResource(_ source: ResourceSource, name: String? = nil, mediaType: String? = nil, to peers: [PeerID],
                             imagesOnly: Bool = false) async throws -> (transfers: [ResourceTransfer], copied: Bool) {
        var passed: Int32?
        if case .descriptor(let fd, _, _) = source { passed = fd }
        defer { if let passed { closeQuietly(passed) } }
        if let name { try Self.checkResourceName(name) }
        let targets = try sessionConnections(peers)
        guard !targets.isEmpty else { throw PeerError.notConnected("(no session is up)") }
        let mayOffer = config.mayOffer
        let hashes = transfers.hashes
        func open(_ path: String) async throws -> OutgoingFile {
            // Hashing a large file takes seconds: off the cooperative pool.
            try await onOwnThread { try OutgoingFile(path: path, name: name, mediaType: mediaType, hashes: hashes, mayOffer: mayOffer) }
        }
        func notAnImage(_ file: OutgoingFile, _ what: String) -> PeerError {
            .invalid("path", "\(what) is not a PNG or JPEG image (its first bytes say \(file.mediaType))")
        }
        switch source {
        case .path(let path):
            let file = try await open(path)
            if imagesOnly, file.image == nil { throw notAnImage(file, path) }
            return (transfers.send(file, name: file.name, to: targets), false)
        case .descriptor(let fd, let path, let size):
            if let path, FileSystem.isSameFile(path, as: fd) {
                // Read in place; copied only when this daemon may not open it by name (the
                // client may: its descriptor says so). Any other error is the file's (one being
                // written, say), and a copy would only take a mix of its bytes.
                var file: OutgoingFile?
                do {
                    file = try await open(path)
                } catch is NotOffered {
                } catch let e as SystemError where e.code == EACCES || e.code == EPERM {
                }
                if let file {
                    if imagesOnly, file.image == nil { throw notAnImage(file, path) }
                    return (transfers.send(file, name: file.name, to: targets), false)
                }
            }
            guard let offered = name ?? path.map(OutgoingFile.fileName) else {
                throw PeerError.invalid("name", "required when the bytes come from a descriptor without a path")
            }
            try Self.checkResourceName(offered)
            let (outbox, copy) = try transfers.reserveCopy()
            let file: OutgoingFile
            do {
                try await onOwnThread { try outbox.copy(from: fd, to: copy, expectedSize: size) }
                file = try await onOwnThread { try OutgoingFile(path: copy, name: offered, mediaType: mediaType, hashes: hashes, ownCopy: true) }
            } catch {
                transfers.discardCopy(copy)
                throw PeerError.invalid("descriptor", "cannot keep a copy of the passed bytes in \(outbox.directory): \(error)")
            }
            if imagesOnly, file.image == nil {
                transfers.discardCopy(copy)
                throw notAnImage(file, path ?? "the passed data")
            }
            return (transfers.send(file, name: offered, to: targets), true)
        }
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
