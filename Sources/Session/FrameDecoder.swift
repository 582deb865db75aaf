/// Splits a byte stream into frames: fed whatever chunks the transport delivers (`append`)
/// and drained with `nextFrame()`; the frames it yields do not depend on the chunking.
///
/// Errors: the first malformed frame makes `nextFrame()` throw a `FrameError` naming the
/// frame (its index and stream offset), the field and what was wrong; the connection is
/// then over (the stream cannot be resynchronised), so every later call throws the same
/// error. An oversize length is reported as soon as the header is in, before the payload
/// is buffered, so memory stays bounded by one payload plus one appended chunk when the
/// decoder is drained after every `append`.
///
/// Large payloads (`gatherThreshold` bytes and more, the bulk data of a transfer) are
/// gathered in an array of their own once an eighth has arrived, which the frame then takes
/// whole: each byte is copied once on its way from the transport into the frame. Through the shared
/// buffer it was copied twice (into the buffer, then out into the frame's array), and the
/// buffer was compacted around it.
///
/// Unknown types: a frame of a type this side does not know is skipped (and counted in
/// `ignoredFrameCount`) when its header has the ignorable flag, and is an error otherwise.
///
/// Switching to TLS: the decoder never reads past the frame it returns, so after HELLO the
/// caller takes what is buffered (`takeBufferedBytes`), which is the start of the peer's
/// TLS handshake, and feeds the decoder TLS's plaintext from then on. The caller must not
/// ask for another frame in between: TLS's first byte (0x16) would be read as a header
/// and fail as a bad version.
public struct FrameDecoder: Sendable {
    private var buffer: [UInt8] = []
    /// Start of the first byte not yet consumed.
    private var head = 0
    /// Stream offset of the next frame's first byte (`buffer[head]`, unless a payload is
    /// being gathered: then that frame's header, already taken from the buffer).
    private var consumedBytes = 0
    /// The header of the frame whose payload is awaited, checked.
    private var pending: (header: FrameHeader, type: FrameType?)?
    /// The pending frame's payload so far, when it is gathered apart (`gathering`); the
    /// buffer then holds only bytes after it.
    private var gathered: [UInt8] = []
    private var gathering = false

    /// Payloads of at least this many bytes are gathered apart (see the type's documentation).
    public static let gatherThreshold = 8192
    /// The first error, thrown again by every later call.
    private var failure: FrameError?

    /// Frames returned or skipped so far (the index of the next frame).
    public private(set) var frameCount = 0
    /// Frames of unknown types skipped because they had the ignorable flag.
    public private(set) var ignoredFrameCount = 0

    /// A decoder at the start of a stream.
    public init() {}

    /// Bytes held that are not yet returned as frames.
    public var bufferedByteCount: Int { buffer.count - head + (gathering ? Wire.headerSize + gathered.count : 0) }

    /// Bytes of memory the decoder holds (tests: what a peer's bytes make it keep).
    var heldCapacity: Int { buffer.capacity + gathered.capacity }

    /// The stream offset of the next byte to decode.
    public var streamOffset: Int { consumedBytes }

    /// Adds bytes received from the stream.
    public mutating func append(_ bytes: some Collection<UInt8>) {
        if gathering, let length = pending?.header.length {
            let wanted = Int(length) - gathered.count
            if bytes.count <= wanted {
                gathered.append(contentsOf: bytes)
                return
            }
            gathered.append(contentsOf: bytes.prefix(wanted))
            compact()
            buffer.append(contentsOf: bytes.dropFirst(wanted))
            return
        }
        compact()
        buffer.append(contentsOf: bytes)
    }

    /// Removes and returns every buffered byte not yet decoded (see the type's documentation).
    /// Right after a frame was returned, as the type's documentation says: a payload being
    /// gathered would not be whole bytes of the stream any more.
    public mutating func takeBufferedBytes() -> [UInt8] {
        precondition(!gathering, "takeBufferedBytes while a frame's payload is being gathered")
        let rest = Array(buffer[head...])
        consumedBytes += rest.count
        pending = nil
        buffer.removeAll(keepingCapacity: false)
        head = 0
        return rest
    }

    /// The next whole frame, or nil when more bytes are needed.
    public mutating func nextFrame() throws(FrameError) -> Frame? {
        if let failure { throw failure }
        while true {
            if pending == nil {
                guard buffer.count - head >= Wire.headerSize else { return nil }
                let header = FrameHeader(buffer[head..<(head + Wire.headerSize)])
                do {
                    pending = (header, try header.check())
                } catch {
                    throw fail(error)
                }
            }
            guard let (header, type) = pending else { return nil }
            let total = Wire.headerSize + Int(header.length)
            let payload: ArraySlice<UInt8>
            if gathering {
                guard gathered.count == Int(header.length) else { return nil }
                payload = gathered[...]
            } else if buffer.count - head >= total {
                payload = buffer[(head + Wire.headerSize)..<(head + total)]
            } else {
                // Not all here: a large known payload is gathered apart from now on (what
                // the buffer holds is all of this frame: it is shorter than the frame). Only
                // once an eighth of it came: the array is made at the payload's full length,
                // and a header alone must not make a peer's connection hold 64 KiB.
                let arrived = buffer.count - head - Wire.headerSize
                if type != nil, Int(header.length) >= Self.gatherThreshold, arrived >= Int(header.length) / 8 {
                    gathered.reserveCapacity(Int(header.length))
                    gathered.append(contentsOf: buffer[(head + Wire.headerSize)...])
                    head = buffer.count
                    gathering = true
                }
                return nil
            }
            guard let type else {
                // Unknown but ignorable: skip it and look at the next one.
                consume(total)
                ignoredFrameCount += 1
                continue
            }
            let frame: Frame
            do {
                frame = try FrameParser.parse(type, flags: header.flags, streamID: header.streamID, payload: payload)
            } catch {
                throw fail(error)
            }
            consume(total)
            return frame
        }
    }

    private mutating func consume(_ n: Int) {
        if gathering {
            // The frame owns the gathered payload now; the buffer gave up its bytes already.
            gathered = []
            gathering = false
        } else {
            head += n
        }
        consumedBytes += n
        frameCount += 1
        pending = nil
    }

    /// Records `error` with the current frame's position; it is thrown from now on.
    private mutating func fail(_ error: FrameError) -> FrameError {
        var e = error
        e.frameIndex = frameCount
        e.streamOffset = consumedBytes
        if e.frameType == nil, let type = pending?.header.type ?? (buffer.count - head > 1 ? buffer[head + 1] : nil) {
            e.frameType = type
        }
        failure = e
        return e
    }

    /// Drops consumed bytes when that is cheap relative to what has been consumed, so the
    /// total work stays linear in the input.
    private mutating func compact() {
        if head == 0 { return }
        if head == buffer.count {
            buffer.removeAll(keepingCapacity: buffer.capacity <= 4 * Wire.maxPayload)
            head = 0
        } else if head >= 4096 && head >= buffer.count / 2 {
            buffer.removeSubrange(0..<head)
            head = 0
        }
    }
}
