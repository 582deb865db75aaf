import Session
import SystemKit
import TLS

/// One resource being received into an `Inbox`: bytes are appended and hashed as they come,
/// flushed every `syncInterval` bytes with their length recorded (the length a resume can
/// trust), and at the end verified and moved to a final name. Used from one queue or actor.
///
/// A resource saved before and offered again by the same peer under the same name (its
/// confirmation lost with the session) is complete from the start (`saved`), instead of
/// being received twice (`SavedResource`).
public final class IncomingFile: @unchecked Sendable {
    /// What was offered.
    public let offer: ResourceOffer
    /// Where the sender should start: what an earlier transfer left on the disk for sure.
    public let offset: UInt64
    /// Bytes on the part so far (offset plus what came since).
    public private(set) var received: UInt64

    private let inbox: Inbox
    /// Who sent it.
    private let peer: PeerID
    /// The part's key in the inbox (who sent it, what it is).
    private let key: String
    private let dataPath: String
    private let statePath: String
    /// The part being written and its running hash; nil when the resource was saved before.
    private let file: RegularFile?
    private let digest: SHA256Digest?
    /// The file this resource became when it was received before, still in the inbox.
    private let saved: ReceivedFile?
    private var synced: UInt64
    private var ended = false
    /// Whether the inbox has been told the part ended (`release`).
    private var released = false

    /// Opens the part for `key` and resumes it. Since the same boot (the record's boot id is
    /// the system's) every byte written is in the file, even after a `kill -9`: the part
    /// resumes from its whole length. After a reboot only what was flushed counts: the data
    /// is cut to the recorded length. Either way it is hashed again (the digest must cover
    /// every byte), and the record is written at once with this boot's id.
    init(inbox: Inbox, offer: ResourceOffer, from peer: PeerID, key: String) throws(InboxError) {
        self.inbox = inbox
        self.offer = offer
        self.peer = peer
        self.key = key
        dataPath = AtomicFile.join(inbox.partDirectory, key + ".data")
        statePath = AtomicFile.join(inbox.partDirectory, key + ".state")
        if let saved = SavedResource.verified(inbox, key: key, offer: offer, from: peer) {
            self.saved = saved
            file = nil
            digest = nil
            offset = offer.size
            received = offer.size
            synced = offer.size
            return
        }
        saved = nil
        do {
            var file = try RegularFile.openForWriting(dataPath)
            // A part that is also a file elsewhere (a crash between the link into the inbox and
            // the part's removal left both names) is that file: written to, it would change a
            // saved file in place. The inbox keeps its name; the part starts over.
            let linkedElsewhere = try file.linkCount() > 1
            if linkedElsewhere {
                file.close()
                try FileSystem.remove(dataPath)
                file = try RegularFile.openForWriting(dataPath)
            }
            let hasher = try SHA256Digest()
            let record = linkedElsewhere ? nil : Self.record(statePath)
            let length = try file.size()
            // Only a record of this very boot vouches for unflushed bytes (an unknown boot,
            // "", vouches for nothing: the bytes may be gone with a power cut).
            let sameBoot = !inbox.bootID.isEmpty && record?.boot == inbox.bootID
            let trusted = sameBoot ? length : min(record?.length ?? 0, length)
            let start = min(trusted, offer.size)
            try file.truncate(to: start)
            let at = try file.readChunks(upTo: start) { try hasher.update($0) }
            try Self.writeRecord(statePath, length: at, boot: inbox.bootID)
            // Set last: nothing throws once the object is whole, so a failure never runs its
            // `deinit` (whose release would free the key a second time, after `Inbox.receive`
            // did, perhaps another transfer's by then).
            (self.file, digest, offset, received, synced) = (file, hasher, at, at, at)
        } catch let e as InboxError {
            throw e
        } catch {
            throw .io("opening the part \(dataPath)", error)
        }
    }

    /// A part dropped without an end (its connection's state went away) promises nothing
    /// more either.
    deinit { release() }

    /// Gives the part's key and promise back to the inbox, once: a later call (a second
    /// `discard`, `deinit`) must not free a key another transfer holds by then.
    private func release() {
        guard !released else { return }
        released = true
        inbox.ended(self, key: key)
    }

