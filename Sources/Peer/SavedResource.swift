import Session
import SystemKit
import TLS

/// The record of a resource received whole, kept beside the parts
/// (`<inbox>/.part/<key>-<name hash>.saved`, one per offered name), so that the same
/// resource offered again by the same peer under the same name is answered as complete
/// instead of being received twice: its sender
/// never heard the confirmation (the session ended while the file was being saved, or
/// before the confirmation arrived) and offers it again on the next session. A record
/// serves one such offer, within `Inbox.partRetention` of the save, and only while the file
/// it names is still in the inbox with the offered size and SHA-256 (read again: a file's
/// times prove nothing where they can be set back). Another name, other content or another
/// peer is another file, as before.
struct SavedResource {
    /// The file's name in the inbox.
    let name: String
    /// The sender's peer ID in hex, all of it (the part's key carries a prefix only).
    let peer: String
    /// The offered name's UTF-8 in hex (a name may hold any character, a line break too).
    let offeredName: String
    /// When the file was saved, in nanoseconds since 1970.
    let savedAt: Int64

    /// Where the record of `offer` (its part's `key`, and its name: each name has its own)
    /// is kept.
    static func path(_ inbox: Inbox, _ key: String, _ offer: ResourceOffer) -> String {
        let nameHash = (try? SHA256Digest.hash(Array(offer.name.utf8))).map { Fingerprint.hexString($0).prefix(16) } ?? "name"
        return AtomicFile.join(inbox.partDirectory, "\(key)-\(nameHash).saved")
    }

    /// How a record keeps an offered name.
    static func encoded(_ name: String) -> String { Fingerprint.hexString(Array(name.utf8)) }

    /// Records that `offer` from `peer` was saved as `name` in the inbox. A record that
    /// cannot be written costs a second copy at most, so it is no error: what was there goes.
    static func record(_ inbox: Inbox, key: String, name: String, offer: ResourceOffer, from peer: PeerID) {
        let text = "\(name)\n\(peer.hex)\n\(encoded(offer.name))\n\(FileIdentity.wallClockNanoseconds())\n"
        do {
            try AtomicFile.write(Array(text.utf8), to: path(inbox, key, offer), mode: 0o600)
        } catch {
            remove(inbox, key: key, offer: offer)
        }
    }

    /// The record of the part with `key`, nil when there is none or it cannot be read.
    private static func read(_ inbox: Inbox, key: String, offer: ResourceOffer) -> SavedResource? {
        guard let bytes = try? AtomicFile.readIfPresent(path(inbox, key, offer), maximumSize: 4096),
              let text = String(validating: bytes, as: UTF8.self) else { return nil }
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false)
        guard lines.count == 5, lines[4].isEmpty, let savedAt = Int64(lines[3]) else { return nil }
        return SavedResource(name: String(lines[0]), peer: String(lines[1]), offeredName: String(lines[2]), savedAt: savedAt)
    }

    /// Whether this record is of `offer` from `peer` (the same content, sender and name).
    private func isOf(_ offer: ResourceOffer, from peer: PeerID) -> Bool {
        self.peer == peer.hex && offeredName == Self.encoded(offer.name)
    }

    /// Whether the record may still answer an offer at `now`: within `Inbox.partRetention`
    /// of the save, naming a file directly in the inbox.
    private func holds(at now: Int64) -> Bool {
        // (A record is read from the disk: any time in it must not trap.)
        let (age, overflow) = now.subtractingReportingOverflow(savedAt)
        return !overflow && age < Inbox.partRetentionNanoseconds && !name.isEmpty && !name.contains("/") && name != "." && name != ".."
    }

    /// The record of the part with `key`, when it says `offer` from `peer` was saved within
    /// `Inbox.partRetention`. The file is not looked at (cheap: `Inbox.check` asks before
    /// anyone is asked about an offer).
    static func matching(_ inbox: Inbox, key: String, offer: ResourceOffer, from peer: PeerID) -> SavedResource? {
        guard let r = read(inbox, key: key, offer: offer), r.isOf(offer, from: peer),
              r.holds(at: FileIdentity.wallClockNanoseconds()) else { return nil }
        return r
    }

    /// The file the record for `offer` from `peer` names, when it is still a regular file
    /// with the offer's size and SHA-256 (read whole: call it off any queue that must stay
    /// responsive, with the part's key claimed). A record of this resource that no longer
    /// holds goes; one of the same content under another name stays.
    static func verified(_ inbox: Inbox, key: String, offer: ResourceOffer, from peer: PeerID) -> ReceivedFile? {
        guard let r = read(inbox, key: key, offer: offer), r.isOf(offer, from: peer) else { return nil }
        let file = AtomicFile.join(inbox.directory, r.name)
        guard r.holds(at: FileIdentity.wallClockNanoseconds()), let f = try? RegularFile.openIfRegular(file),
              (try? f.size()) == offer.size, let digest = try? SHA256Digest(),
              (try? f.readChunks(upTo: offer.size) { try digest.update($0) }) == offer.size,
              (try? digest.finish()) == offer.sha256 else {
            remove(inbox, key: key, offer: offer)
            return nil
        }
        return ReceivedFile(path: file, name: r.name, size: offer.size, mediaType: offer.mediaType, sha256: offer.sha256)
    }

    /// The record of `offer` is done with (it served its offer, or no longer holds).
    static func remove(_ inbox: Inbox, key: String, offer: ResourceOffer) {
        _ = try? FileSystem.remove(path(inbox, key, offer))
    }
}
