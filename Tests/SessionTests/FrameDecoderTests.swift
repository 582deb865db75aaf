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
