import Logging

/// A long-running part of the daemon, in the shape of swift-service-lifecycle's `Service`.
///
/// `run()` works until its task is cancelled and then returns (or throws
/// `CancellationError`). Returning or throwing while the group is still running counts as a
/// failure of the whole group.
public protocol Service: Sendable {
    /// A short name for logs and errors, e.g. "control-server".
    var name: String { get }
    /// Does the service's work until cancelled.
    func run() async throws
}

/// Why a `ServiceGroup` stopped with an error.
public enum ServiceGroupError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The named service threw, or returned while it should have kept running.
    case serviceFailed(name: String, error: String)

    /// "service control-server failed: ...".
    public var description: String {
        switch self {
        case .serviceFailed(let name, let error): "service \(name) failed: \(error)"
        }
    }
}

/// Runs services side by side and stops them together: the daemon's supervisor.
///
/// - SIGTERM or SIGINT (from `signals`), or cancellation of the task calling `run()`: logs a
///   notice, awaits `onShutdown`, cancels every service and waits up to `shutdownTimeout`
///   for them to finish; `run()` then returns normally (with a warning naming any service
///   that did not stop in time, which is left running detached).
/// - SIGHUP: awaits `onReload` and keeps running.
/// - A service that throws or returns: logs an error naming it, awaits `onShutdown`, cancels
///   and waits for the rest the same way, and throws `ServiceGroupError.serviceFailed`.
///
/// Services run in unstructured tasks rather than a task group, because a task group cannot
/// return before every child has finished, and the shutdown timeout must hold even for a
/// service that ignores cancellation.
public struct ServiceGroup: Sendable {
    private let services: [any Service]
    private let logger: Logger
    private let signals: AsyncStream<ProcessSignal>?
    private let shutdownTimeout: Duration
    private let onReload: @Sendable () async -> Void
    private let onShutdown: @Sendable () async -> Void

    /// Creates a group; pass `signalStream([.terminate, .interrupt, .hangup])` as `signals`.
    public init(
        services: [any Service],
        logger: Logger,
        signals: AsyncStream<ProcessSignal>? = nil,
        shutdownTimeout: Duration = .seconds(10),
        onReload: @escaping @Sendable () async -> Void = {},
        onShutdown: @escaping @Sendable () async -> Void = {}
    ) {
        self.services = services
        self.logger = logger
        self.signals = signals
        self.shutdownTimeout = shutdownTimeout
        self.onReload = onReload
        self.onShutdown = onShutdown
    }

    /// What the supervisor loop hears about.
    private enum Event: Sendable {
        case finished(index: Int, error: String?)
        case signal(ProcessSignal)
        case cancelled
        case timeout
    }

    /// Runs every service until a shutdown signal, cancellation, or a service failure.
    public func run() async throws {
        let (events, sink) = AsyncStream<Event>.makeStream()
        // The supervisor runs in its own task so that cancelling the caller starts a graceful
        // shutdown instead of cutting short the wait for the services (an AsyncStream stops
        // delivering to a cancelled task).
        let supervisor = Task { try await supervise(events, sink) }
        try await withTaskCancellationHandler {
            try await supervisor.value
        } onCancel: {
            sink.yield(.cancelled)
        }
    }

    private func supervise(_ events: AsyncStream<Event>, _ sink: AsyncStream<Event>.Continuation) async throws {
        let tasks = services.enumerated().map { index, service in
            Task {
                do {
                    try await service.run()
                    sink.yield(.finished(index: index, error: nil))
                } catch {
                    sink.yield(.finished(index: index, error: String(describing: error)))
                }
            }
        }
        let signalTask = signals.map { signals in
            Task {
                for await signal in signals { sink.yield(.signal(signal)) }
            }
        }
        defer {
            signalTask?.cancel()
            sink.finish()
        }
        logger.debug("services started", ["services": services.map(\.name).joined(separator: ",")])

        var running = Set(services.indices)
        var failure: ServiceGroupError?
        var iterator = events.makeAsyncIterator()
        supervise: while let event = await iterator.next() {
            switch event {
            case .signal(.hangup):
                logger.notice("reloading", ["signal": "SIGHUP"])
                await onReload()
            case .signal(let signal):
                logger.notice("shutting down", ["signal": signal.description])
                break supervise
            case .cancelled:
                logger.notice("shutting down", ["reason": "cancelled"])
                break supervise
            case .finished(let index, let error):
                running.remove(index)
                let name = services[index].name
                let reason = error ?? "stopped unexpectedly"
                logger.error("service failed", ["service": name, "error": reason])
                failure = .serviceFailed(name: name, error: reason)
                break supervise
            case .timeout:
                break
            }
        }

        await onShutdown()
        signalTask?.cancel()
        for index in running { tasks[index].cancel() }
        let timer = Task {
            try? await Task.sleep(for: shutdownTimeout)
            sink.yield(.timeout)
        }
        defer { timer.cancel() }
        // Keep draining: further signals are ignored while the services stop.
        while !running.isEmpty, let event = await iterator.next() {
            switch event {
            case .finished(let index, let error):
                running.remove(index)
                logger.debug("service stopped", ["service": services[index].name, "error": error ?? ""])
            case .timeout:
                let late = running.sorted().map { services[$0].name }.joined(separator: ",")
                logger.warning("services did not stop in time",
                               ["services": late, "timeout": "\(shutdownTimeout)"])
                running.removeAll()
            case .signal, .cancelled:
                break
            }
        }
        if let failure { throw failure }
        logger.notice("all services stopped")
    }
}
