import Synchronization
import SystemKit
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Descriptors a peer passes to a `Channel` (SCM_RIGHTS): each waits for its taker and is
/// there by the time the bytes it came with are handed on; beyond the bound they are closed,
/// and a close closes those nobody took. Each passed descriptor is one end of a socket pair
/// whose other end the test keeps: that end reads end-of-file once every copy of the passed
/// one is closed. (Socket pairs, not pipes: they are made close-on-exec at once, so a child
/// another suite spawns meanwhile cannot keep a copy open.)
@Suite struct ChannelDescriptorTests {
    /// (the end to pass, the end kept).
    static func pipe() throws -> (Int32, Int32) { try DescriptorPassing.streamPair() }

    /// Whether every copy of the passed end of the pair whose kept end is `kept` is closed
    /// (waiting up to `seconds` for it: closing may finish on another thread).
    static func readersGone(_ kept: Int32, seconds: Int32 = 0) -> Bool {
        var p = pollfd(fd: kept, events: Int16(POLLIN), revents: 0)
        var byte: UInt8 = 0
        return poll(&p, 1, seconds * 1000) == 1 && recv(kept, &byte, 1, Int32(MSG_PEEK | MSG_DONTWAIT)) == 0
    }

    /// Passes the read ends of `pipes` with `bytes` from `fd` (and closes this side's copies).
    static func pass(_ fd: Int32, _ bytes: [UInt8], _ pipes: [(Int32, Int32)]) throws {
        let n = try bytes.withUnsafeBytes { try DescriptorPassing.send(fd, $0, passing: pipes.map(\.0)) }
        #expect(n == bytes.count)
        for p in pipes { closeQuietly(p.0) }
    }

    /// Each passed descriptor is there when the bytes it came with are handed on, and is
    /// said to have come with them: the read that brought it ends in the bytes it was sent
    /// with, so a reader counting the bytes knows which it belongs to (a control request's
    /// descriptor goes to that request, not to the oldest request that asks for one).
    @Test func aPassedDescriptorComesWithTheBytesItWasSentWith() async throws {
        let (ours, theirs) = try ChannelTests.pair(ChannelTests.stream)
        defer { closeQuietly(theirs) }
        let c = Channel(fd: ours, mode: .stream, label: "fds", outboxLimit: 4096, receivesDescriptors: true)
        defer { c.close() }
        // Taken in the input handler, as the control connection takes them: (bytes read
        // through the end of the chunk, the descriptors that came by then).
        let taken = Mutex<[(UInt64, [Int32])]>([])
        let read = Mutex<UInt64>(0)
        let signal = AsyncSignal()
        c.start(onInput: { chunks in
            for chunk in chunks {
                let end = read.withLock { $0 += UInt64(chunk.count); return $0 }
                let fds = c.takeDescriptors(through: end)
                if !fds.isEmpty { taken.withLock { $0.append((end, fds)) } }
            }
            signal.fire()
        }, onEnd: { _ in })
        let (p, q) = (try Self.pipe(), try Self.pipe())
        defer { closeQuietly(p.1); closeQuietly(q.1) }
        try SocketIO.sendAll(theirs, Array("aaa".utf8))
        try Self.pass(theirs, Array("bbbb".utf8), [p])
        try Self.pass(theirs, Array("cc".utf8), [q])
        #expect(await signal.wait { taken.withLock { $0.flatMap(\.1).count } == 2 }, "the descriptors came with their bytes")
        let got = taken.withLock { $0 }
        #expect(got.map(\.0) == [7, 9], "each with the read that ended in its bytes: \(got)")
        let fd = try #require(got.first?.1.first)
        // It is the passed end: what goes in at the kept end comes out of it.
        try SocketIO.sendAll(p.1, [1, 2, 3])
        var bytes = [UInt8](repeating: 0, count: 3)
        #expect(Glibc.read(fd, &bytes, 3) == 3)
        #expect(bytes == [1, 2, 3])
        for (_, fds) in got { for fd in fds { closeQuietly(fd) } }
        #expect(c.takeDescriptors(through: .max).isEmpty, "two descriptors passed, two taken")
    }

    @Test func descriptorsBeyondTheBoundAndThoseNobodyTookAreClosed() async throws {
        let (ours, theirs) = try ChannelTests.pair(ChannelTests.stream)
        defer { closeQuietly(theirs) }
        let c = Channel(fd: ours, mode: .stream, label: "fds", outboxLimit: 4096, receivesDescriptors: true)
        let seen = ChannelTests.Seen()
        seen.start(c)
        let bound = Channel.maxHeldDescriptors
        let pipes = try (0..<(bound + 2)).map { _ in try Self.pipe() }
        defer { for p in pipes { closeQuietly(p.1) } }
        // Two messages, so that each fits one receive: the bound is the channel's, not the kernel's.
        try Self.pass(theirs, [0x61], Array(pipes[0..<5]))
        try Self.pass(theirs, [0x62], Array(pipes[5...]))
        #expect(await seen.wait { seen.input.withLock { $0.joined().count } == 2 })
        for (i, p) in pipes.enumerated() {
            if i >= bound {
                #expect(Self.readersGone(p.1, seconds: 10), "pair \(i): closed beyond the bound")
            } else {
                #expect(!Self.readersGone(p.1), "pair \(i): held up to the bound")
            }
        }
        c.close()
        let closed = AsyncSignal()
        let done = Mutex(false)
        c.whenDescriptorClosed { done.withLock { $0 = true }; closed.fire() }
        #expect(await closed.wait { done.withLock { $0 } })
        for (i, p) in pipes.enumerated() {
            #expect(Self.readersGone(p.1, seconds: 10), "pair \(i): closed with the channel, since nobody took it")
        }
    }

    @Test func aChannelThatDoesNotReceiveDescriptorsLeavesNoneOpen() async throws {
        let (ours, theirs) = try ChannelTests.pair(ChannelTests.stream)
        defer { closeQuietly(theirs) }
        let c = Channel(fd: ours, mode: .stream, label: "fds", outboxLimit: 4096)
        defer { c.close() }
        let seen = ChannelTests.Seen()
        seen.start(c)
        let p = try Self.pipe()
        defer { closeQuietly(p.1) }
        try Self.pass(theirs, [1, 2], [p])
        #expect(await seen.wait { seen.input.withLock { $0.joined().count } == 2 }, "the bytes arrive")
        #expect(c.takeDescriptors(through: .max).isEmpty)
        #expect(Self.readersGone(p.1, seconds: 10), "the kernel closed the descriptor nobody asked for")
    }
}
