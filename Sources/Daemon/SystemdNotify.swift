#if canImport(Glibc)
import Glibc
#endif
import FoundationEssentials
import SystemKit

/// Talks to systemd's service manager with the `sd_notify` protocol, without libsystemd.
///
/// Each message is one datagram of newline-separated `KEY=VALUE` assignments sent to the
/// Unix socket named in `NOTIFY_SOCKET` (a path, or `@name` in the abstract namespace). When
/// the variable is unset (not started by systemd, or `Type=simple`) every call does nothing.
///
/// The notifier reads the environment once, when created, and keeps it: systemd's own
/// `sd_notify(unset_environment=1)` is deliberately not imitated, because changing the
/// process environment from a multithreaded program is unsafe.
public struct SystemdNotifier: Sendable {
    private let socketName: String?
    private let watchdogMicroseconds: UInt64?

    /// Reads `NOTIFY_SOCKET`, `WATCHDOG_USEC` and `WATCHDOG_PID` from `environment`.
    public init(environment: [String: String] = ProcessInfo.processInfo.environment) {
        if let name = environment["NOTIFY_SOCKET"], name.hasPrefix("/") || (name.hasPrefix("@") && name.count > 1) {
            socketName = name
        } else {
            socketName = nil
        }
        watchdogMicroseconds = SystemdNotifier.watchdogMicroseconds(in: environment)
    }

    /// Whether `NOTIFY_SOCKET` names a socket, so messages are sent at all.
    public var isEnabled: Bool { socketName != nil }

    /// The interval systemd expects `WATCHDOG=1` within (`WATCHDOG_USEC`), or nil when the
    /// watchdog is off, the value is invalid, or `WATCHDOG_PID` names another process.
    /// Send at half this interval.
    public var watchdogInterval: Duration? {
        watchdogMicroseconds.map { Duration.microseconds(Int64(clamping: $0)) }
    }

    /// Sends `state` (e.g. "READY=1\nSTATUS=serving"); returns whether it was delivered.
    /// Failures are never thrown: a daemon must not stop because systemd is unreachable.
    @discardableResult
    public func notify(_ state: String) -> Bool {
        guard let socketName else { return false }
        do {
            try UnixDatagram.send(Array(state.utf8), to: socketName)
            return true
        } catch {
            return false
        }
    }

    /// Start-up is finished: `READY=1` with a status line.
    public func ready(status: String) {
        notify("READY=1\nSTATUS=\(SystemdNotifier.oneLine(status))")
    }

    /// Shutdown has begun: `STOPPING=1`.
    public func stopping() {
        notify("STOPPING=1")
    }

    /// A reload has begun: `RELOADING=1` with `MONOTONIC_USEC`, as `Type=notify-reload`
    /// (systemd 253 and later) requires. Send `ready(status:)` when the reload is done.
    public func reloading() {
        notify("RELOADING=1\nMONOTONIC_USEC=\(SystemdNotifier.monotonicMicroseconds())")
    }

    /// Pets the watchdog: `WATCHDOG=1`.
    public func watchdog() {
        notify("WATCHDOG=1")
    }

    /// Sets the status line `systemctl status` shows: `STATUS=...`.
    public func status(_ text: String) {
        notify("STATUS=\(SystemdNotifier.oneLine(text))")
    }

    // MARK: Helpers

    /// A status text with newlines replaced, since a newline would start a new assignment.
    static func oneLine(_ text: String) -> String {
        String(text.map { $0 == "\n" || $0 == "\r" || $0 == "\r\n" ? " " : $0 })
    }

    /// Parses `WATCHDOG_USEC`, honouring `WATCHDOG_PID` when it is set.
    static func watchdogMicroseconds(in environment: [String: String]) -> UInt64? {
        guard let text = environment["WATCHDOG_USEC"], let usec = UInt64(text), usec > 0 else { return nil }
        if let pidText = environment["WATCHDOG_PID"] {
            // getpid cannot fail, so it bypasses the syscall helper.
            guard let pid = Int32(pidText), pid == getpid() else { return nil }
        }
        return usec
    }

    /// `CLOCK_MONOTONIC` in microseconds, the clock systemd compares `MONOTONIC_USEC` with.
    static func monotonicMicroseconds() -> UInt64 {
        var ts = timespec()
        guard (try? syscall("clock_gettime", { clock_gettime(CLOCK_MONOTONIC, &ts) })) != nil else { return 0 }
        return UInt64(ts.tv_sec) * 1_000_000 + UInt64(ts.tv_nsec) / 1000
    }
}
