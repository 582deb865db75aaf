import Testing
@testable import Session

/// Replays frame streams through `FrameDecoder` in every chunking: the frames (or the
/// error) never depend on how the bytes arrived.
@Suite struct FrameDecoderTests {
    /// What feeding a stream yields: the frames, then the error if one came.
    struct Outcome: Equatable {
        var frames: [Frame] = []
        var error: FrameError?
    }

    static func run(_ chunks: [[UInt8]]) -> Outcome {
        var decoder = FrameDecoder()
        var out = Outcome()
        for chunk in chunks {
            decoder.append(chunk)
            do {
                while let f = try decoder.nextFrame() { out.frames.append(f) }
            } catch {
                out.error = error
                return out
            }
            // Bounded: at most one frame's worth plus this chunk is held.
            #expect(decoder.bufferedByteCount <= Wire.headerSize + Wire.maxPayload + chunk.count)
        }
        return out
    }

    static func chunks(_ bytes: [UInt8], size: Int) -> [[UInt8]] {
        stride(from: 0, to: bytes.count, by: size).map { Array(bytes[$0..<min($0 + size, bytes.count)]) }
    }

    static func randomSplits(_ bytes: [UInt8], seed: UInt64) -> [[UInt8]] {
        var rng = SplitMix(state: seed)
        var out: [[UInt8]] = []
        var i = 0
        while i < bytes.count {
            let n = Int.random(in: 1...max(1, min(bytes.count - i, 97)), using: &rng)
            out.append(Array(bytes[i..<(i + n)]))
            i += n
        }
        return out
    }

    /// Many frames of every type, with an ignorable unknown frame among them.
    static let stream: [UInt8] = {
        var bytes = Fixtures.encode(Fixtures.everyType)
        bytes += Fixtures.header(type: 0x7E, flags: 0x8000, stream: 3, length: 5) + [1, 2, 3, 4, 5]
        bytes += Fixtures.encode(Array(Fixtures.everyType.reversed()))
        bytes += Fixtures.encode([.unreliable([]), .resourceDone(resourceID: 1), .message(MessageFragment(messageID: 2, data: [], isFinal: true))])
        return bytes
    }()

    static let expected: [Frame] = Fixtures.everyType + Fixtures.everyType.reversed()
        + [.unreliable([]), .resourceDone(resourceID: 1), .message(MessageFragment(messageID: 2, data: [], isFinal: true))]

    @Test func everyFixedChunkSizeYieldsTheSameFrames() {
        let bytes = Self.stream
        #expect(Self.run([bytes]) == Outcome(frames: Self.expected))
        for size in [1, 2, 3, 4, 5, 7, 11, 12, 13, 64, 100, 1000, bytes.count] {
            #expect(Self.run(Self.chunks(bytes, size: size)) == Outcome(frames: Self.expected), "chunk size \(size)")
        }
    }

    @Test func everySingleSplitPointYieldsTheSameFrames() {
        let bytes = Self.stream
        for cut in 1..<bytes.count {
            #expect(Self.run([Array(bytes[..<cut]), Array(bytes[cut...])]) == Outcome(frames: Self.expected), "cut \(cut)")
        }
    }

    @Test func randomSplitsYieldTheSameFrames() {
        for seed in 1...200 as ClosedRange<UInt64> {
            #expect(Self.run(Self.randomSplits(Self.stream, seed: seed)) == Outcome(frames: Self.expected), "seed \(seed)")
        }
    }

