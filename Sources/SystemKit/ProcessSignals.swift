#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Process-wide signal dispositions for command-line tools.
public enum ProcessSignals {
    /// Makes SIGINT and SIGTERM end the process at once with status 0 and no output.
    ///
    /// For streaming commands (`peerlink watch`) whose output is flushed after every line,
    /// so nothing is lost; `_exit` is async-signal-safe where `exit` is not.
    public static func exitQuietlyOnInterrupt() {
        _ = signal(SIGINT) { _ in _exit(0) }
        _ = signal(SIGTERM) { _ in _exit(0) }
    }
}
