// Linux Dispatch has no Sendable annotations; its types are plain values here.
@preconcurrency import Dispatch
#if canImport(Glibc)
import Glibc
#endif

/// `Duration` in the units system calls and Dispatch take. One place for the arithmetic:
/// `Duration` keeps seconds and attoseconds apart, and each caller converting by hand had
/// its own rounding and overflow behaviour.
extension Duration {
    /// Whole nanoseconds, clamped to 0 ... `Int.max` (a negative duration is "now").
    public var clampedNanoseconds: Int {
        let (seconds, attoseconds) = components
        guard seconds >= 0 else { return 0 }
        let (s, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        if overflow { return Int.max }
        let (total, overflow2) = s.addingReportingOverflow(attoseconds / 1_000_000_000)
        return overflow2 ? Int.max : max(0, Int(total))
    }

    /// Whole milliseconds, clamped to 0 ... `Int32.max` (what `poll` takes).
    public var clampedMilliseconds: Int32 {
        Int32(clamping: clampedNanoseconds / 1_000_000)
    }

    /// The interval for `DispatchQueue.asyncAfter` and Dispatch timers.
    public var dispatchInterval: DispatchTimeInterval { .nanoseconds(clampedNanoseconds) }

    /// The `timespec` for `nanosleep` and friends.
    public var timespecValue: timespec {
        let n = clampedNanoseconds
        return timespec(tv_sec: n / 1_000_000_000, tv_nsec: n % 1_000_000_000)
    }

    /// Blocks the calling thread this long: only on a thread that may block (a queue's, a
    /// thread of its own), never a Swift task's.
    public func sleepBlocking() {
        var ts = timespecValue
        _ = try? syscall("nanosleep") { nanosleep(&ts, nil) }
    }
}
