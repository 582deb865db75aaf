import SystemKit
#if canImport(Glibc)
import Glibc
#endif

/// Copies of bytes a client passed as a descriptor (a pipe, or a file this daemon may not
/// open by name), kept in the node's outbox directory while a transfer needs them. A copy is
/// what lets such bytes be offered like a file by path: hashed before the offer, read once
/// for every receiver, and offered again after a dropped link or a restart (the journal
/// names the copy). `NodeTransfers` removes a copy once no transfer refers to it.
struct Outbox: Sendable {
    /// The directory (mode 0700, made when missing).
    let directory: String
    /// Free space a copy leaves on the directory's file system (`defaultReserve`).
    let reserveBytes: UInt64
    /// The free space on a directory's file system (a seam for tests).
    private let freeBytes: @Sendable (String) throws -> UInt64

    /// How long the descriptor may give nothing before the copy is abandoned: a client that
    /// passes a pipe and never closes it must not hold a thread forever.
    static let idleTimeout: Duration = .seconds(60)

    /// Names of copies: `<16 hex digits>`; `.part` while being written.
    static let partSuffix = ".part"

    init(directory: String, reserveBytes: UInt64 = Outbox.defaultReserve,
         freeBytes: @escaping @Sendable (String) throws -> UInt64 = { try FileSystem.availableBytes(at: $0) }) throws {
        self.directory = directory
        self.reserveBytes = reserveBytes
        self.freeBytes = freeBytes
        try AtomicFile.makeDirectory(directory, mode: 0o700)
    }

    /// A new copy's path, not yet written (the caller marks it in use before `copy` writes
    /// it, so a cleanup meanwhile leaves it alone).
    func newPath() -> String {
        let n = UInt64.random(in: 0 ... .max)
        let hex = String(n, radix: 16)
        return AtomicFile.join(directory, String(repeating: "0", count: 16 - hex.count) + hex)
    }

    /// Free space a copy leaves on the outbox's file system: the daemon's state files (the
    /// journal, the trust store) must still be writable when a client passes an endless pipe.
    static let defaultReserve: UInt64 = 16 << 20

    /// Reads `fd` to its end into `path` (through `path.part`, fsynced, then renamed: the
    /// copy exists under its name only whole). Blocks: call off the cooperative pool. Errors
    /// name what failed; nothing is left behind on failure. `fd` stays the caller's.
    ///
    /// `expectedSize`: the byte count the client announced; any other count is an error. A
    /// pipe's end of file cannot tell a writer that finished from one that died, so a client
    /// that knows the size says it.
    func copy(from fd: Int32, to path: String, expectedSize: UInt64? = nil, idleTimeout: Duration = Outbox.idleTimeout) throws {
        // Each look at the free space asks for room for what may be written before the next
        // one (the rest of an announced size, if less) on top of the reserve: the reserve
        // stays free between looks too.
        func ahead(_ at: UInt64) -> UInt64 { min(Self.spaceLookEvery + Self.readBytes, expectedSize.map { $0 - min($0, at) } ?? .max) }
        try checkSpace(after: 0, ahead: ahead(0))
        let part = path + Self.partSuffix
        let file = try RegularFile.openForWriting(part)
        var done = false
        defer {
            file.close()
            if !done { _ = try? FileSystem.remove(part) }
        }
        var buffer = [UInt8](repeating: 0, count: Int(Self.readBytes))
        var at: UInt64 = 0
        let waitMS = idleTimeout.clampedMilliseconds
        while true {
            // A descriptor may be non-blocking (or a pipe whose writer is slow): wait for data.
            var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let ready = try syscall("poll", context: "the passed descriptor") { poll(&p, 1, waitMS) }
            if ready == 0 {
                throw SystemError(call: "read", code: ETIMEDOUT,
                                  context: "the passed descriptor gave nothing for \(idleTimeout.components.seconds) s after \(at) bytes")
            }
            let n = try syscallAllowingAgain("read", context: "the passed descriptor") {
                buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            }
            guard let n else { continue }
            if n == 0 { break }
            try file.write(buffer[0..<n], at: at)
            at += UInt64(n)
            if let expectedSize, at > expectedSize { throw CopyError.size(atLeast: at, expected: expectedSize) }
            if at % Self.spaceLookEvery < UInt64(n) { try checkSpace(after: at, ahead: ahead(at)) }
        }
        if let expectedSize, at != expectedSize { throw CopyError.size(atLeast: at, expected: expectedSize, ended: true) }
        try file.sync()
        try syscall("rename", context: path) { rename(part, path) }
        done = true
        try? FileSystem.syncDirectory(directory)
    }

    /// Bytes written between two looks at the free space, and read at a time.
    static let spaceLookEvery: UInt64 = 16 << 20
    static let readBytes: UInt64 = 1 << 20

    /// Throws when the outbox's file system has less than `ahead` bytes free beside the reserve.
    private func checkSpace(after bytes: UInt64, ahead: UInt64) throws {
        let free = try freeBytes(directory)
        let (need, over) = reserveBytes.addingReportingOverflow(ahead)
        if over || free < need { throw CopyError.space(after: bytes, directory: directory, reserve: reserveBytes) }
    }

    /// Removes the copies (and parts) not in `keep`; returns how many went. Failures are
    /// ignored: a copy left behind is removed the next time.
    @discardableResult
    func removeAll(except keep: Set<String>) -> Int {
        guard let names = try? FileSystem.names(in: directory) else { return 0 }
        var removed = 0
        for name in names {
            let path = AtomicFile.join(directory, name)
            let copy = name.hasSuffix(Self.partSuffix) ? String(path.dropLast(Self.partSuffix.count)) : path
            if !keep.contains(copy), (try? FileSystem.remove(path)) == true { removed += 1 }
        }
        return removed
    }
}

/// Why a passed descriptor's bytes were not copied (besides a failing call).
enum CopyError: Error, CustomStringConvertible {
    /// More bytes, or fewer by the end, than the client announced.
    case size(atLeast: UInt64, expected: UInt64, ended: Bool = false)
    /// The outbox's file system is down to its reserve.
    case space(after: UInt64, directory: String, reserve: UInt64)

    var description: String {
        switch self {
        case .size(let got, let expected, true): "the descriptor gave \(got) bytes, not the \(expected) announced (size)"
        case .size(_, let expected, false): "the descriptor gave more than the \(expected) bytes announced (size)"
        case .space(let after, let directory, let reserve):
            "stopped after \(after) bytes: \(directory)'s file system has no room for more beside the \(reserve >> 20) MiB kept free"
        }
    }
}
