import DBus
import Foundation
import Testing
import TestSupport

/// Every call gets its answer, under load: a reply the bus sent must never be left unread or
/// undispatched until the call's timeout (the "lost reply" of a loaded full run, where a call to
/// a missing name ended in NoReply after 60 s although the bus answers such a call at once).
///
/// Thousands of calls to a missing name and to a live object, from several tasks at once and in
/// bursts that fill the socket's send buffer (so libdbus must finish writing from the write
/// watch), while two busy processes keep both CPUs loaded. Each call has a one-second timeout:
/// the bus and the echo server answer in far less, so a NoReply here is a reply lost or a
/// request never written.
///
/// Serialized: each test churns descriptors, which would take the number the other waits for.
@Suite(.ownThreads, .serialized, .memoryHeavy) struct ReplyStressTests {
    static let tasks = 8
    static let callsPerTask = 400
    static let churn = Int(ProcessInfo.processInfo.environment["CHURN"] ?? "150")!
    /// Calls in one burst; one in six to the live object, so that fewer than the bus's default
    /// limit of 128 pending replies per connection wait on the echo server at once.
    static let burst = 600

    @Test func everyCallIsAnsweredUnderLoad() async throws {
        let pair = try await EchoPair()
        let spinners = try (0..<2).map { _ in
            // Bounded by `timeout` too, should this process die before its defer runs.
            try ChildProcess("/usr/bin/timeout", ["300", "/bin/sh", "-c", "while :; do :; done"])
        }
        defer { for s in spinners { _ = s.stop(grace: 1) } }

        // Sequential calls from several tasks at once: a missing name and a live object, alternating.
        let lost = try await withThrowingTaskGroup(of: [String].self) { group in
            for t in 0..<Self.tasks {
                group.addTask {
                    var lost: [String] = []
                    for i in 0..<Self.callsPerTask {
                        if let failure = await Self.oneCall(pair, missing: (i + t) % 2 == 0, tag: "\(t).\(i)") {
                            lost.append(failure)
                        }
                    }
                    return lost
                }
            }
            var all: [String] = []
            for try await l in group { all += l }
            return all
        }
        #expect(lost.isEmpty, "\(lost.count) of \(Self.tasks * Self.callsPerTask) calls not answered in 1 s, first: \(lost.prefix(3))")

        // Bursts: hundreds of calls sent before any reply is read, so the outgoing queue backs up.
        for round in 0..<4 {
            let burstLost = await withTaskGroup(of: String?.self) { group in
                for i in 0..<Self.burst {
                    group.addTask { await Self.oneCall(pair, missing: i % 6 != 0, tag: "burst \(round).\(i)") }
                }
                var all: [String] = []
                for await f in group { if let f { all.append(f) } }
                return all
            }
            #expect(burstLost.isEmpty, "burst \(round): \(burstLost.count) of \(Self.burst) calls not answered in 1 s, first: \(burstLost.prefix(3))")
        }
        #expect(pair.client.pendingCallCount == 0)
    }

    /// Connections opened and closed while others call: a closed connection's descriptor number
    /// comes straight back for the next socket, and the new connection must still be read.
    /// (libdispatch on Linux keeps one registration per descriptor number until a source's
    /// cancellation is processed; a socket closed before that left the next one on the same
    /// number unwatched, and its replies were never read.)
    @Test func connectionsComingAndGoingAreAllAnswered() async throws {
        let bus = try PrivateBus()
        let spinners = try (0..<2).map { _ in
            try ChildProcess("/usr/bin/timeout", ["300", "/bin/sh", "-c", "while :; do :; done"])
        }
        defer { for s in spinners { _ = s.stop(grace: 1) } }
        let lost = try await withThrowingTaskGroup(of: [String].self) { group in
            for t in 0..<4 {
                group.addTask {
                    var lost: [String] = []
                    for i in 0..<Self.churn {
                        let c = try await BusConnection.connect(.address(bus.address), label: "churn-\(t)")
                        do {
                            _ = try await c.call(destination: "org.peerlink.NobodyHere", path: "/", interface: "org.x",
                                                 member: "Y", timeout: .seconds(1))
                            lost.append("\(t).\(i): a call to a missing name succeeded")
                        } catch let e as BusError where e.name == BusError.serviceUnknown {
                        } catch {
                            lost.append("\(t).\(i): \(error)")
                        }
                        c.close()
                    }
                    return lost
                }
            }
            var all: [String] = []
            for try await l in group { all += l }
            return all
        }
        #expect(lost.isEmpty, "\(lost.count) of \(4 * Self.churn) calls on fresh connections not answered in 1 s, first: \(lost.prefix(3))")
    }

    /// One call with a one-second timeout; nil when it got the expected answer, else what went wrong.
    static func oneCall(_ pair: EchoPair, missing: Bool, tag: String) async -> String? {
        do {
            if missing {
                _ = try await pair.client.call(destination: "org.peerlink.NobodyHere", path: "/", interface: "org.x",
                                               member: "Y", timeout: .seconds(1))
                return "\(tag): a call to a missing name succeeded"
            }
            let value = "v\(tag)"
            let r = try await pair.client.call(destination: pair.server.uniqueName, path: EchoPair.path,
                                               interface: EchoPair.iface, member: "Echo", [.variant(.string(value))],
                                               timeout: .seconds(1))
            guard r.count == 1, case .variant(let out) = r[0], out.string == value else { return "\(tag): bad echo \(r)" }
            return nil
        } catch let e as BusError {
            if missing && e.name == BusError.serviceUnknown { return nil }
            return "\(tag): \(e)"
        } catch {
            return "\(tag): \(error)"
        }
    }
}
