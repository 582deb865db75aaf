import Dispatch
import Foundation
import Synchronization
import Testing
@testable import DNSSD
#if canImport(Glibc)
import Glibc
#endif

/// The AvahiPoll adapter driven through its Swift side, with a pipe and the real Dispatch sources.
@Suite struct DispatchPollTests {
    final class Counter: Sendable {
        let value = Mutex(0)
        func add() { value.withLock { $0 += 1 } }
        var count: Int { value.withLock { $0 } }
    }

    /// Waits (bounded) until `condition` holds.
    func eventually(_ seconds: Double = 3, _ condition: () -> Bool) async -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if condition() { return true }
            try? await Task.sleep(for: .milliseconds(5))
        }
        return condition()
    }

    /// A non-blocking pipe. Its descriptors are left open when a test ends (the adapter
    /// watches duplicates; the originals are the test's, as Avahi's are Avahi's).
    func makePipe() -> (read: Int32, write: Int32) {
        var fds: [Int32] = [-1, -1]
        #expect(pipe(&fds) == 0)
        _ = fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK)
        return (fds[0], fds[1])
    }

    @Test func readsEverythingWhenTheHandlerTakesOneByteAtATime() async {
        // Dispatch's read sources on Linux are edge-triggered: without the re-check the rest
        // of the input would never be reported.
        let queue = DispatchQueue(label: "test.poll")
        let poll = DispatchPoll(queue: queue)
        defer { queue.sync { poll.close() } }
        let (r, w) = makePipe()
        let got = Counter()
        queue.sync {
            _ = poll.addWatch(fd: r, events: Int16(POLLIN)) { _, revents in
                #expect(revents & Int16(POLLIN) != 0)
                var b: UInt8 = 0
                if read(r, &b, 1) == 1 { got.add() }
            }
        }
        let bytes = [UInt8](repeating: 7, count: 50)
        #expect(write(w, bytes, bytes.count) == 50)
        #expect(await eventually { got.count == 50 }, "read \(got.count) of 50 bytes")
    }

    @Test func alreadyReadableDescriptorIsReported() async {
        let queue = DispatchQueue(label: "test.poll")
        let poll = DispatchPoll(queue: queue)
        defer { queue.sync { poll.close() } }
        let (r, w) = makePipe()
        #expect(write(w, "x", 1) == 1)
        let calls = Counter()
        queue.sync {
            _ = poll.addWatch(fd: r, events: Int16(POLLIN)) { _, _ in
                var b: UInt8 = 0
                _ = read(r, &b, 1)
                calls.add()
            }
        }
        #expect(await eventually { calls.count == 1 })
    }

    @Test func writableAndEventsReportedDuringTheCall() async {
        let queue = DispatchQueue(label: "test.poll")
        let poll = DispatchPoll(queue: queue)
        defer { queue.sync { poll.close() } }
        let (_, w) = makePipe()  // only the write end is watched
        let calls = Counter()
        queue.sync {
            _ = poll.addWatch(fd: w, events: Int16(POLLOUT)) { watch, revents in
                #expect(revents & Int16(POLLOUT) != 0)
                #expect(watch.firedEvents == revents)
                calls.add()
                poll.updateWatch(watch, events: 0)  // stop after one
            }
        }
        #expect(await eventually { calls.count >= 1 })
        try? await Task.sleep(for: .milliseconds(100))
        #expect(calls.count == 1)
    }

    @Test func freedWatchIsNeverCalled() async {
        let queue = DispatchQueue(label: "test.poll")
        let poll = DispatchPoll(queue: queue)
        defer { queue.sync { poll.close() } }
        let (r, w) = makePipe()
        let calls = Counter()
        queue.sync {
            guard let watch = poll.addWatch(fd: r, events: Int16(POLLIN), handler: { _, _ in calls.add() }) else {
                Issue.record("addWatch failed")
                return
            }
            poll.freeWatch(watch)
            #expect(watch.freed)
        }
        #expect(write(w, "x", 1) == 1)
        try? await Task.sleep(for: .milliseconds(150))
        #expect(calls.count == 0)
    }

    @Test func hangUpIsReportedOnce() async {
        let queue = DispatchQueue(label: "test.poll")
        let poll = DispatchPoll(queue: queue)
        defer { queue.sync { poll.close() } }
        let (r, w) = makePipe()
        let hups = Counter()
        queue.sync {
            _ = poll.addWatch(fd: r, events: Int16(POLLIN)) { watch, revents in
                if revents & Int16(POLLHUP) != 0 {
                    hups.add()
                    poll.freeWatch(watch)  // what libdbus does on a disconnect
                }
            }
        }
        close(w)
        #expect(await eventually { hups.count == 1 })
        try? await Task.sleep(for: .milliseconds(100))
        #expect(hups.count == 1)
    }

    @Test func timeoutsFireOnceAndCanBeReArmedOrDisarmed() async {
        let queue = DispatchQueue(label: "test.poll")
        let poll = DispatchPoll(queue: queue)
        defer { queue.sync { poll.close() } }
        let fired = Counter()
        let t = queue.sync { poll.addTimeout(at: .now() + .milliseconds(30)) { _ in fired.add() } }
        #expect(await eventually { fired.count == 1 })
        try? await Task.sleep(for: .milliseconds(80))
        #expect(fired.count == 1, "one shot")
        queue.sync { DispatchPoll.updateTimeout(t, at: .now() + .milliseconds(10)) }
        #expect(await eventually { fired.count == 2 })
        // Armed and disarmed in one turn of the queue (two turns: a descheduled test let it fire).
        queue.sync {
            DispatchPoll.updateTimeout(t, at: .now() + .milliseconds(30))
            DispatchPoll.updateTimeout(t, at: nil)
        }
        try? await Task.sleep(for: .milliseconds(100))
        #expect(fired.count == 2, "disarmed")
        queue.sync {
            DispatchPoll.updateTimeout(t, at: .now() + .milliseconds(20))
            DispatchPoll.freeTimeout(t)
        }
        try? await Task.sleep(for: .milliseconds(100))
        #expect(fired.count == 2, "freed")
    }

    @Test func avahiAbsoluteTimesBecomeDeadlines() {
        var now = timeval()
        gettimeofday(&now, nil)
        var later = now
        later.tv_sec += 2
        let d = DispatchPoll.deadline(later)
        let delta = Double(d.uptimeNanoseconds) - Double(DispatchTime.now().uptimeNanoseconds)
        #expect(delta > 1.8e9 && delta < 2.1e9)
        var past = now
        past.tv_sec -= 5
        #expect(DispatchPoll.deadline(past) <= DispatchTime.now())
    }
}
