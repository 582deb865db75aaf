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

    @Test func aPassedDescriptorIsThereWhenItsBytesAreHandedOn() async throws {
        let (ours, theirs) = try ChannelTests.pair(ChannelTests.stream)
        defer { closeQuietly(theirs) }
        let c = Channel(fd: ours, mode: .stream, label: "fds", outboxLimit: 4096, receivesDescriptors: true)
        defer { c.close() }
        // Taken in the input handler, as a control request takes its descriptor.
        let taken = Mutex<[Int32]>([])
        let signal = AsyncSignal()
        c.start(onInput: { _ in
            if let fd = c.takeDescriptor() { taken.withLock { $0.append(fd) } }
            signal.fire()
        }, onEnd: { _ in })
        let p = try Self.pipe()
        defer { closeQuietly(p.1) }
        try Self.pass(theirs, Array("request\n".utf8), [p])
        #expect(await signal.wait { !taken.withLock { $0 }.isEmpty }, "the descriptor came with its bytes")
        let fd = try #require(taken.withLock { $0.first })
        defer { closeQuietly(fd) }
        // It is the passed end: what goes in at the kept end comes out of it.
        try SocketIO.sendAll(p.1, [1, 2, 3])
        var got = [UInt8](repeating: 0, count: 3)
        #expect(read(fd, &got, 3) == 3)
        #expect(got == [1, 2, 3])
        #expect(c.takeDescriptor() == nil, "one descriptor passed, one taken")
        #expect(!Self.readersGone(p.1))
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
        #expect(c.takeDescriptor() == nil)
        #expect(Self.readersGone(p.1, seconds: 10), "the kernel closed the descriptor nobody asked for")
    }
}
