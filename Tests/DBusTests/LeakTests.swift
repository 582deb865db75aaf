import DBus
import Foundation
import Glibc
import SystemKit
import Testing
import TestSupport

/// Many calls and many subscribe/unsubscribe cycles leave nothing behind: no pending calls, no
/// subscriptions, no match rules on the bus (counted by the bus itself), no descriptors, and
/// resident memory flat after a warm-up.
///
/// Other suites run in parallel in the same process, so process-wide counts can move for
/// reasons of theirs. The checks are made so that this cannot hide a leak of ours nor make
/// the test flaky: descriptors are counted exactly for the pipe whose ends this test sends
/// (nothing else can refer to it), the process-wide descriptor count may only settle back to
/// at most its baseline, and the memory bound sits well below what a per-iteration leak of
/// the data involved would add (see each test). Suites that allocate tens of megabytes
/// (`.memoryHeavy`: big peer messages) do not run meanwhile (`.measuresMemory`).
@Suite(.measuresMemory) struct LeakTests {
    /// Memory growth allowed over a measured run, after the warm-up.
    static let rssBound = 8 << 20

    /// How many descriptors of this process refer to the pipe with inode `inode`.
    static func descriptors(of inode: String) -> Int {
        guard let d = opendir("/proc/self/fd") else { return -1 }
        defer { closedir(d) }
        var n = 0
        var buf = [CChar](repeating: 0, count: 256)
        while let e = readdir(d) {
            let name = withUnsafeBytes(of: e.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            let len = readlink("/proc/self/fd/\(name)", &buf, buf.count - 1)
            if len > 0, String(decoding: buf[..<len].map { UInt8(bitPattern: $0) }, as: UTF8.self) == inode { n += 1 }
        }
        return n
    }

    static func pipeInode(_ fd: Int32) -> String {
        var buf = [CChar](repeating: 0, count: 256)
        let len = readlink("/proc/self/fd/\(fd)", &buf, buf.count - 1)
        return len > 0 ? String(decoding: buf[..<len].map { UInt8(bitPattern: $0) }, as: UTF8.self) : "?"
    }

    /// Runs `body(i)` for each `i` in `range`, at most `width` at a time.
    static func bounded(_ range: Range<Int>, width: Int, _ body: @escaping @Sendable (Int) async throws -> Void) async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            var next = range.lowerBound
            while next < range.upperBound, next - range.lowerBound < width {
                let i = next
                group.addTask { try await body(i) }
                next += 1
            }
            while try await group.next() != nil, next < range.upperBound {
                let i = next
                group.addTask { try await body(i) }
                next += 1
            }
            try await group.waitForAll()
        }
    }

    // MARK: Calls

    /// 1,000 warm-up then 10,000 measured Echo calls (2,000 one by one, 8,000 with 16 in flight),
    /// each carrying 2 KiB, every tenth also a descriptor.
    ///
    /// The memory bound means something: a leak of either message of a call (each over 2 KiB as
    /// libdbus bytes, and again as Swift values) would add more than 10,000 × 2 KiB = 20 MiB,
    /// over twice the 8 MiB allowed; so would a leaked timer and continuation per call, at a few
    /// hundred bytes each plus the 2 KiB reply they would keep alive.
    @Test func tenThousandCallsLeaveNothingBehind() async throws {
        let pair = try await EchoPair()
        let payload = DBusValue.bytes(Array(repeating: 0xA5, count: 2048))
        var ends: [Int32] = [-1, -1]
        try #require(pipe(&ends) == 0)
        defer { closeQuietly(ends[1]) }
        let inode = Self.pipeInode(ends[0])
        let sent = UnixFD(taking: ends[0])
        #expect(Self.descriptors(of: inode) == 2)  // both ends name the same pipe
        let baseRules = try await pair.client.busMatchRuleCount(of: pair.client.uniqueName)

        @Sendable func call(_ i: Int) async throws {
            let value: DBusValue = i % 10 == 0 ? .structure([.unixFD(sent), payload]) : .structure([.uint32(UInt32(i)), payload])
            let back = try await pair.echo(value)
            guard case .structure(let m) = back, m.count == 2, m[1] == payload else { throw TestSupportError("bad echo of \(i): \(back)") }
            if i % 10 == 0 {
                guard case .unixFD(let fd) = m[0], fd.fd != sent.fd else { throw TestSupportError("no descriptor back in \(i)") }
            } else if m[0] != .uint32(UInt32(i)) {
                throw TestSupportError("wrong echo for \(i): \(m[0])")
            }
        }

        try await Self.bounded(0..<1000, width: 16, call)
        #expect(Self.descriptors(of: inode) == 2)
        let rss0 = residentSetSize()
        let fds0 = openFileDescriptorCount()

        for i in 1000..<3000 { try await call(i) }
        try await Self.bounded(3000..<11_000, width: 16, call)

        let growth = residentSetSize() - rss0
        #expect(pair.client.pendingCallCount == 0)
        #expect(pair.server.pendingCallCount == 0)
        #expect(pair.client.subscriptionCounts == (0, 0))
        #expect(try await pair.client.busMatchRuleCount(of: pair.client.uniqueName) == baseRules)
        // Every descriptor received for the pipe (1,000 of them) was closed with its message.
        #expect(Self.descriptors(of: inode) == 2)
        #expect(await eventually(timeout: .seconds(3)) { openFileDescriptorCount() <= fds0 }, "fds \(openFileDescriptorCount()) > \(fds0)")
        #expect(growth < Self.rssBound, "RSS grew by \(growth >> 10) KiB over 10,000 calls")
    }

    // MARK: Subscriptions

    /// 1,000 warm-up then 10,000 measured subscribe/unsubscribe cycles of four kinds: a rule of
    /// its own dropped at once; a well-known sender (with its owner-tracking rule); two
    /// subscriptions sharing a rule; a stream iterated by a task that is then cancelled.
    ///
    /// A rule left on the bus would be caught three ways: the bus's own count, our count, and
    /// AddMatch failing once the bus's limit of 2,048 rules per connection is reached (the
    /// distinct rules alone number 2,500).
    @Test func tenThousandSubscribeUnsubscribeCyclesLeaveNothingBehind() async throws {
        let bus = try PrivateBus()
        let client = try await BusConnection.connect(.address(bus.address), label: "client")
        let owner = try await BusConnection.connect(.address(bus.address), label: "owner")
        #expect(try await owner.requestName("org.peerlink.Leak0"))
        let baseRules = try await client.busMatchRuleCount(of: client.uniqueName)

        @Sendable func cycle(_ i: Int) async throws {
            switch i % 4 {
            case 0:
                _ = try await client.signals(MatchRule(interface: "org.peerlink.Leak", member: "Tick", arguments: [0: "\(i)"]))
            case 1:
                _ = try await client.signals(MatchRule(sender: "org.peerlink.Leak\(i % 3)", interface: "org.peerlink.Leak"))
            case 2:
                let rule = MatchRule(interface: "org.peerlink.Leak", member: "Shared")
                let a = try await client.signals(rule)
                let b = try await client.signals(rule)
                _ = (a, b)
            default:
                let s = try await client.signals(MatchRule(interface: "org.peerlink.Leak", path: ObjectPath.root.appending("t\(i % 5)")))
                let t = Task { for await _ in s {} }
                t.cancel()
                await t.value
            }
        }

        try await Self.bounded(0..<1000, width: 4, cycle)
        #expect(client.subscriptionCounts == (0, 0))
        let rss0 = residentSetSize()
        let fds0 = openFileDescriptorCount()

        for i in 1000..<6000 { try await cycle(i) }
        try await Self.bounded(6000..<11_000, width: 8, cycle)

        let growth = residentSetSize() - rss0
        #expect(client.subscriptionCounts == (0, 0))
        #expect(try await client.busMatchRuleCount(of: client.uniqueName) == baseRules)
        #expect(client.pendingCallCount == 0)
        #expect(await eventually(timeout: .seconds(3)) { openFileDescriptorCount() <= fds0 }, "fds \(openFileDescriptorCount()) > \(fds0)")
        #expect(growth < Self.rssBound, "RSS grew by \(growth >> 10) KiB over 10,000 cycles")

        // The connection still subscribes and receives normally.
        let s = Collector(try await client.signals(MatchRule(sender: "org.peerlink.Leak0", interface: "org.peerlink.Leak")))
        try owner.emitSignal("/", "org.peerlink.Leak", "Tick")
        #expect(await s.wait(for: 1).count == 1)
    }

    /// Tasks subscribing to and dropping the same rule concurrently: every subscription, once
    /// returned, receives a signal emitted after it. A `RemoveMatch` for a count that reached
    /// zero, overtaking the `AddMatch` of the next subscription, would leave that one deaf.
    @Test func concurrentChurnOnOneRuleNeverLosesTheRule() async throws {
        let bus = try PrivateBus()
        let client = try await BusConnection.connect(.address(bus.address), label: "client")
        let emitter = try await BusConnection.connect(.address(bus.address), label: "emitter")
        let baseRules = try await client.busMatchRuleCount(of: client.uniqueName)
        let rule = MatchRule(interface: "org.peerlink.Churn", member: "Tick")
        try await withThrowingTaskGroup(of: Void.self) { group in
            for task in 0..<8 {
                group.addTask {
                    for n in 0..<100 {
                        let id = UInt32(task * 1000 + n)
                        let s = try await client.signals(rule)
                        try emitter.emitSignal("/", "org.peerlink.Churn", "Tick", [.uint32(id)])
                        let seen = Collector(s)
                        let ok = await eventually(timeout: .seconds(5)) { seen.all.contains { $0.body.first == .uint32(id) } }
                        guard ok else { throw TestSupportError("subscription \(id) missed its signal") }
                    }
                }
            }
            try await group.waitForAll()
        }
        #expect(await eventually { client.subscriptionCounts == (0, 0) })
        #expect(try await client.busMatchRuleCount(of: client.uniqueName) == baseRules)
    }
}
