#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Splits a byte stream into newline-terminated lines: the control protocol's framing.
///
/// A state machine fed with whatever chunks the socket delivers (`append`) and drained
/// with `nextLine()`; the lines it yields do not depend on how the input was chunked.
///
/// Limits: a line longer than `maxLineBytes` (not counting "\n" or a "\r" before it) is
/// reported by `nextLine()` throwing `.lineTooLong` as soon as the buffered partial line
/// exceeds the limit, without waiting for its newline. The framer then discards the rest
/// of that line, up to and including its newline, and carries on with the next line (a
/// server normally closes the connection instead). Memory stays bounded by the limit
/// plus one `append`ed chunk when `nextLine()` is drained after every `append`.
///
/// Cost: each byte is scanned for a newline once, and consumed bytes are dropped from the
/// front of the buffer only when they are at least half of it, so the total work is
/// linear in the input.
public struct LineFramer: Sendable {
    /// Why `nextLine()` failed.
    public enum Failure: Error, Sendable, Equatable {
        /// A line exceeded `limit` bytes; it is being discarded.
        case lineTooLong(limit: Int)
    }

    /// The longest line accepted, in bytes.
    public let maxLineBytes: Int

    private var buffer: [UInt8] = []
    /// Start of the first line not yet returned.
    private var head = 0
    /// Bytes in `head..<scanned` are known to contain no newline.
    private var scanned = 0
    /// True while dropping the rest of an over-long line.
    private var discarding = false

    /// Creates a framer; `maxLineBytes` defaults to 1 MiB.
    public init(maxLineBytes: Int = 1_048_576) {
        precondition(maxLineBytes > 0, "maxLineBytes must be positive")
        self.maxLineBytes = maxLineBytes
    }

    /// The bytes held that have not been returned as lines (an incomplete line, plus any
    /// complete lines not yet taken with `nextLine()`).
    public var bufferedByteCount: Int { buffer.count - head }

    /// Adds bytes received from the stream.
    public mutating func append(_ bytes: some Collection<UInt8>) {
        compact()
        if discarding {
            // Drop everything up to and including the newline ending the long line.
            guard let newline = bytes.firstIndex(of: 0x0A) else { return }
            discarding = false
            buffer.append(contentsOf: bytes[bytes.index(after: newline)...])
            return
        }
        buffer.append(contentsOf: bytes)
    }

    /// The next complete line without its "\n" (and without a "\r" before it), or nil
    /// when no complete line is buffered.
    ///
    /// Throws `.lineTooLong` once per over-long line (see the type's documentation).
    public mutating func nextLine() throws(Failure) -> [UInt8]? {
        let newline = buffer.withUnsafeBufferPointer { buf -> Int? in
            guard scanned < buf.count, let base = buf.baseAddress,
                  let hit = memchr(base + scanned, 0x0A, buf.count - scanned) else { return nil }
            return base.distance(to: hit.assumingMemoryBound(to: UInt8.self))
        }
        guard let newline else {
            scanned = buffer.count
            // A partial line may end in the "\r" of a "\r\n", which does not count.
            let partial = buffer.count - head
            if partial > maxLineBytes + 1 || (partial == maxLineBytes + 1 && buffer[buffer.count - 1] != 0x0D) {
                // Keep nothing of the long line; drop the rest as it arrives.
                buffer.removeAll(keepingCapacity: false)
                head = 0
                scanned = 0
                discarding = true
                throw .lineTooLong(limit: maxLineBytes)
            }
            return nil
        }
        var end = newline
        if end > head, buffer[end - 1] == 0x0D { end -= 1 }
        let start = head
        head = newline + 1
        scanned = head
        if end - start > maxLineBytes { throw .lineTooLong(limit: maxLineBytes) }
        return Array(buffer[start..<end])
    }

    /// Drops consumed bytes when that is cheap relative to what has been consumed.
    private mutating func compact() {
        if head == 0 { return }
        if head == buffer.count {
            buffer.removeAll(keepingCapacity: buffer.capacity <= 4 * 65_536)
            head = 0
            scanned = 0
        } else if head >= 4096 && head >= buffer.count / 2 {
            buffer.removeSubrange(0..<head)
            scanned -= head
            head = 0
        }
    }
}
