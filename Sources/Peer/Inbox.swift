import Session
import Synchronization
import SystemKit
import TLS
#if canImport(Glibc)
import Glibc
#endif

/// Where resources from peers land. The inbox directory holds finished, verified files only;
/// transfers in progress live in `<inbox>/.part/` as `<key>.data` (the bytes so far) and
/// `<key>.state` (how many of them are on the disk for sure), beside the records of files
/// saved (`SavedResource`, `<key>-<name hash>.saved`). Nothing appears under a final
/// name unless it is whole and its SHA-256 is the offered one: the data is flushed, then
/// linked into place under a name of its own (never over another file).
///
/// A part's key is the sender's peer ID, the content's SHA-256 and its size: the same file
/// from the same peer resumes where it stopped, whatever it is called, and a changed file
/// (another hash) starts over.
///
/// Free space is checked against what every transfer in progress still has to write, not
/// against the offer alone: up to 16 resources a peer, from every peer, may be on their way at
/// once, and each could fit alone while together they cannot. Each open part promises the
/// bytes it still awaits (`promisedBytes`); an offer is taken only when the free space holds
/// it, every promise and the reserve.
///
/// A part is open for one transfer at a time. The same content offered again by the same peer
/// while its part is open waits, off the connection's queue, for up to `duplicateWait`: a
/// session that replaced a dying one resumes once the old transfer lets go of the part (it
/// does within moments); the same file sent twice at once is refused `duplicate` then,
/// rather than two transfers writing one file.
public final class Inbox: @unchecked Sendable {
    /// The inbox directory.
    public let directory: String
    /// Transfers in progress (`<inbox>/.part`).
    public let partDirectory: String
    /// The limits every transfer is checked against.
    public let limits: Limits
    /// This boot's id (the kernel's `random/boot_id`): a part recorded in the same boot
    /// resumes from its whole length, one from before a reboot from what was flushed.
    public let bootID: String

    /// How long `receive` waits for another transfer to let go of the same part.
    public let duplicateWait: Duration
    /// The free space of the inbox's file system (tests give a fixed figure).
    private let freeSpace: @Sendable (String) throws -> UInt64
    /// Runs as a received file, verified, is about to be flushed and saved, on its writer's
    /// queue (tests hold a save there, as a slow card's flush would).
    let beforeSaving: @Sendable () -> Void
    /// Runs as the part of a transfer that stopped is about to be recorded for a resume
    /// (`IncomingFile.suspend`: a flush), on its writer's queue (tests hold it there; an
    /// accept that lost a race to the offer's end records under the connection's lock).
    let beforeRecording: @Sendable () -> Void
    /// Tests only: called when a transfer first finds its content's part held by another
    /// (saved, recorded or received) and starts waiting for it.
    let claimWaits: @Sendable () -> Void
    /// The open parts: their keys, and the bytes each still awaits (lowered as bytes arrive).
    /// Parts are written on their own queues, so under a lock.
    private let open = Mutex(OpenParts())
    private struct OpenParts {
        var keys: Set<String> = []
        var promised: [ObjectIdentifier: UInt64] = [:]
        /// Keys whose parts receive nothing more and are being recorded for a resume.
        var recording: Set<String> = []
    }

    /// How long a transfer waits for a part of the same content that is being recorded for
    /// a resume (`recording`): the recording comes after the part's pending writes and ends
    /// with a flush, which on a slow card can take seconds; the peer that offers it again
    /// right after its cancel must get the part, not `duplicate`.
    public static let recordingWait: Duration = .seconds(30)

    /// What the inbox accepts.
    public struct Limits: Sendable, Hashable {
        /// The largest resource (`max_resource_bytes`).
        public var maxResourceBytes: UInt64
        /// Space left free on the inbox's file system after a transfer.
        public var reserveBytes: UInt64
        /// How often (in bytes received) the data is flushed and its length recorded: what a
        /// crash of the machine can lose, and what a resumed transfer sends again.
        public var syncInterval: UInt64

        /// Limits.
        public init(maxResourceBytes: UInt64 = 4 << 30, reserveBytes: UInt64 = 16 << 20, syncInterval: UInt64 = 4 << 20) {
            self.maxResourceBytes = maxResourceBytes
            self.reserveBytes = reserveBytes
            self.syncInterval = syncInterval
        }
    }

