#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
// Linux Dispatch has no Sendable annotations; its queues are thread-safe.
@preconcurrency import Dispatch

/// An open regular file, for data too large to hold in memory (resources a peer sends or
/// this side offers): reads and writes at offsets, fsync, truncation. Closed exactly once,
/// by `close()` or when the last reference goes. Not for sockets (`Channel`) nor for small
/// state files (`AtomicFile`).
public final class RegularFile: @unchecked Sendable {
    /// The descriptor (-1 once closed); read by this module's extensions.
    private(set) var fd: Int32
    /// The path it was opened at, for errors.
    public let path: String

    private init(fd: Int32, path: String) {
        self.fd = fd
        self.path = path
    }

    deinit { if fd >= 0 { closeQuietly(fd) } }

    /// Opens `path` to read.
    public static func openForReading(_ path: String) throws -> RegularFile {
        RegularFile(fd: try syscall("open", context: path) { open(path, O_RDONLY | O_CLOEXEC) }, path: path)
    }

    /// Opens `path` to read when it is a regular file itself: nil for a symbolic link, a
    /// FIFO (whose open would wait for a writer), a device or a directory.
    public static func openIfRegular(_ path: String) throws -> RegularFile? {
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK)
        if fd < 0 {
            if errno == ELOOP { return nil }
            throw SystemError(call: "open", code: errno, context: path)
        }
        let file = RegularFile(fd: fd, path: path)
        var info = stat()
        guard fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFREG else { return nil }
        return file
    }

    /// Opens `path` to read and write, creating it with `mode` when it does not exist.
    public static func openForWriting(_ path: String, mode: mode_t = 0o600) throws -> RegularFile {
        RegularFile(fd: try syscall("open", context: path) { open(path, O_RDWR | O_CREAT | O_CLOEXEC, mode) }, path: path)
    }

    /// Takes `fd` (an open regular file, e.g. one a client passed); `path` names it in errors.
    /// It is closed with the object.
    public static func adopting(_ fd: Int32, path: String) -> RegularFile { RegularFile(fd: fd, path: path) }

    /// Where the open file is now, symbolic links and `..` resolved (what the kernel says:
    /// `/proc/self/fd`); nil when that cannot be told (a deleted file, no /proc).
    public func resolvedPath() -> String? {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let n = readlink("/proc/self/fd/\(fd)", &buffer, buffer.count - 1)
        guard n > 0, n < buffer.count - 1 else { return nil }
        let path = String(decoding: buffer[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return path.hasSuffix(" (deleted)") || !path.hasPrefix("/") ? nil : path
    }

    /// The file's size in bytes.
    public func size() throws -> UInt64 { try status().size }

    /// How many names the file has (hard links).
    public func linkCount() throws -> UInt64 {
        var info = stat()
        try syscall("fstat", context: path) { fstat(fd, &info) }
        return UInt64(info.st_nlink)
    }

    /// The file's size and when its content last changed (nanoseconds since 1970): together,
    /// what says a file was not modified between two looks.
    public func status() throws -> (size: UInt64, modified: Int64) {
        let now = try identity()
        return (now.size, now.modified)
    }

    /// The open file's identity now (`FileIdentity`).
    public func identity() throws -> FileIdentity {
        var info = stat()
        try syscall("fstat", context: path) { fstat(fd, &info) }
        return FileIdentity(info)
    }

    /// Up to `count` bytes from `offset`; fewer only at the end of the file.
    public func read(at offset: UInt64, count: Int) throws -> [UInt8] {
        guard count > 0 else { return [] }
        // Read straight into uninitialised storage: filling it with zeros first would be one
        // more pass over every byte a transfer sends.
        var failure: Error?
        let out = [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
            do {
                initialized = try read(into: UnsafeMutableRawBufferPointer(buffer), at: offset)
            } catch {
                failure = error
                initialized = 0
            }
        }
        if let failure { throw failure }
        return out
    }

    /// Fills `buffer` from `offset`; fewer bytes only at the end of the file. Returns how many.
    fileprivate func read(into buffer: UnsafeMutableRawBufferPointer, at offset: UInt64) throws -> Int {
        var got = 0
        while got < buffer.count {
            let n = try syscall("pread", context: path) {
                pread(fd, buffer.baseAddress! + got, buffer.count - got, off_t(offset) + off_t(got))
            }
            if n == 0 { break }
            got += n
        }
        return got
    }

    /// Reads the first `length` bytes (fewer if the file is shorter) in pieces of at most
    /// `chunk`, handing each to `body` in order; returns how many were read. `body` must not
    /// keep a piece beyond its call (copy what it keeps).
    ///
    /// While `body` handles a piece, the next is read on another thread: hashing a file
    /// (what this is for) is then bound by the hash alone, not by the hash and the copy out
    /// of the page cache one after the other (0.15 to 0.2 s a GiB here; more on an SD card).
    /// Two buffers of half a MiB take turns (the memory one buffer of 1 MiB took before: the
    /// daemon's peak RSS is measured), each filled again for its next piece: a fresh array per
    /// piece cost the kernel a page fault per 4 KiB (measured: glibc mapped allocations that
    /// large on their own), 262,000 for a GiB hashed. When `length` fits in one piece, it is
    /// read on the caller's thread alone.
    @discardableResult
    public func readChunks(upTo length: UInt64, chunk: Int = 1 << 19, _ body: (ArraySlice<UInt8>) throws -> Void) throws -> UInt64 {
        let size = Int(min(UInt64(max(chunk, 1)), max(length, 1)))
        var current = ReadAheadPiece(size: size)
        var spare: ReadAheadPiece?  // the other buffer, once made: the next piece's
        var reader: DispatchQueue?
        current.fill(from: self, at: 0, upTo: length)
        try current.check()
        var at: UInt64 = 0
        while current.count > 0 {
            let following = at + UInt64(current.count)
            // A full piece with more to come: the next is read meanwhile (a short one is the end).
            var reading: (next: ReadAheadPiece, done: DispatchGroup)?
            if current.count == size, following < length {
                let next = spare ?? ReadAheadPiece(size: size)
                let queue = reader ?? DispatchQueue(label: "peerlink.read-ahead")
                reader = queue
                let done = DispatchGroup()
                queue.async(group: done) { [self] in next.fill(from: self, at: following, upTo: length) }
                reading = (next, done)
            }
            // Waited for on every way out of this turn, a throwing body's too: the reader never
            // outlives the call (waiting again after the wait below returns at once).
            defer { reading?.done.wait() }
            try current.handOver(body)
            at = following
            guard let reading else { break }
            reading.done.wait()
            try reading.next.check()
            spare = current
            current = reading.next
        }
        return at
    }

    /// Writes all of `bytes` at `offset`: straight from their storage when it is contiguous
    /// (an array or a slice of one, what every caller passes), else from a copy.
    public func write(_ bytes: some Collection<UInt8>, at offset: UInt64) throws {
        func write(_ data: UnsafeRawBufferPointer) throws {
            var done = 0
            while done < data.count {
                done += try syscall("pwrite", context: path) {
                    pwrite(fd, data.baseAddress! + done, data.count - done, off_t(offset) + off_t(done))
                }
            }
        }
        if let written = try bytes.withContiguousStorageIfAvailable({ try write(UnsafeRawBufferPointer($0)) }) { return written }
        try Array(bytes).withUnsafeBytes { try write($0) }
    }

    /// Cuts (or extends with zeros) the file to `size` bytes.
    public func truncate(to size: UInt64) throws {
        try syscall("ftruncate", context: path) { ftruncate(fd, off_t(size)) }
    }

    /// Sets the file's permission bits (the umask does not apply).
    public func setMode(_ mode: mode_t) throws {
        try syscall("fchmod", context: path) { fchmod(fd, mode) }
    }

    /// Flushes the file's data and size to the disk.
    public func sync() throws {
        try syscall("fsync", context: path) { fsync(fd) }
    }

    /// Closes the file (once; later calls do nothing).
    public func close() {
        guard fd >= 0 else { return }
        closeQuietly(fd)
        fd = -1
    }
}

/// File-system operations on paths that resources need beside `AtomicFile`'s.
public enum FileSystem {
    /// Bytes free for an unprivileged user on the file system holding `path`.
    public static func availableBytes(at path: String) throws -> UInt64 {
        var info = statvfs()
        try syscall("statvfs", context: path) { statvfs(path, &info) }
        return UInt64(info.f_bavail) * UInt64(info.f_frsize)
    }

    /// Moves `from` to `to` unless `to` exists: false then, and nothing changes; a file another
    /// process put at `to` meanwhile is never replaced (`rename` would). Both paths must be on
    /// one file system. `renameat2(RENAME_NOREPLACE)`: one step, so a crash leaves the file
    /// under one name (ext4, xfs, btrfs, tmpfs, FAT, exFAT...); where the file system cannot
    /// do that, a hard link and an unlink; where it has no hard links either, a look and a
    /// `rename` (a file put at `to` between the two would be replaced: nothing else writes an
    /// inbox).
    public static func moveWithoutReplacing(_ from: String, to: String) throws -> Bool {
        if renameNoReplace(from, to) == 0 { return true }
        let code = errno
        if code == EEXIST { return false }
        guard code == EINVAL || code == ENOSYS || code == EOPNOTSUPP else {
            throw SystemError(call: "renameat2", code: code, context: "\(from) → \(to)")
        }
        if link(from, to) == 0 {
            try syscall("unlink", context: from) { unlink(from) }
            return true
        }
        let linkCode = errno
        if linkCode == EEXIST { return false }
        guard linkCode == EPERM || linkCode == EOPNOTSUPP || linkCode == ENOSYS else {
            throw SystemError(call: "link", code: linkCode, context: "\(from) → \(to)")
        }
        if access(to, F_OK) == 0 { return false }
        try syscall("rename", context: "\(from) → \(to)") { rename(from, to) }
        return true
    }

    /// Removes the file at `path`; true when there was one.
    @discardableResult
    public static func remove(_ path: String) throws -> Bool {
        if unlink(path) != 0 {
            let code = errno
            if code == ENOENT { return false }
            throw SystemError(call: "unlink", code: code, context: path)
        }
        return true
    }

    /// The names in `directory` (without "." and "..").
    public static func names(in directory: String) throws -> [String] {
        guard let dir = opendir(directory) else { throw SystemError(call: "opendir", code: errno, context: directory) }
        defer { closedir(dir) }
        var names: [String] = []
        while let entry = readdir(dir) {
            let name = withUnsafePointer(to: entry.pointee.d_name) { p in
                p.withMemoryRebound(to: CChar.self, capacity: Int(NAME_MAX) + 1) { String(cString: $0) }
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names.sorted()
    }

    /// `path` with symbolic links, `.` and `..` resolved (`realpath`); nil when it does not
    /// exist or cannot be looked at.
    public static func resolved(_ path: String) -> String? {
        guard let p = realpath(path, nil) else { return nil }
        defer { free(p) }
        return String(cString: p)
    }

    /// Whether `path` names the file open as `fd` (same device and inode); false when either
    /// cannot be looked at.
    public static func isSameFile(_ path: String, as fd: Int32) -> Bool {
        var byName = stat(), open = stat()
        guard stat(path, &byName) == 0, fstat(fd, &open) == 0 else { return false }
        return byName.st_dev == open.st_dev && byName.st_ino == open.st_ino
    }

    /// Whether `path` is `directory` or inside it (both absolute and resolved; compared by
    /// whole components, so `/a/bc` is not inside `/a/b`).
    public static func isInside(_ path: String, _ directory: String) -> Bool {
        let d = directory.hasSuffix("/") ? String(directory.dropLast()) : directory
        return path == d || path.hasPrefix(d + "/")
    }

    /// Flushes `directory` itself (a rename or a link in it survives a power cut).
    public static func syncDirectory(_ directory: String) throws {
        let fd = try syscall("open", context: directory) { open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC) }
        defer { closeQuietly(fd) }
        try syscall("fsync", context: directory) { fsync(fd) }
    }
}

/// One of `RegularFile.readChunks`'s two buffers. The first piece is filled on the caller's
/// thread, every other on the reader's; the caller hands a piece over only after waiting for
/// its fill (the group's wait orders the two threads), and a piece is given to the reader
/// to fill again only after it was handed over.
private final class ReadAheadPiece: @unchecked Sendable {
    private var buffer: [UInt8]
    /// Bytes the last fill read (0 at the end of the file, or after a failure).
    private(set) var count = 0
    private var failure: Error?

    init(size: Int) { buffer = [UInt8](repeating: 0, count: size) }

    /// Reads up to a buffer's worth from `offset`, not past `length`.
    func fill(from file: RegularFile, at offset: UInt64, upTo length: UInt64) {
        let want = Int(min(UInt64(buffer.count), length - offset))
        do {
            count = try buffer.withUnsafeMutableBytes { try file.read(into: UnsafeMutableRawBufferPointer(rebasing: $0[0..<want]), at: offset) }
            failure = nil
        } catch {
            count = 0
            failure = error
        }
    }

    /// Throws the last fill's error, if it failed.
    func check() throws { if let failure { throw failure } }

    /// Hands what the last fill read to `body`.
    func handOver(_ body: (ArraySlice<UInt8>) throws -> Void) throws { try body(buffer[0..<count]) }
}
