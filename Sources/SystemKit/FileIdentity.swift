#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// What tells, without reading a file, that its content is what it was: the same file (device
/// and inode), the same size, and the same times of its last content change (`modified`) and
/// last change of any kind (`changed`, which no program can set back). Used to remember a
/// file's hash between offers (`FileHashes`), never where a wrong answer could go unnoticed:
/// the receiver of a resource checks the hash of what arrived.
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
                  modified: Int64(info.st_mtim.tv_sec) * 1_000_000_000 + Int64(info.st_mtim.tv_nsec),
                  changed: Int64(info.st_ctim.tv_sec) * 1_000_000_000 + Int64(info.st_ctim.tv_nsec))
    }

    /// The wall clock now, in nanoseconds since 1970 (what file times are in).
    public static func wallClockNanoseconds() -> Int64 {
        var t = timespec()
        clock_gettime(CLOCK_REALTIME, &t)
        return Int64(t.tv_sec) * 1_000_000_000 + Int64(t.tv_nsec)
    }
}
