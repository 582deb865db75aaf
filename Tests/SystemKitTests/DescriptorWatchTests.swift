import Dispatch
import Foundation
import Synchronization
import SystemKit
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// `DescriptorWatch`, the one readiness mechanism: level-triggered one wakeup per handler run,
/// never two handlers of one direction at once, nothing after `cancel`'s completion, the
/// descriptor (or the duplicate) closed once, a reused descriptor number watched afresh, and
/// many watches made and cancelled from several threads while their peers hang up.
@Suite struct DescriptorWatchTests {
    typealias Signal = ChannelTests.Signal

    /// Counts handler runs and whether two ever overlapped.
    final class Runs: Sendable {
        let reads = Mutex(0)
        let writes = Mutex(0)
        let inside = Mutex(0)
        let overlapped = Mutex(false)
        let signal = Signal()

        func ran(_ counter: borrowing Mutex<Int>, _ body: () -> Void = {}) {
            if inside.withLock({ i in i += 1; return i }) > 1 { overlapped.withLock { $0 = true } }
            body()
            inside.withLock { $0 -= 1 }
            counter.withLock { $0 += 1 }
            signal.fire()
        }
    }

    static func watch(_ fd: Int32, _ runs: Runs, queue: DispatchQueue, onRead: @escaping @Sendable () -> Void = {}) -> DescriptorWatch {
        let w = DescriptorWatch(owning: fd, queue: queue)
        w.setHandlers(onReadable: { runs.ran(runs.reads, onRead) }, onWritable: { runs.ran(runs.writes) })
        return w
    }

    @Test func unreadInputFiresAgainAfterEachRunAndNeverTwiceAtOnce() async throws {
        let (mine, theirs) = try ChannelTests.pair(ChannelTests.stream)
        defer { closeQuietly(theirs) }
        let runs = Runs()
        // A handler that reads nothing and takes a moment: the input stays, so the watch fires
        // again after each run, one run at a time.
        let w = Self.watch(mine, runs, queue: DispatchQueue(label: "t.level")) { usleep(2_000) }
        w.want(read: true)
        try SocketIO.sendAll(theirs, [1])
        #expect(await runs.signal.wait { runs.reads.withLock { $0 } >= 20 })
        w.want(read: false)
        #expect(!runs.overlapped.withLock { $0 })
        // Not wanted: no more runs (at most the one already queued).
        let settled = runs.reads.withLock { $0 }
        try await Task.sleep(for: .milliseconds(50))
        #expect(runs.reads.withLock { $0 } <= settled + 1)
        w.cancel()
    }

    @Test func writableOnlyWhileWanted() async throws {
        let (mine, theirs) = try ChannelTests.pair(ChannelTests.stream)
        defer { closeQuietly(theirs) }
        let runs = Runs()
        let w = Self.watch(mine, runs, queue: DispatchQueue(label: "t.write"))
        try await Task.sleep(for: .milliseconds(20))
        #expect(runs.writes.withLock { $0 } == 0, "nothing is reported before want")
        w.want(write: true)
        #expect(await runs.signal.wait { runs.writes.withLock { $0 } >= 1 })
        w.want(write: false)
        w.cancel()
    }

    @Test func noHandlerRunsAfterCancelCompletesAndTheDescriptorIsClosed() async throws {
        let (mine, theirs) = try ChannelTests.pair(ChannelTests.stream)
        defer { closeQuietly(theirs) }
        let runs = Runs()
        let queue = DispatchQueue(label: "t.cancel")
        let w = Self.watch(mine, runs, queue: queue)
        w.want(read: true, write: true)
        try SocketIO.sendAll(theirs, [1, 2, 3])
        let done = Mutex<Int?>(nil)
        let signal = Signal()
        w.cancel {
            done.withLock { $0 = runs.reads.withLock { $0 } + runs.writes.withLock { $0 } }
            signal.fire()
        }
        #expect(await signal.wait { done.withLock { $0 } != nil })
        try await Task.sleep(for: .milliseconds(30))
        #expect(runs.reads.withLock { $0 } + runs.writes.withLock { $0 } == done.withLock { $0 })
        // Closed: the peer reads the end of file.
        #expect(try ChannelTests.receive(theirs) == [])
    }