    /// Large payloads, gathered apart from the shared buffer (`FrameDecoder.gatherThreshold`
    /// and more), among small frames: one just under the threshold, one at it, the largest,
    /// an ignorable unknown frame of 30,000 bytes (skipped through the buffer), a message.
    static let bulk: (bytes: [UInt8], frames: [Frame]) = {
        let data = (0..<Wire.maxPayload).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 8) }
        let frames: [Frame] = [
            .resourceData(resourceID: 2, data: data),
            .ping(1),
            .streamData(streamID: 3, data: Array(data.prefix(FrameDecoder.gatherThreshold))),
            .unreliable(Array(data.prefix(FrameDecoder.gatherThreshold - 1))),
            .message(MessageFragment(messageID: 9, data: Array(data.prefix(Wire.maxFragmentData)), isFinal: true)),
            .resourceData(resourceID: 2, data: Array(data.suffix(20_000))),
            .pong(1),
        ]
        var bytes = Fixtures.encode(Array(frames.prefix(2)))
        bytes += Fixtures.header(type: 0x7E, flags: 0x8000, stream: 3, length: 30_000) + [UInt8](repeating: 9, count: 30_000)
        bytes += Fixtures.encode(Array(frames.dropFirst(2)))
        return (bytes, frames)
    }()

    /// Where each frame of `bytes` starts, and the end.
    static func boundaries(_ bytes: [UInt8]) -> [Int] {
        var at = 0
        var out = [0]
        while at + Wire.headerSize <= bytes.count {
            let length = bytes[(at + 8)..<(at + 12)].reduce(0) { $0 << 8 | Int($1) }
            at += Wire.headerSize + length
            out.append(at)
        }
        return out
    }

    @Test func largePayloadsYieldTheSameFramesInEveryChunking() {
        let (bytes, frames) = Self.bulk
        let expected = Outcome(frames: frames)
        for size in [1, 5, 12, 13, 100, 4097, 8191, 16_384, 16_413, 65_536, 65_548, 65_549, bytes.count] {
            #expect(Self.run(Self.chunks(bytes, size: size)) == expected, "chunk size \(size)")
        }
        // Cut near every frame's start: in its header, just before and just after it.
        for b in Self.boundaries(bytes) {
            for cut in max(1, b - 3)...min(bytes.count - 1, b + Wire.headerSize + 3) {
                #expect(Self.run([Array(bytes[..<cut]), Array(bytes[cut...])]) == expected, "cut \(cut)")
            }
        }
        var rng = SplitMix(state: 7)
        for seed in 0..<40 {
            var pieces: [[UInt8]] = []
            var i = 0
            while i < bytes.count {
                let n = Int.random(in: 1...min(bytes.count - i, 40_000), using: &rng)
                pieces.append(Array(bytes[i..<(i + n)]))
                i += n
            }
            #expect(Self.run(pieces) == expected, "random pieces \(seed)")
        }
    }

    @Test func anErrorInAGatheredPayloadNamesTheFrameInEveryChunking() {
        // A MESSAGE with id 0 and 20,000 bytes of data, after a ping: refused by its payload,
        // which is gathered apart unless it comes in one piece.
        var bytes = Fixtures.encode([.ping(1)])
        bytes += Fixtures.header(type: FrameType.message.rawValue, length: 20_004) + [0, 0, 0, 0] + [UInt8](repeating: 1, count: 20_000)
        let whole = Self.run([bytes])
        #expect(whole.frames == [.ping(1)] && whole.error?.frameIndex == 1 && whole.error?.streamOffset == 20, "\(whole)")
        for size in [1, 12, 100, 8192, 16_384] {
            #expect(Self.run(Self.chunks(bytes, size: size)) == whole, "chunk size \(size)")
        }
    }

    @Test func bytesAfterAGatheredPayloadStayInOrder() throws {
        // The chunk that completes a gathered payload carries the next frames too.
        let big = Frame.resourceData(resourceID: 4, data: [UInt8](repeating: 3, count: 40_000))
        let bytes = Fixtures.encode([big, .ping(2), .ping(3)])
        var d = FrameDecoder()
        d.append(bytes[..<1000])
        #expect(try d.nextFrame() == nil)
        #expect(d.bufferedByteCount == 1000)
        d.append(bytes[1000...])
        #expect(try d.nextFrame() == big)
        #expect(try d.nextFrame() == .ping(2))
        #expect(try d.nextFrame() == .ping(3))
        #expect(try d.nextFrame() == nil)
        #expect(d.bufferedByteCount == 0 && d.streamOffset == bytes.count && d.frameCount == 3)
    }

    @Test func aLargeHeaderAloneDoesNotReserveItsPayload() throws {
        // Before HELLO a peer may send a header announcing 64 KiB and a few bytes: the decoder
        // holds those bytes, not a 64 KiB array, until an eighth of the payload came.
        let big = Frame.resourceData(resourceID: 4, data: [UInt8](repeating: 5, count: Wire.maxPayload))
        let bytes = Fixtures.encode([big])
        var d = FrameDecoder()
        d.append(bytes[..<(Wire.headerSize + 1)])
        #expect(try d.nextFrame() == nil)
        #expect(d.bufferedByteCount == Wire.headerSize + 1 && d.heldCapacity < 4096, "\(d.heldCapacity)")
        d.append(bytes[(Wire.headerSize + 1)..<(Wire.headerSize + Wire.maxPayload / 8)])
        #expect(try d.nextFrame() == nil)
        #expect(d.heldCapacity >= Wire.maxPayload, "gathering from an eighth on: \(d.heldCapacity)")
        d.append(bytes[(Wire.headerSize + Wire.maxPayload / 8)...])
        #expect(try d.nextFrame() == big)
    }

    @Test func ignoredFramesAreCountedAndKeepTheIndex() throws {
        var d = FrameDecoder()
        d.append(Fixtures.header(type: 0x7E, flags: 0x8000, length: 2) + [0, 0] + Fixtures.encode([.ping(1)]))
        #expect(try d.nextFrame() == .ping(1))
        #expect(d.ignoredFrameCount == 1 && d.frameCount == 2)
        #expect(try d.nextFrame() == nil)
    }

    @Test func oversizeIsReportedFromTheHeaderAlone() {
        var d = FrameDecoder()
        d.append(Fixtures.encode([.ping(1)]))
        d.append(Fixtures.header(type: FrameType.unreliable.rawValue, length: 65_537))
        #expect(throws: Never.self) { try d.nextFrame() }
        let e = FrameError(.oversize(length: 65_537, limit: 65_536), frameType: 0x11, frameIndex: 1, streamOffset: 20)
        #expect(throws: e) { try d.nextFrame() }
        // The decoder stays failed: the stream cannot be trusted after a bad frame.
        d.append([0, 0, 0])
        #expect(throws: e) { try d.nextFrame() }
        #expect(e.description == "frame 1 (UNRELIABLE at stream offset 20): payload length 65537 is over the limit of 65536 bytes")
    }

    @Test func bytesAfterHelloAreHandedOverForTLS() throws {
        let hello = Frame.hello(Hello(peerID: Fixtures.peer(1), displayName: "a", encryption: .required, role: .listener))
        let tlsStart: [UInt8] = [0x16, 0x03, 0x01, 0x02, 0x00, 0x01]
        var d = FrameDecoder()
        d.append(Fixtures.encode([hello]) + tlsStart)
        #expect(try d.nextFrame() == hello)
        #expect(d.takeBufferedBytes() == tlsStart)
        #expect(d.bufferedByteCount == 0)
        // Plaintext from TLS continues the same stream of frames.
        d.append(Fixtures.encode([.ping(5)]))
        #expect(try d.nextFrame() == .ping(5))
        #expect(d.frameCount == 2)
    }

    @Test func manyFramesInOneBufferAreLinear() throws {
        let one = Fixtures.encode([.unreliable([UInt8](repeating: 7, count: 40))])
        var big: [UInt8] = []
        for _ in 0..<100_000 { big += one }
        var d = FrameDecoder()
        d.append(big)
        var n = 0
        while try d.nextFrame() != nil { n += 1 }
        #expect(n == 100_000 && d.bufferedByteCount == 0 && d.streamOffset == big.count)
    }

    @Test func randomAndMutatedInputNeverTraps() {
        // Every input is validated: random bytes and valid streams with bytes flipped give
        // frames or one error, never a crash, and the same outcome in any chunking.
        var rng = SplitMix(state: 99)
        for round in 0..<300 {
            var bytes: [UInt8]
            if round % 2 == 0 {
                bytes = (0..<Int.random(in: 0...400, using: &rng)).map { _ in UInt8.random(in: 0...255, using: &rng) }
                if round % 4 == 0 && bytes.count > 1 { bytes[0] = 1 }  // past the version check more often
            } else {
                bytes = Self.stream
                for _ in 0..<Int.random(in: 1...4, using: &rng) {
                    bytes[Int.random(in: 0..<bytes.count, using: &rng)] = UInt8.random(in: 0...255, using: &rng)
                }
            }
            let whole = Self.run([bytes])
            #expect(Self.run(Self.randomSplits(bytes, seed: UInt64(round))) == whole, "round \(round)")
        }
    }

    @Test func maximumPayloadsInSmallChunks() {
        let frames: [Frame] = [
            .unreliable([UInt8](repeating: 0xAB, count: Wire.maxPayload)),
            .message(MessageFragment(messageID: 1, data: [UInt8](repeating: 1, count: Wire.maxFragmentData), isFinal: true)),
            .streamData(streamID: 2, data: [UInt8](repeating: 3, count: Wire.maxPayload)),
        ]
        let bytes = Fixtures.encode(frames)
        for size in [1000, 4096, 65_547, bytes.count] {
            #expect(Self.run(Self.chunks(bytes, size: size)) == Outcome(frames: frames), "chunk size \(size)")
        }
    }
}
