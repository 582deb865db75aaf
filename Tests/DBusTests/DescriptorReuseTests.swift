@testable import DBus
import Dispatch
import Foundation
import SystemKit
import Testing
import TestSupport

/// A connection whose socket gets the number of one just closed is still read.
///
/// libdispatch on Linux keeps one registration per descriptor *number* and drops a cancelled
/// source's registration only when that source is next invoked, on its own queue and then on
/// the manager queue. libdbus closes its socket as soon as it has removed its watches, so until
/// then a new socket on the same number joined the stale registration and was never added to
/// epoll: every reply to it was lost (the NoReply-after-60 s seen once in a loaded full run).
/// Here the old connection's queue is held right after its close, with a read event pending
/// for its source, while a new connection takes the number and calls.
extension ReplyStressTests {
    @Test func aSocketOnAClosedConnectionsNumberIsWatched() async throws {
        let bus = try PrivateBus()
        let sender = try await BusConnection.connect(.address(bus.address), label: "reuse-sender")
        var reused = 0
        // Until the number was taken three times (other tests open descriptors too), at most 40 tries.
        for attempt in 0..<40 where reused < 3 {
            let old = try await BusConnection.connect(.address(bus.address), label: "reuse-old")
            let number = try #require(old.socketDescriptor)
            let beforeClose = DispatchSemaphore(value: 0), afterClose = DispatchSemaphore(value: 0)
            old.queue.async { beforeClose.wait() }
            old.close()
            old.queue.async { afterClose.wait() }
            defer { afterClose.signal() }
            // A message for the old connection: its read source now has an event, and waits
            // in the old queue behind `afterClose`.
            try sender.send(.methodCall(destination: old.uniqueName, path: "/", interface: "org.x", member: "Ping"))
            #expect(try SocketIO.waitReadable(number, timeoutMilliseconds: 5000), "the message reached the old socket")
            beforeClose.signal()
            await old.waitUntilDisconnected()

            let new = try await BusConnection.connect(.address(bus.address), label: "reuse-new")
            defer { new.close() }
            if new.socketDescriptor == number { reused += 1 }
            do {
                _ = try await new.call(destination: "org.peerlink.NobodyHere", path: "/", interface: "org.x", member: "Y",
                                       timeout: .seconds(2))
                Issue.record("attempt \(attempt): a call to a missing name succeeded")
            } catch let e as BusError {
                #expect(e.name == BusError.serviceUnknown, "attempt \(attempt) (descriptor \(number) reused: \(new.socketDescriptor == number)): \(e)")
            }
        }
        #expect(reused > 0, "no attempt reused the closed socket's number: the case was not tried")
    }
}