    /// How long a part nobody resumed is kept: a transfer cut while two boards were apart
    /// resumes when they meet again within this time; older parts are removed when the inbox
    /// is opened (the daemon's start), so an abandoned transfer does not hold the disk for ever.
    public static let partRetention: Duration = .seconds(30 * 24 * 3600)
    /// `partRetention` in nanoseconds, as file times are.
    static let partRetentionNanoseconds = Int64(partRetention.components.seconds) * 1_000_000_000

    /// Opens (and makes, mode 0700) the inbox and its part directory, and removes the parts
    /// last written more than `partRetention` before `now` (`removedParts` says how many) and
    /// the temporary files of length records a killed daemon left.
    public init(directory: String, limits: Limits = Limits(), bootID: String = Inbox.currentBootID(),
                now: Int64 = FileIdentity.wallClockNanoseconds(), duplicateWait: Duration = .seconds(2),
                freeSpace: @escaping @Sendable (String) throws -> UInt64 = { try FileSystem.availableBytes(at: $0) },
                beforeSaving: @escaping @Sendable () -> Void = {},
                beforeRecording: @escaping @Sendable () -> Void = {},
                claimWaits: @escaping @Sendable () -> Void = {}) throws(InboxError) {
        self.directory = directory
        self.beforeSaving = beforeSaving
        self.beforeRecording = beforeRecording
        self.claimWaits = claimWaits
        self.limits = limits
        self.bootID = bootID
        self.freeSpace = freeSpace
        self.duplicateWait = duplicateWait
        partDirectory = AtomicFile.join(directory, ".part")
        do {
            // The daemon's group (the CLI's users) may read what arrived; parts stay its own.
            try AtomicFile.makeDirectory(directory, mode: 0o750)
            AtomicFile.widenOwnDirectory(directory, from: 0o700, to: 0o750)
            try AtomicFile.makeDirectory(partDirectory, mode: 0o700)
        } catch {
            throw .io("making the inbox \(directory)", error)
        }
        removedParts = Self.removeStaleParts(in: partDirectory, now: now)
        // A part's length record whose writer was killed mid-write would stay for ever.
        AtomicFile.removeAbandonedTemporaries(in: partDirectory)
    }

    /// How many parts older than `partRetention` opening the inbox removed.
    public let removedParts: Int

    /// Removes each part (its `.data` and `.state`) whose newer file was last modified more
    /// than `partRetention` before `now`, and the records of files saved that long ago
    /// (`SavedResource`); returns how many parts. A part it cannot read is left.
    private static func removeStaleParts(in partDirectory: String, now: Int64) -> Int {
        guard let names = try? FileSystem.names(in: partDirectory) else { return 0 }
        let limit = now - partRetentionNanoseconds
        var newest: [String: Int64] = [:]
        for name in names {
            guard let dot = name.lastIndex(of: "."), [".data", ".state", ".saved"].contains(String(name[dot...])) else { continue }
            let path = AtomicFile.join(partDirectory, name)
            guard let modified = try? RegularFile.openForReading(path).status().modified else { continue }
            if name[dot...] == ".saved" {
                if modified < limit { _ = try? FileSystem.remove(path) }
                continue
            }
            let key = String(name[..<dot])
            newest[key] = max(newest[key] ?? .min, modified)
        }
        var removed = 0
        for (key, modified) in newest where modified < limit {
            _ = try? FileSystem.remove(AtomicFile.join(partDirectory, key + ".data"))
            _ = try? FileSystem.remove(AtomicFile.join(partDirectory, key + ".state"))
            removed += 1
        }
        return removed
    }

    /// Starts (or resumes) receiving `offer` from `peer`: checks the quota and the free
    /// space, and opens the part, whose `offset` is where the sender should start. May wait
    /// (`duplicateWait`) for another transfer of the same content to let go of the part: call
    /// it off any queue that must stay responsive.
    public func receive(_ offer: ResourceOffer, from peer: PeerID) throws(InboxError) -> IncomingFile {
        try checkQuota(offer)
        guard offer.sha256.count == 32 else { throw .invalid("the offer's SHA-256 is \(offer.sha256.count) bytes") }
        let key = Self.key(offer, peer)
        try claim(key, offer.name)
        let part: IncomingFile
        do {
            part = try IncomingFile(inbox: self, offer: offer, from: peer, key: key)
        } catch {
            _ = open.withLock { $0.keys.remove(key) }
            throw error
        }
        do {
            // (A part that holds every byte needs no room: a resource saved before, say.)
            if part.offset < offer.size { try checkRoom(for: offer.size - part.offset, promising: part) }
        } catch {
            // What an earlier transfer left stays for a later resume (when there is room).
            if part.offset > 0 { part.close() } else { part.discard() }
            throw error
        }
        return part
    }

