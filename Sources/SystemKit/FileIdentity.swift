internal import CEpoll
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// What tells, without reading a file, that its content is what it was: the same file (device
/// and inode), the same size, and the same times of its last content change (`modified`) and
/// last change of any kind (`changed`, which no program can set back on the file systems
/// that keep it: `RegularFile.keepsChangeTimes`). Not proof (a write through a shared
/// mapping to a page already dirty changes no time until the page is written back), so it
/// is used only where a wrong answer is caught: remembering a file's hash between offers
/// (`FileHashes`), where the receiver checks the hash of what arrived.
public struct FileIdentity: Hashable, Sendable, Codable {
    public let device: UInt64
    public let inode: UInt64
    public let size: UInt64
    /// Nanoseconds since 1970 (`st_mtim`).
    public let modified: Int64
    /// Nanoseconds since 1970 (`st_ctim`).
    public let changed: Int64

    public init(device: UInt64, inode: UInt64, size: UInt64, modified: Int64, changed: Int64) {
        self.device = device
        self.inode = inode
        self.size = size
        self.modified = modified
        self.changed = changed
    }

    init(_ info: stat) {
        self.init(device: UInt64(info.st_dev), inode: UInt64(info.st_ino), size: UInt64(info.st_size),
                  modified: Self.nanoseconds(info.st_mtim), changed: Self.nanoseconds(info.st_ctim))
    }

    /// `t` in nanoseconds since 1970, held to Int64's range: a file may carry a time past
    /// 2262 (ext4 and xfs keep one, `touch -d 2300-01-01`), and multiplying it out would trap.
    static func nanoseconds(_ t: timespec) -> Int64 {
        let (seconds, over) = Int64(t.tv_sec).multipliedReportingOverflow(by: 1_000_000_000)
        if over { return t.tv_sec < 0 ? .min : .max }
        let (sum, overAgain) = seconds.addingReportingOverflow(Int64(t.tv_nsec))
        return overAgain ? .max : sum
    }

    /// The wall clock now, in nanoseconds since 1970 (what file times are in).
    public static func wallClockNanoseconds() -> Int64 {
        var t = timespec()
        clock_gettime(CLOCK_REALTIME, &t)
        return Int64(t.tv_sec) * 1_000_000_000 + Int64(t.tv_nsec)
    }
}

extension RegularFile {
    /// Whether the file system the file is on keeps a change time that follows every write
    /// and that no program can set (`st_ctim`): the local Linux ones. Not FAT or exFAT (an SD
    /// card's boot partition: no change time, a creation or modification time instead, which
    /// `utimensat` sets), nor FUSE or network file systems (times from another program or
    /// another machine's clock). False when it cannot be told.
    public func keepsChangeTimes() -> Bool {
        let type = peerlink_file_system_type(fd)
        return type >= 0 && Self.fileSystemsKeepingChangeTimes.contains(UInt32(truncatingIfNeeded: type))
    }

    /// `statfs` magic numbers (linux/magic.h): ext2/3/4, xfs, btrfs, tmpfs, ramfs, f2fs,
    /// overlayfs, bcachefs and OpenZFS.
    static let fileSystemsKeepingChangeTimes: Set<UInt32> = [
        0xEF53, 0x5846_5342, 0x9123_683E, 0x0102_1994, 0x8584_58F6, 0xF2F5_2010, 0x794C_7630, 0xCA45_1A4E, 0x2FC1_2FC1,
    ]
}

/// `renameat2(from, to, RENAME_NOREPLACE)` (through CEpoll's shim: Swift's Glibc module does
/// not export it): 0, or -1 with errno. For `FileSystem.moveWithoutReplacing`.
func renameNoReplace(_ from: String, _ to: String) -> Int32 { peerlink_rename_noreplace(from, to) }
