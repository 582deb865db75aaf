/// Cuts messages into MESSAGE fragments and numbers them: the connection's first message
/// is 1, each next one more (wrapping past 2^32 - 1 to 1; 0 is never used).
///
/// Fragments of one message are sent together, in order, before the next message's:
/// reliable messages are delivered in the order sent (MultipeerConnectivity's `.reliable`),
/// so a later message could not be delivered before an earlier one anyway, and keeping
/// them unmixed lets the receiver hold at most one partial message.
public struct MessageFragmenter: Sendable {
    /// The id the next message gets.
    public private(set) var nextID: UInt32 = 1

    /// A fragmenter for a new connection.
    public init() {}

    /// Why a message cannot be sent.
    public enum Refusal: Error, Sendable, Hashable {
        /// Over `Wire.maxMessage` bytes.
        case tooLarge(size: Int, limit: Int)
    }

    /// The frames of one message: data cut into `Wire.maxFragmentData`-byte pieces, FIN on
    /// the last. An empty message is one empty fragment with FIN.
    public mutating func fragments(of message: [UInt8]) throws(Refusal) -> [Frame] {
        guard message.count <= Wire.maxMessage else { throw .tooLarge(size: message.count, limit: Wire.maxMessage) }
        let id = nextID
        nextID = nextID == .max ? 1 : nextID + 1
        var frames: [Frame] = []
        var start = 0
        repeat {
            let end = min(start + Wire.maxFragmentData, message.count)
            frames.append(.message(MessageFragment(messageID: id, data: message[start..<end], isFinal: end == message.count)))
            start = end
        } while start < message.count
        return frames
    }
}

/// Puts MESSAGE fragments back together and checks the sender kept the rules: one message
/// at a time, ids in sequence, at most `Wire.maxMessage` bytes.
public struct MessageAssembler: Sendable {
    /// The id the next new message must have.
    public private(set) var expectedID: UInt32 = 1
    /// The message being received.
    private var partial: [UInt8] = []
    private var inProgress = false

    /// An assembler for a new connection.
    public init() {}

    /// The most a message in progress reserves at its first fragment: below 128 KiB with the
    /// array's header and malloc's own (see `receive`).
    static let firstReserve = 128 * 1024 - 256

    /// Bytes held for the message in progress.
    public var bufferedByteCount: Int { partial.count }

    /// Bytes reserved for the message in progress (tests: see `firstReserve`).
    package var reservedByteCount: Int { partial.capacity }

    /// Why fragments were refused; the connection is closed with `reason`.
    public struct Violation: Error, Sendable, Hashable {
        /// `protocol-error` or `message-too-large`.
        public let reason: Reason
        /// What was wrong, for the CLOSE text and the log.
        public let detail: String
    }

    /// Takes one fragment; returns the whole message when it was the last.
    public mutating func receive(_ f: MessageFragment) throws(Violation) -> [UInt8]? {
        guard f.messageID == expectedID else {
            let what = inProgress ? "message \(expectedID) is not finished" : "the next message is \(expectedID)"
            throw Violation(reason: .protocolError, detail: "MESSAGE id \(f.messageID) out of sequence: \(what)")
        }
        guard partial.count + f.data.count <= Wire.maxMessage else {
            throw Violation(reason: .messageTooLarge, detail: "message \(f.messageID) is over \(Wire.maxMessage) bytes")
        }
        if f.isFinal && !inProgress {
            // A message in one fragment (most are): its bytes as they are, without a pass
            // through `partial` (no copy when the slice is a whole array).
            expectedID = expectedID == .max ? 1 : expectedID + 1
            return Array(f.data)
        }
        if !inProgress {
            // Room for this fragment and most of a next one: a message just over one fragment
            // (64 KiB written at once) is then put together without a second copy of the
            // first fragment when the array grows. Longer ones grow by doubling from there.
            // Kept under glibc's mmap threshold (128 KiB, which the daemon fixes): two whole
            // fragments are just over it, and each 64 KiB message was then an mmap, a page
            // fault per page and an munmap (a twentieth of both daemons' CPU).
            partial.reserveCapacity(min(f.data.count + Wire.maxFragmentData, Self.firstReserve))
        }
        partial += f.data
        inProgress = true
        guard f.isFinal else { return nil }
        let whole = partial
        partial = []
        inProgress = false
        expectedID = expectedID == .max ? 1 : expectedID + 1
        return whole
    }
}
