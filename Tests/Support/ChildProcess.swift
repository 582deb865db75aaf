import Foundation
import Synchronization
import SystemKit
#if canImport(Glibc)
import Glibc
#endif

/// A child process started with `posix_spawn` and reaped with `waitpid`.
///
/// Foundation's `Process` on Linux reaps children from a run-loop thread whose handlers
/// did not fire reliably here; this helper has no such machinery.
public final class ChildProcess: Sendable {
    /// The child's process id.
    public let pid: pid_t
    private let status = Mutex<Int32?>(nil)
    private let killedAtStop = Atomic<Bool>(false)

    /// Starts `path` with `arguments`; the child's stdin/stdout/stderr become the given
    /// descriptors (nil: /dev/null). Extra environment entries are added to ours.
    public init(_ path: String, _ arguments: [String], stdin: Int32? = nil, stdout: Int32? = nil, stderr: Int32? = nil,
                environment: [String: String] = [:]) throws {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        for (fd, target) in [(stdin, Int32(0)), (stdout, 1), (stderr, 2)] {
            if let fd {
                posix_spawn_file_actions_adddup2(&actions, fd, target)
            } else {
                posix_spawn_file_actions_addopen(&actions, target, "/dev/null", target == 0 ? O_RDONLY : O_WRONLY, 0)
            }
        }
        // The child keeps 0, 1 and 2 only. Tests run in parallel: a descriptor another test
        // opened without close-on-exec (a pipe it reads to its end, say) would otherwise live
        // on in this child, and that test would wait for as long as the child runs.
        try Self.closeFromThree(&actions)
        var env = ProcessInfo.processInfo.environment
        for (k, v) in environment { env[k] = v }
        let argv = ([path] + arguments).map { strdup($0) } + [nil]
        let envp = env.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            argv.forEach { free($0) }
            envp.forEach { free($0) }
        }
        // Threads of Dispatch block signals, and a child inherits the mask: without this a
        // child started from a worker thread never sees SIGTERM.
        var attr = posix_spawnattr_t()
        posix_spawnattr_init(&attr)
        defer { posix_spawnattr_destroy(&attr) }
        var empty = sigset_t(), defaults = sigset_t()
        sigemptyset(&empty)
        sigemptyset(&defaults)
        for sig in [SIGTERM, SIGINT, SIGHUP, SIGPIPE, SIGCHLD] { sigaddset(&defaults, sig) }
        posix_spawnattr_setsigmask(&attr, &empty)
        posix_spawnattr_setsigdefault(&attr, &defaults)
        posix_spawnattr_setflags(&attr, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        var child: pid_t = 0
        let rc = posix_spawn(&child, path, &actions, &attr, argv, envp)
        guard rc == 0 else { throw SystemError(call: "posix_spawn", code: rc, context: path) }
        pid = child
    }

    /// Adds "close every descriptor from 3 up" to `actions` (glibc 2.34's
    /// posix_spawn_file_actions_addclosefrom_np, which Swift's Glibc module does not import:
    /// looked up once by name).
    private static func closeFromThree(_ actions: inout posix_spawn_file_actions_t) throws {
        guard let addCloseFrom = Self.addCloseFrom else {
            throw TestSupportError("posix_spawn_file_actions_addclosefrom_np is missing (glibc 2.34 or later is needed)")
        }
        let rc = addCloseFrom(&actions, 3)
        guard rc == 0 else { throw SystemError(call: "posix_spawn_file_actions_addclosefrom_np", code: rc) }
    }

    private typealias AddCloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32
    private static let addCloseFrom: AddCloseFrom? = dlsym(nil, "posix_spawn_file_actions_addclosefrom_np")
        .map { unsafeBitCast($0, to: AddCloseFrom.self) }

    /// Waits for the child to exit (at most `timeout` seconds; nil: no limit) and returns its
    /// wait status, or nil on timeout. Blocks the calling thread.
    @discardableResult
    public func wait(timeout: Double? = nil) -> Int32? {
        if let s = status.withLock({ $0 }) { return s }
        let deadline = timeout.map { Date().addingTimeInterval($0) }
        while true {
            var st: Int32 = 0
            let r = waitpid(pid, &st, deadline == nil ? 0 : WNOHANG)
            if r == pid {
                status.withLock { $0 = st }
                return st
            }
            if r == -1 && errno != EINTR { return status.withLock { $0 } ?? -1 }
            if let deadline {
                if Date() >= deadline { return nil }
                usleep(10_000)
            }
        }
    }

    /// The exit code of a child that exited normally (128 + signal for a killed one).
    public static func exitCode(_ st: Int32) -> Int32 {
        (st & 0x7f) == 0 ? (st >> 8) & 0xff : 128 + (st & 0x7f)
    }

    /// Sends SIGTERM, waits up to `grace` seconds, then SIGKILL; returns the wait status.
    @discardableResult
    public func stop(grace: Double = 5) -> Int32 {
        if let s = status.withLock({ $0 }) { return s }
        kill(pid, SIGTERM)
        if let s = wait(timeout: grace) { return s }
        killedAtStop.store(true, ordering: .relaxed)
        kill(pid, SIGKILL)
        return wait() ?? -1
    }

    /// Whether `stop` had to kill the child: it did not exit within its grace after SIGTERM
    /// (a hang at stop, which a test that stops it should report).
    public var neededKillAtStop: Bool { killedAtStop.load(ordering: .relaxed) }

    deinit { if status.withLock({ $0 }) == nil { stop() } }
}
