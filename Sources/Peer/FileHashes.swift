import Synchronization
import SystemKit

/// The SHA-256s of files this node hashed for its offers, by `FileIdentity`: a file offered
/// again unchanged (to another peer, again later, or resumed after a restart, since the
/// journal keeps them) is not read through a second time before its offer can go. Hashing
/// is the one pass over a file that runs alone, before the first byte is sent: about 0.7 s a
/// GiB on a desktop core, many seconds on a board.
///
/// Why an identity may stand for the content: a write changes the file's change time
/// (`st_ctim`), which no program can set back, on the file systems that keep one
/// (`RegularFile.keepsChangeTimes`: files elsewhere, FAT, FUSE, network ones, are hashed
/// every time). The limits, and what covers each:
/// - Times are kept to a clock tick (a jiffy), so a write just after a look may leave them
///   as they were. A file whose change time is within `racyMargin` of when it was looked at
///   is not remembered (git's "racily clean" entries, handled the same way).
/// - A write through a shared mapping to a page already dirty changes no time until the
///   page is written back; a clock set back can repeat a time. What such a change leaves
///   wrong, the receiver catches: it checks the hash of every byte it got, the transfer fails
///   with `hash-mismatch` and nothing wrong is saved; the sender then forgets that hash
///   (`forget`), so the next send reads the file again.
public final class FileHashes: Sendable {
    /// How many files are remembered; the least recently used goes first.
    public static let defaultCapacity = 1024
    /// Files changed this recently (nanoseconds) are not remembered: more than the coarsest
    /// file system time (FAT's 2 s).
    public static let defaultRacyMargin: Int64 = 3_000_000_000

    private struct Entry {
        var sha256: [UInt8]
        var used: UInt64
    }

    private struct State {
        var entries: [FileIdentity: Entry] = [:]
        var clock: UInt64 = 0
    }

    private let state = Mutex(State())
    private let capacity: Int
    /// See `defaultRacyMargin`.
    public let racyMargin: Int64

    public init(capacity: Int = defaultCapacity, racyMargin: Int64 = defaultRacyMargin) {
        self.capacity = max(1, capacity)
        self.racyMargin = racyMargin
    }

    /// Whether a file of `identity`, looked at at `lookedAt` (wall clock, nanoseconds), may be
    /// remembered: it last changed at least `racyMargin` before.
    public func mayRemember(_ identity: FileIdentity, lookedAt: Int64) -> Bool {
        lookedAt - identity.changed >= racyMargin
    }

    /// The remembered hash of the file of `identity`, if any.
    public func hash(of identity: FileIdentity) -> [UInt8]? {
        state.withLock { s in
            guard s.entries[identity] != nil else { return nil }
            s.clock += 1
            s.entries[identity]?.used = s.clock
            return s.entries[identity]?.sha256
        }
    }

    /// Remembers `sha256` for the file of `identity` (the caller checked `mayRemember`, or
    /// read it back from where it had been checked).
    public func remember(_ identity: FileIdentity, sha256: [UInt8]) {
        state.withLock { s in
            s.clock += 1
            s.entries[identity] = Entry(sha256: sha256, used: s.clock)
            guard s.entries.count > capacity, let oldest = s.entries.min(by: { $0.value.used < $1.value.used })?.key else { return }
            s.entries[oldest] = nil
        }
    }

    /// Forgets the file of `identity` (a receiver found its remembered hash wrong).
    public func forget(_ identity: FileIdentity) {
        state.withLock { _ = $0.entries.removeValue(forKey: identity) }
    }

    /// How many files are remembered.
    public var count: Int { state.withLock { $0.entries.count } }
}
