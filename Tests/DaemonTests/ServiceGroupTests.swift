#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Logging
import Synchronization
import TestSupport
import Testing
@testable import Daemon

/// A service that records what happens to it, in the style of swift-service-lifecycle's mocks.
actor MockService: Service {
    /// What `run()` does after recording "start".
    enum Behaviour: Sendable {
        /// Sleeps until cancelled, then records "cancelled" and rethrows.
        case runUntilCancelled
        /// Throws `MockFailure` after a short delay.
        case fail
        /// Returns after a short delay, as if its work were done.
        case returnEarly
        /// Ignores cancellation until `release()` is called.
        case ignoreCancellation
    }

    nonisolated let name: String
    private let behaviour: Behaviour
    private(set) var events: [String] = []
    private var held: CheckedContinuation<Void, Never>?
    private var released = false

    init(_ name: String, _ behaviour: Behaviour = .runUntilCancelled) {
        self.name = name
        self.behaviour = behaviour
    }

    func run() async throws {
        events.append("start")
        switch behaviour {
        case .runUntilCancelled:
            do {
                try await Task.sleep(for: .seconds(3600))
            } catch {
                events.append("cancelled")
                throw error
            }
        case .fail:
            try? await Task.sleep(for: .milliseconds(20))
            events.append("fail")
            throw MockFailure()
        case .returnEarly:
            try? await Task.sleep(for: .milliseconds(20))
            events.append("return")
        case .ignoreCancellation:
            if !released { await withCheckedContinuation { held = $0 } }
            events.append("released")
        }
    }

    /// Lets an `.ignoreCancellation` service finish.
    func release() {
        released = true
        held?.resume()
        held = nil
    }

    /// Waits (up to five seconds) until `run()` has recorded "start".
    func waitUntilStarted() async {
        for _ in 0..<500 where !events.contains("start") {
            try? await Task.sleep(for: .milliseconds(10))
        }
    }
}

struct MockFailure: Error, CustomStringConvertible {
    var description: String { "mock failure" }
}

/// Counts calls from `@Sendable` hooks.
final class CallCounter: Sendable {
    private let count = Mutex(0)
    var value: Int { count.withLock { $0 } }
    func increment() { count.withLock { $0 += 1 } }
}

@Suite(.ownThreads, .memoryHeavy) struct ServiceGroupTests {
    private func logger(_ memory: MemoryLogHandler) -> Logger {
        Logger(label: "test", level: .debug, handler: memory)
    }

    private func waitAll(_ services: [MockService]) async {
        for s in services { await s.waitUntilStarted() }
    }

    @Test(arguments: [ProcessSignal.terminate, .interrupt])
    func shutdownSignalCancelsEveryServiceAndReturns(_ signal: ProcessSignal) async throws {
        let a = MockService("a"), b = MockService("b")
        let memory = MemoryLogHandler()
        let shutdowns = CallCounter(), reloads = CallCounter()
        let (signals, feed) = AsyncStream<ProcessSignal>.makeStream()
        let group = ServiceGroup(services: [a, b], logger: logger(memory), signals: signals,
                                 onReload: { reloads.increment() }, onShutdown: { shutdowns.increment() })
        let running = Task { try await group.run() }
        await waitAll([a, b])
        feed.yield(signal)
        try await running.value
        #expect(await a.events == ["start", "cancelled"])
        #expect(await b.events == ["start", "cancelled"])
        #expect(shutdowns.value == 1)
        #expect(reloads.value == 0)
        let notice = memory.records.first { $0.message == "shutting down" }
        #expect(notice?.level == .notice)
        #expect(notice?.metadata["signal"] == signal.description)
        #expect(memory.records.last?.message == "all services stopped")
    }

    @Test func hangupReloadsAndKeepsRunning() async throws {
        let a = MockService("a")
        let memory = MemoryLogHandler()
        let reloads = CallCounter()
        let (signals, feed) = AsyncStream<ProcessSignal>.makeStream()
        let group = ServiceGroup(services: [a], logger: logger(memory), signals: signals,
                                 onReload: { reloads.increment() })
        let running = Task { try await group.run() }
        await a.waitUntilStarted()
        feed.yield(.hangup)
        feed.yield(.hangup)
        for _ in 0..<500 where reloads.value < 2 { try await Task.sleep(for: .milliseconds(10)) }
        #expect(reloads.value == 2)
        #expect(await a.events == ["start"])
        feed.yield(.terminate)
        try await running.value
        #expect(await a.events == ["start", "cancelled"])
        #expect(memory.records.filter { $0.message == "reloading" }.count == 2)
    }