    @Test func aDuplicateIsClosedAndTheOriginalStaysOpen() async throws {
        let (mine, theirs) = try ChannelTests.pair(ChannelTests.stream)
        defer { closeQuietly(mine); closeQuietly(theirs) }
        let w = try DescriptorWatch(duplicating: mine, queue: DispatchQueue(label: "t.dup"))
        #expect(w.fd != mine)
        let dup = w.fd
        let signal = Signal()
        let done = Mutex(false)
        w.cancel { done.withLock { $0 = true }; signal.fire() }
        #expect(await signal.wait { done.withLock { $0 } })
        // Closed (other suites may have taken the number meanwhile: then it is another socket).
        #expect(fcntl(dup, F_GETFD) == -1 || ChannelTests.inode(dup) != ChannelTests.inode(mine), "the duplicate is closed")
        #expect(fcntl(mine, F_GETFD) != -1, "the original is its owner's")
    }

    /// The number of a cancelled and closed descriptor, taken by a new socket at once: the new
    /// watch reports the new socket's input (the old registration is gone, not inherited), and
    /// the old watch's handler never runs again.
    @Test func aReusedNumberIsWatchedAfresh() async throws {
        for _ in 0..<200 {
            let (old, oldPeer) = try ChannelTests.pair(ChannelTests.stream)
            let oldRuns = Runs()
            let q = DispatchQueue(label: "t.reuse")
            let w1 = Self.watch(old, oldRuns, queue: q)
            w1.want(read: true)
            let gone = Signal()
            let closed = Mutex(false)
            w1.cancel { closed.withLock { $0 = true }; gone.fire() }
            #expect(await gone.wait { closed.withLock { $0 } })
            closeQuietly(oldPeer)
            let (new, newPeer) = try ChannelTests.pair(ChannelTests.stream)
            defer { closeQuietly(newPeer) }
            let runs = Runs()
            let w2 = Self.watch(new, runs, queue: q) { _ = try? SocketIO.receive(new) }
            w2.want(read: true)
            try SocketIO.sendAll(newPeer, [9])
            #expect(await runs.signal.wait { runs.reads.withLock { $0 } >= 1 }, "fd \(new) (old \(old))")
            #expect(oldRuns.reads.withLock { $0 } == 0)
            w2.cancel()
        }
    }

    /// Channels made and torn down from four threads at once while their peers hang up (and a
    /// third of them torn down by us first): the churn under which libdispatch's own sources
    /// crashed its manager thread. Every channel sees its end, none hangs.
    @Test func churnFromManyThreadsWithHangups() async throws {
        let threads = 4, lifetimes = 2_500
        try await withThrowingTaskGroup(of: Int.self) { group in
            for t in 0..<threads {
                group.addTask {
                    try await onThread {
                        var ended = 0
                        for i in 0..<lifetimes {
                            let (mine, theirs) = try ChannelTests.pair(ChannelTests.stream)
                            let c = Channel(fd: mine, mode: .stream, label: "churn\(t)", outboxLimit: 1 << 20)
                            let end = DispatchSemaphore(value: 0)
                            c.start(onInput: { _ in }, onEnd: { _ in end.signal() })
                            // Half of them with a full socket, so writing is wanted too.
                            if i % 2 == 0 { _ = c.send([UInt8](repeating: 7, count: 300_000)) }
                            if i % 3 == 0 {
                                c.close()
                                closeQuietly(theirs)
                                ended += 1
                                continue
                            }
                            try SocketIO.sendAll(theirs, [1])
                            closeQuietly(theirs)
                            if end.wait(timeout: .now() + 5) == .success { ended += 1 }
                            c.close()
                        }
                        return ended
                    }
                }
            }
            for try await ended in group { #expect(ended == lifetimes) }
        }
    }
}