    /// Takes the part's key, waiting up to `duplicateWait` while another transfer holds it,
    /// and up to `recordingWait` while that transfer's part is being recorded for a resume.
    private func claim(_ key: String, _ name: String) throws(InboxError) {
        let start = ContinuousClock.now
        var waiting = false
        while true {
            let (taken, recording) = open.withLock { o in (o.keys.insert(key).inserted, o.recording.contains(key)) }
            if taken { return }
            if !waiting {
                waiting = true
                claimWaits()
            }
            // Polled: a dying session's transfer gives the key back within moments, and this
            // runs on a thread of its own (`PeerConnection.acceptResource`).
            guard ContinuousClock.now - start < (recording ? Self.recordingWait : duplicateWait) else { throw .alreadyReceiving(name) }
            Duration.milliseconds(10).sleepBlocking()
        }
    }

    /// `part` receives nothing more: it is to be recorded for a resume once its pending
    /// writes are done (`IncomingFileWriter.suspend`). Its promised bytes no longer count
    /// (the same content offered again is checked for room meanwhile), and a transfer of the
    /// same content waits for the record (`claim`).
    func recording(_ part: IncomingFile, key: String) {
        open.withLock { o in
            o.recording.insert(key)
            o.promised[ObjectIdentifier(part)] = nil
        }
    }

    /// Parts open now: being received, being saved, or being recorded for a resume after
    /// their transfer stopped. A stopping daemon waits until there are none
    /// (`PeerNode.stop(settlingWithin:)`).
    public var openParts: Int { open.withLock { $0.keys.count } }

    /// The bytes the open parts still await, all together.
    public var promisedBytes: UInt64 { open.withLock { $0.promised.values.reduce(0, +) } }

    /// `part` wrote `count` more bytes: they are on the disk now, no longer promised.
    func arrived(_ count: Int, for part: IncomingFile) {
        open.withLock { o in
            let id = ObjectIdentifier(part)
            if let left = o.promised[id] { o.promised[id] = left - min(left, UInt64(count)) }
        }
    }

    /// `part` ended (saved, suspended, discarded, closed): its key is free and it promises
    /// nothing more. Only the part holding a key ends it (`receive` lets no other open it),
    /// and only once (`IncomingFile.release`).
    func ended(_ part: IncomingFile, key: String) {
        open.withLock { o in
            o.keys.remove(key)
            o.recording.remove(key)
            o.promised[ObjectIdentifier(part)] = nil
        }
    }

    /// Whether `offer` from `peer` could be taken now (the quota, and the free space for
    /// what a part of it does not hold yet), before anyone is asked about it. `receive`
    /// checks again when the transfer starts.
    public func check(_ offer: ResourceOffer, from peer: PeerID) throws(InboxError) {
        try checkQuota(offer)
        let key = Self.key(offer, peer)
        if SavedResource.matching(self, key: key, offer: offer, from: peer) != nil { return }
        let part = AtomicFile.join(partDirectory, key + ".data")
        let have = (try? RegularFile.openForReading(part).size()) ?? 0
        try checkRoom(for: offer.size - min(have, offer.size), promising: nil)
    }

    /// Whether `offer` is within the quota (no file system call: `check` does the rest).
    func checkQuota(_ offer: ResourceOffer) throws(InboxError) {
        guard offer.size <= limits.maxResourceBytes else { throw .tooLarge(size: offer.size, limit: limits.maxResourceBytes) }
    }

    /// Whether `needed` more bytes fit the inbox's file system beside what the open parts
    /// still await, with the reserve kept free; if so, and `part` is given, it promises them
    /// (checked and promised under one lock, so two offers at once cannot both take the
    /// same free bytes). The free space is read under the lock too: a part writes its bytes
    /// before it lowers its promise, so a figure read then never counts a byte twice as free.
    private func checkRoom(for needed: UInt64, promising part: IncomingFile?) throws(InboxError) {
        let refusal = open.withLock { o -> InboxError? in
            let available: UInt64
            do { available = try freeSpace(directory) } catch {
                return .io("reading the free space of \(directory)", error)
            }
            let promised = o.promised.values.reduce(0, +)
            let (wanted, o1) = needed.addingReportingOverflow(promised)
            let (total, o2) = wanted.addingReportingOverflow(limits.reserveBytes)
            guard !o1, !o2, total <= available else {
                return .noSpace(needed: needed, available: available, promised: promised, reserve: limits.reserveBytes)
            }
            if let part { o.promised[ObjectIdentifier(part)] = needed }
            return nil
        }
        if let refusal { throw refusal }
    }

