#if canImport(Glibc)
import Glibc
#endif
import Dispatch
import Synchronization
import SystemKit

/// The signals the daemon reacts to.
public enum ProcessSignal: Int32, Sendable, CustomStringConvertible {
    /// SIGTERM: stop gracefully (what `systemctl stop` sends).
    case terminate = 15
    /// SIGINT: stop gracefully (Ctrl-C in a terminal).
    case interrupt = 2
    /// SIGHUP: reload the configuration (`systemctl reload`).
    case hangup = 1

    /// The conventional name, e.g. "SIGTERM".
    public var description: String {
        switch self {
        case .terminate: "SIGTERM"
        case .interrupt: "SIGINT"
        case .hangup: "SIGHUP"
        }
    }
}

/// The dispatch sources behind one signal stream, cancelled together when it ends.
///
/// Dispatch sources are not `Sendable`; the mutex owns them so the stream's termination
/// handler (which may run on any thread) can reach them safely.
private final class SignalSources: Sendable {
    private let sources: Mutex<[any DispatchSourceSignal]>

    init(_ sources: sending [any DispatchSourceSignal]) {
        self.sources = Mutex(sources)
    }

    func cancelAll() {
        sources.withLock { list in
            for source in list { source.cancel() }
            list.removeAll()
        }
    }
}

/// Delivers `signals` as an async stream instead of killing the process.
///
/// Each signal's default action is replaced by "ignore" (only if it is still the default, so
/// a handler installed elsewhere is left alone), then a `DispatchSource` watches for it. On
/// Linux, libdispatch installs its own handler when the source is registered, which happens
/// asynchronously on its manager thread: a signal arriving before that is ignored, so this
/// returns only once every source is registered (at most 5 s). Without the wait, a daemon
/// on a busy machine said it was ready before its SIGTERM handler was there, and a SIGTERM
/// right after that was lost (the daemon never stopped; a test harness saw it).
/// The sources are cancelled when the stream ends (its consumer stops or is cancelled); the
/// signals then stay ignored rather than reverting to killing the process.
///
/// Up to 8 undelivered signals are buffered; older ones are dropped first.
public func signalStream(_ signals: [ProcessSignal]) -> AsyncStream<ProcessSignal> {
    let (stream, continuation) = AsyncStream<ProcessSignal>.makeStream(bufferingPolicy: .bufferingNewest(8))
    let queue = DispatchQueue(label: "peerlink.signals")
    var sources: [any DispatchSourceSignal] = []
    let registered = DispatchGroup()
    for signal in Set(signals.map(\.rawValue)).sorted().compactMap(ProcessSignal.init(rawValue:)) {
        ignoreIfDefault(signal.rawValue)
        let source = DispatchSource.makeSignalSource(signal: signal.rawValue, queue: queue)
        source.setEventHandler { continuation.yield(signal) }
        registered.enter()
        source.setRegistrationHandler { registered.leave() }
        source.resume()
        sources.append(source)
    }
    // The handlers run on `queue` (a global queue's thread), never on the caller's.
    _ = registered.wait(timeout: .now() + 5)
    let owner = SignalSources(sources)
    continuation.onTermination = { _ in owner.cancelAll() }
    return stream
}

/// Sets `signo` to SIG_IGN when its disposition is still SIG_DFL.
///
/// Replacing a handler libdispatch already installed (for a second stream on the same
/// signal) would make signals that reach other threads vanish, so only the default is changed.
private func ignoreIfDefault(_ signo: Int32) {
    var current = sigaction()
    guard (try? SystemKit.syscall("sigaction", { sigaction(signo, nil, &current) })) != nil else { return }
    guard current.__sigaction_handler.sa_handler == nil else { return }  // nil is SIG_DFL
    var ignore = sigaction()
    ignore.__sigaction_handler.sa_handler = SIG_IGN
    _ = try? SystemKit.syscall("sigaction") { sigaction(signo, &ignore, nil) }
}