    @Test func failingServiceCancelsTheOthersAndThrows() async throws {
        let good = MockService("good"), other = MockService("other"), bad = MockService("bad", .fail)
        let memory = MemoryLogHandler()
        let shutdowns = CallCounter()
        let group = ServiceGroup(services: [good, bad, other], logger: logger(memory),
                                 onShutdown: { shutdowns.increment() })
        await #expect(throws: ServiceGroupError.serviceFailed(name: "bad", error: "mock failure")) {
            try await group.run()
        }
        #expect(await good.events == ["start", "cancelled"])
        #expect(await other.events == ["start", "cancelled"])
        #expect(await bad.events == ["start", "fail"])
        #expect(shutdowns.value == 1)
        let error = memory.records.first { $0.level == .error }
        #expect(error?.message == "service failed")
        #expect(error?.metadata == ["service": "bad", "error": "mock failure"])
    }

    @Test func earlyReturnIsAFailure() async throws {
        let steady = MockService("steady"), quitter = MockService("quitter", .returnEarly)
        let group = ServiceGroup(services: [steady, quitter], logger: logger(MemoryLogHandler()))
        await #expect(throws: ServiceGroupError.serviceFailed(name: "quitter", error: "stopped unexpectedly")) {
            try await group.run()
        }
        #expect(await steady.events == ["start", "cancelled"])
        #expect(ServiceGroupError.serviceFailed(name: "quitter", error: "stopped unexpectedly").description
            == "service quitter failed: stopped unexpectedly")
    }

    @Test func shutdownTimeoutAbandonsAStubbornService() async throws {
        let stubborn = MockService("stubborn", .ignoreCancellation), polite = MockService("polite")
        let memory = MemoryLogHandler()
        let (signals, feed) = AsyncStream<ProcessSignal>.makeStream()
        let group = ServiceGroup(services: [stubborn, polite], logger: logger(memory), signals: signals,
                                 shutdownTimeout: .milliseconds(200))
        let running = Task { try await group.run() }
        await waitAll([stubborn, polite])
        let started = ContinuousClock.now
        feed.yield(.terminate)
        try await running.value
        let elapsed = ContinuousClock.now - started
        #expect(elapsed >= .milliseconds(200))
        // The stubborn service never ends by itself: returning at all shows it was abandoned
        // (the bound only guards against a hang on a loaded machine).
        #expect(elapsed < .seconds(60))
        #expect(await polite.events == ["start", "cancelled"])
        #expect(await stubborn.events == ["start"])
        let warning = memory.records.first { $0.level == .warning }
        #expect(warning?.message == "services did not stop in time")
        #expect(warning?.metadata["services"] == "stubborn")
        await stubborn.release()
    }

    @Test func cancellingTheCallerShutsDownGracefully() async throws {
        let a = MockService("a")
        let shutdowns = CallCounter()
        let group = ServiceGroup(services: [a], logger: logger(MemoryLogHandler()),
                                 onShutdown: { shutdowns.increment() })
        let running = Task { try await group.run() }
        await a.waitUntilStarted()
        running.cancel()
        try await running.value
        #expect(await a.events == ["start", "cancelled"])
        #expect(shutdowns.value == 1)
    }

    @Test func signalsDuringShutdownAreIgnored() async throws {
        let slow = MockService("slow", .ignoreCancellation)
        let reloads = CallCounter()
        let (signals, feed) = AsyncStream<ProcessSignal>.makeStream()
        let group = ServiceGroup(services: [slow], logger: logger(MemoryLogHandler()), signals: signals,
                                 shutdownTimeout: .seconds(5), onReload: { reloads.increment() })
        let running = Task { try await group.run() }
        await slow.waitUntilStarted()
        feed.yield(.terminate)
        try await Task.sleep(for: .milliseconds(50))
        feed.yield(.hangup)
        await slow.release()
        try await running.value
        #expect(reloads.value == 0)
        #expect(await slow.events == ["start", "released"])
    }
}

@Suite(.ownThreads, .memoryHeavy) struct SignalStreamTests {
    @Test func realHangupArrivesThroughTheStream() async throws {
        let stream = signalStream([.hangup])
        // libdispatch installs its handler asynchronously; until then SIGHUP is ignored, so
        // keep sending until one arrives.
        let sender = Task {
            for _ in 0..<250 where !Task.isCancelled {
                kill(getpid(), SIGHUP)
                try? await Task.sleep(for: .milliseconds(20))
            }
        }
        var iterator = stream.makeAsyncIterator()
        let first = await iterator.next()
        sender.cancel()
        #expect(first == .hangup)
    }

    @Test func names() {
        #expect(ProcessSignal.terminate.rawValue == SIGTERM)
        #expect(ProcessSignal.interrupt.rawValue == SIGINT)
        #expect(ProcessSignal.hangup.rawValue == SIGHUP)
        #expect(ProcessSignal.terminate.description == "SIGTERM")
    }
}