    /// The PNG or JPEG header of the file at `path` (a received file), read from its first
    /// bytes; nil for anything else or a file that cannot be read.
    public static func imageHeader(of path: String) -> ImageHeader? {
        guard let f = try? RegularFile.openForReading(path) else { return nil }
        return imageHeader(of: f)
    }

    /// The PNG or JPEG header of an open file, nil when it is neither.
    public static func imageHeader(of file: RegularFile) -> ImageHeader? {
        guard let head = try? file.read(at: 0, count: ImageHeader.maxHeaderBytes) else { return nil }
        return ImageHeader.parse(head)
    }

    /// The kernel's id of this boot ("" when it cannot be read: every resume then trusts only
    /// what was flushed).
    public static func currentBootID() -> String {
        guard let bytes = try? AtomicFile.readIfPresent("/proc/sys/kernel/random/boot_id", maximumSize: 64),
              let text = String(validating: bytes, as: UTF8.self) else { return "" }
        return String(text.prefix { $0 != "\n" })
    }

    /// The part's key: who sent it and what it is.
    static func key(_ offer: ResourceOffer, _ peer: PeerID) -> String {
        "\(peer.hex.prefix(16))-\(Fingerprint.hexString(offer.sha256))-\(offer.size)"
    }

    /// The finished files, by name.
    public func files() throws(InboxError) -> [String] {
        do { return try FileSystem.names(in: directory).filter { $0 != ".part" } } catch {
            throw .io("listing \(directory)", error)
        }
    }
}

/// Why the inbox cannot take a resource, with the reason the sender is told.
public enum InboxError: Error, Sendable, CustomStringConvertible {
    /// Over the quota.
    case tooLarge(size: UInt64, limit: UInt64)
    /// Not enough free space: `available` on the file system, of which `promised` is awaited
    /// by transfers in progress and `reserve` kept free.
    case noSpace(needed: UInt64, available: UInt64, promised: UInt64, reserve: UInt64)
    /// The same content from the same peer is arriving already (another transfer has its part).
    case alreadyReceiving(String)
    /// The bytes do not have the offered hash.
    case hashMismatch(expected: [UInt8], got: [UInt8])
    /// A use that does not fit (too many bytes, finished twice).
    case invalid(String)
    /// A file operation failed.
    case io(String, Error)

    /// The reason for the sender (RESOURCE_DECLINE or RESOURCE_CANCEL).
    public var reason: Reason {
        switch self {
        case .tooLarge: .tooLarge
        case .noSpace: .noSpace
        case .alreadyReceiving: .duplicate
        case .hashMismatch: .hashMismatch
        case .invalid: .protocolError
        case .io(_, let e): (e as? SystemError)?.code == ENOSPC ? .noSpace : .ioError
        }
    }

    public var description: String {
        switch self {
        case .tooLarge(let size, let limit): "the resource is \(size) bytes; this inbox takes at most \(limit) (max_resource_bytes)"
        case .noSpace(let needed, let available, let promised, let reserve):
            "the resource needs \(needed) bytes; the inbox's file system has \(available) free"
                + (promised > 0 ? ", \(promised) of them awaited by transfers in progress" : "")
                + " and \(reserve) kept in reserve"
        case .alreadyReceiving(let name): "the same content (\(name)) from this peer is being received already, by another transfer"
        case .hashMismatch(let expected, let got):
            "the received bytes have SHA-256 \(Fingerprint.short(got)), not the offered \(Fingerprint.short(expected))"
        case .invalid(let why): why
        case .io(let what, let e): "\(what): \(e)"
        }
    }
}

/// A finished, verified file in the inbox.
public struct ReceivedFile: Sendable, Hashable {
    /// Its path.
    public let path: String
    /// Its name in the inbox (the peer's name made safe, numbered when taken).
    public let name: String
    /// Its size.
    public let size: UInt64
    /// Its media type as the sender offered it.
    public let mediaType: String
    /// Its SHA-256.
    public let sha256: [UInt8]
}
