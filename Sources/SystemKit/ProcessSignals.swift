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

    /// Makes SIGINT and SIGTERM end the process at once with 128 plus the signal's number (130,
    /// 143: what a shell reports for a command the signal killed), after removing `path` if
    /// given: for commands whose work is not done until they end by themselves (a file sent,
    /// a stream copied), which a script must not take for a success.
    public static func exitFailingOnInterrupt(removing path: String? = nil) {
        pathToRemove = path.map { strdup($0) }
        for sig in [SIGINT, SIGTERM] {
            _ = signal(sig) { sig in
                if let p = ProcessSignals.pathToRemove { unlink(p) }
                _exit(128 + sig)
            }
        }
    }

    /// Set before the handlers are, read only by them (`unlink` and `_exit` are
    /// async-signal-safe; nothing else runs in a handler).
    nonisolated(unsafe) private static var pathToRemove: UnsafeMutablePointer<CChar>?
}
