// Host micro-benchmark of SystemKit's readiness mechanism: Dispatch sources or one epoll
// thread of our own, for reading non-blocking sockets the way the notify path does. (The
// project now uses an epoll thread, `DescriptorWatch`, for a reason this does not measure:
// libdispatch's epoll backend crashes under source churn.)
//
//   swiftc -O -import-objc-header scripts/channel-mechanism-bench.h scripts/channel-mechanism-bench.swift \
//       -o /tmp/channel-bench && /tmp/channel-bench
//
// Two patterns over a SOCK_SEQPACKET pair, 510-byte packets (one notification each):
//   stream:    a thread writes N packets as fast as the socket takes them; the reader reads
//              until EAGAIN at each wakeup (a notification stream, a pipelining client).
//   pingpong:  one packet, the reader answers it, the next goes only then (a client that
//              waits for each reply: every packet costs a wakeup).
// It prints wall time and process CPU (user+system) per packet for each mechanism.
import Dispatch
import Foundation
#if canImport(Glibc)
import Glibc
#endif

let size = 510
let count = 200_000
let pings = 20_000

func pair() -> (Int32, Int32) {
    var fds: [Int32] = [-1, -1]
    precondition(socketpair(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue), 0, &fds) == 0)
    return (fds[0], fds[1])
}

func cpuSeconds() -> Double {
    var u = rusage()
    getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &u)
    return Double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + Double(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6
}

func setNonBlocking(_ fd: Int32) { _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) }

/// Reads until EAGAIN; returns packets read (answering each in ping-pong mode).
func drain(_ fd: Int32, _ buf: UnsafeMutableRawPointer, answer: Bool) -> Int {
    var n = 0
    while true {
        let r = recv(fd, buf, 1024, Int32(MSG_DONTWAIT))
        if r <= 0 { return n }
        n += 1
        if answer { _ = send(fd, buf, 1, Int32(MSG_NOSIGNAL)) }
    }
}

/// A reader: calls `got(n)` after each wakeup's reads; `stop()` ends it.
protocol Reader { func stop() }

final class DispatchReader: Reader, @unchecked Sendable {  // the source is only touched here and by Dispatch
    let source: DispatchSourceRead
    init(fd: Int32, answer: Bool, got: @escaping @Sendable (Int) -> Void) {
        setNonBlocking(fd)
        let q = DispatchQueue(label: "reader", target: .global(qos: .userInitiated))
        source = DispatchSource.makeReadSource(fileDescriptor: fd, queue: q)
        let buf = UnsafeMutableRawPointer.allocate(byteCount: 1024, alignment: 8)
        source.setEventHandler { got(drain(fd, buf, answer: answer)) }
        source.activate()
    }
    func stop() { source.cancel() }
}

final class EpollReader: Reader, @unchecked Sendable {  // `done` is set once before the wake-up write
    let ep: Int32
    let wake: Int32
    var thread: Thread?
    init(fd: Int32, answer: Bool, got: @escaping @Sendable (Int) -> Void) {
        setNonBlocking(fd)
        ep = epoll_create1(0)
        wake = eventfd(0, 0)
        var ev = epoll_event()
        ev.events = EPOLLIN.rawValue | EPOLLET.rawValue
        ev.data.fd = fd
        _ = epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev)
        var wev = epoll_event()
        wev.events = EPOLLIN.rawValue
        wev.data.fd = wake
        _ = epoll_ctl(ep, EPOLL_CTL_ADD, wake, &wev)
        let ep = self.ep, wake = self.wake
        thread = Thread {
            let buf = UnsafeMutableRawPointer.allocate(byteCount: 1024, alignment: 8)
            var events = [epoll_event](repeating: epoll_event(), count: 16)
            while true {
                let n = epoll_wait(ep, &events, 16, -1)
                for i in 0..<Int(max(n, 0)) {
                    if events[i].data.fd == wake { return }
                    got(drain(fd, buf, answer: answer))
                }
            }
        }
        thread!.start()
    }
    func stop() {
        var one: UInt64 = 1
        _ = write(wake, &one, 8)
    }
}

func run(_ name: String, pattern: String, make: (Int32, Bool, @escaping @Sendable (Int) -> Void) -> Reader) {
    let (a, b) = pair()
    let done = DispatchSemaphore(value: 0)
    let total = pattern == "stream" ? count : pings
    final class Count: @unchecked Sendable { var n = 0 }  // only the reader's callbacks touch it, one at a time
    let seen = Count()
    let reader = make(b, pattern == "pingpong") { n in
        seen.n += n
        if seen.n >= total { done.signal() }
    }
    let packet = [UInt8](repeating: 0x42, count: size)
    var reply = [UInt8](repeating: 0, count: 8)
    let cpu0 = cpuSeconds()
    let t0 = DispatchTime.now().uptimeNanoseconds
    for _ in 0..<total {
        _ = packet.withUnsafeBytes { send(a, $0.baseAddress, $0.count, 0) }
        if pattern == "pingpong" { _ = recv(a, &reply, reply.count, 0) }
    }
    done.wait()
    let wall = Double(DispatchTime.now().uptimeNanoseconds - t0) / 1e9
    let cpu = cpuSeconds() - cpu0
    reader.stop()
    print(String(format: "%-9@ %-9@ packets=%d wall=%.3fs wall_per_packet_us=%.2f cpu_per_packet_us=%.2f",
                 name, pattern, total, wall, wall / Double(total) * 1e6, cpu / Double(total) * 1e6))
    close(a)
}

for pattern in ["stream", "pingpong"] {
    for _ in 0..<2 {
        run("dispatch", pattern: pattern) { DispatchReader(fd: $0, answer: $1, got: $2) }
        run("epoll", pattern: pattern) { EpollReader(fd: $0, answer: $1, got: $2) }
    }
}