    /// What a state file records: the length flushed, and the boot it was written in (nil
    /// when there is no file or it is unreadable: start over).
    private static func record(_ path: String) -> (length: UInt64, boot: String)? {
        guard let bytes = try? AtomicFile.readIfPresent(path, maximumSize: 128),
              let text = String(validating: bytes, as: UTF8.self) else { return nil }
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false)
        guard let first = lines.first, let n = UInt64(first) else { return nil }
        return (n, lines.count > 1 ? String(lines[1]) : "")
    }

    /// "<length>\n<boot id>\n", written atomically.
    private static func writeRecord(_ path: String, length: UInt64, boot: String) throws {
        try AtomicFile.write(Array("\(length)\n\(boot)\n".utf8), to: path, mode: 0o600)
    }

    /// Appends the next bytes.
    public func write(_ bytes: [UInt8]) throws(InboxError) {
        guard !ended else { throw .invalid("the transfer of \(offer.name) has ended") }
        guard UInt64(bytes.count) <= offer.size - received, let file, let digest else {
            throw .invalid("more bytes than the \(offer.size) offered")
        }
        do {
            try file.write(bytes, at: received)
            try digest.update(bytes)
        } catch {
            throw .io("writing \(dataPath)", error)
        }
        received += UInt64(bytes.count)
        inbox.arrived(bytes.count, for: self)
        if received - synced >= inbox.limits.syncInterval { try checkpoint() }
    }

    /// Flushes the data and records its length: a resume starts from here at worst.
    public func checkpoint() throws(InboxError) {
        guard !ended, received > synced, let file else { return }
        do {
            try file.sync()
            try Self.writeRecord(statePath, length: received, boot: inbox.bootID)
        } catch {
            throw .io("recording the progress of \(dataPath)", error)
        }
        synced = received
    }

    /// Every byte came: checks the hash, flushes, and links the file into the inbox under
    /// its safe name (numbered when taken). A wrong hash removes the part.
    public func finish() throws(InboxError) -> ReceivedFile {
        guard !ended else { throw .invalid("the transfer of \(offer.name) has ended") }
        guard received == offer.size else { throw .invalid("\(received) of \(offer.size) bytes received") }
        if let saved {
            // Saved before: the sender only had not heard it. The record served its offer.
            SavedResource.remove(inbox, key: key, offer: offer)
            ended = true
            release()
            return saved
        }
        guard let file, let digest else { throw .invalid("the part of \(offer.name) is not open") }
        let got: [UInt8]
        do { got = try digest.finish() } catch { throw .io("hashing \(dataPath)", error) }
        guard got == offer.sha256 else {
            discard()
            throw .hashMismatch(expected: offer.sha256, got: got)
        }
        // The save (three flushes: most of a second or more on an SD card) may outlast the
        // session, whose sender offers the file again on its next one: that offer waits for
        // the save as for a record (`Inbox.recordingWait`), then finds the file saved.
        inbox.recording(self, key: key)
        inbox.beforeSaving()
        do {
            // Readable by the daemon's group (the CLI's users), as the inbox is; a file system
            // that refuses it (a FAT card mounted for another owner) costs only that.
            try? file.setMode(0o640)
            try file.sync()
            file.close()
            let safe = ResourceName.sanitise(offer.name)
            // Each candidate is tried by linking: a name taken meanwhile is never replaced.
            var name: String?
            var n = 1
            while name == nil, n <= 10_000 {
                let candidate = n == 1 ? safe : ResourceName.numbered(safe, n)
                if try FileSystem.moveWithoutReplacing(dataPath, to: AtomicFile.join(inbox.directory, candidate)) { name = candidate }
                n += 1
            }
            guard let name else { throw InboxError.invalid("10,000 files called \(safe) are in the inbox already") }
            // Linked: the file is in the inbox, whole and verified, whatever fails from here
            // on (a failure reported now would leave it there while its sender sent it again).
            _ = try? FileSystem.syncDirectory(inbox.directory)
            SavedResource.record(inbox, key: key, name: name, offer: offer, from: peer)
            _ = try? FileSystem.remove(statePath)
            ended = true
            release()
            return ReceivedFile(path: AtomicFile.join(inbox.directory, name), name: name, size: offer.size,
                                mediaType: offer.mediaType, sha256: got)
        } catch let e as InboxError {
            discard()
            throw e
        } catch {
            discard()
            throw .io("saving \(offer.name) in \(inbox.directory)", error)
        }
    }

    /// The transfer stopped and will be recorded for a resume once its pending writes are
    /// done (`IncomingFileWriter.suspend`): nothing more is promised for it, and a transfer of
    /// the same content waits for the record.
    func willSuspend() { inbox.recording(self, key: key) }

    /// The transfer stopped but may resume (the link dropped): records what is on the disk.
    public func suspend() {
        guard !ended else { return }
        inbox.beforeRecording()
        try? checkpoint()
        ended = true
        file?.close()
        release()
    }

    /// The transfer is over without a file (declined, cancelled, a lie, a wrong hash): the
    /// part goes.
    public func discard() {
        // Once suspended (or saved) the part's files are no longer this object's: a new
        // transfer of the same content may be writing them.
        guard !ended else { return }
        ended = true
        file?.close()
        // (A resource saved before keeps its record, and a part of its content under another
        // name is not this object's.)
        if saved == nil {
            _ = try? FileSystem.remove(dataPath)
            _ = try? FileSystem.remove(statePath)
        }
        // Last: once the key is free another transfer may make these files again.
        release()
    }

    /// Closes without recording (the part stays as it was).
    func close() {
        ended = true
        file?.close()
        release()
    }
}

