import Foundation
import SystemKit
#if canImport(Glibc)
import Glibc
#endif

/// An error from a test helper, with what it was doing.
public struct TestSupportError: Error, CustomStringConvertible {
    /// What went wrong.
    public let description: String
    /// Creates an error.
    public init(_ description: String) { self.description = description }
}

/// A private `dbus-daemon` started for one test, on a socket in a fresh temporary directory.
/// Needs no root and touches no system bus. Stopped by `stop()` or when released.
public final class PrivateBus: Sendable {
    /// The bus address, e.g. `unix:path=/tmp/peerlink-bus-XYZ/bus`.
    public let address: String
    /// The temporary directory holding the socket and config.
    public let directory: String
    private let process: ChildProcess

    /// Starts the daemon and waits until it prints its address.
    public init() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("peerlink-bus-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        directory = dir
        // A session-style bus on our own socket; the stats interface lets tests count match rules.
        let config = """
        <!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
         "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
        <busconfig>
          <type>session</type>
          <listen>unix:path=\(dir)/bus</listen>
          <auth>EXTERNAL</auth>
          <policy context="default">
            <allow send_destination="*" eavesdrop="true"/>
            <allow eavesdrop="true"/>
            <allow own="*"/>
          </policy>
          <limit name="max_match_rules_per_connection">2048</limit>
        </busconfig>
        """
        try config.write(toFile: dir + "/bus.conf", atomically: true, encoding: .utf8)
        // Close-on-exec: tests run in parallel, and a program another test starts must not
        // keep this write end (this read would then never see end-of-file). The child gets its
        // stdout through dup2, which clears the flag. (pipe2 is not imported; in the instant
        // between pipe and fcntl ChildProcess still keeps it from its children.)
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else { throw TestSupportError("pipe failed") }
        try? setCloseOnExec(fds[0])
        try? setCloseOnExec(fds[1])
        let child: ChildProcess
        do {
            child = try ChildProcess("/usr/bin/dbus-daemon",
                                     ["--config-file=\(dir)/bus.conf", "--nofork", "--print-address=1", "--nopidfile"], stdout: fds[1])
        } catch {
            closeQuietly(fds[0]); closeQuietly(fds[1])
            throw TestSupportError("cannot start /usr/bin/dbus-daemon (install the Debian package dbus-daemon): \(error)")
        }
        closeQuietly(fds[1])
        defer { closeQuietly(fds[0]) }
        process = child
        // The first line of stdout is the address, printed once the daemon listens.
        var line = [UInt8]()
        var byte: UInt8 = 0
        while read(fds[0], &byte, 1) == 1, byte != 0x0A { line.append(byte) }
        let text = String(decoding: line, as: UTF8.self)
        guard text.hasPrefix("unix:") else {
            child.stop()
            throw TestSupportError("dbus-daemon did not print its address")
        }
        address = String(text)
    }

    /// The daemon's process id.
    public var pid: Int32 { process.pid }

    /// Stops the daemon (connections to it see a disconnect) and removes its directory.
    public func stop() {
        process.stop()
        try? FileManager.default.removeItem(atPath: directory)
    }

    deinit { stop() }
}

/// The result of running an external program.
public struct ToolResult: Sendable, CustomStringConvertible {
    /// Exit status.
    public let status: Int32
    /// Standard output.
    public let stdout: String
    /// Standard error.
    public let stderr: String
    /// "exit 1; stdout: …; stderr: …".
    public var description: String { "exit \(status); stdout: \(stdout); stderr: \(stderr)" }
}

/// Runs `executable` with `arguments` to completion (at most `timeout` seconds, then killed)
/// without blocking the caller's thread. Throws when the program cannot be started.
public func runTool(_ executable: String, _ arguments: [String], environment: [String: String]? = nil,
                    stdin: Data? = nil, timeout: Double = 30) async throws -> ToolResult {
    // A thread of its own, not a Dispatch global queue: waiting for the child blocks it for
    // as long as the tool runs, and those queues run only a few blocks at once (see onThread).
    try await withCheckedThrowingContinuation { (cont: CheckedContinuation<ToolResult, Error>) in
        Thread.detachNewThread {
            // Output goes to temporary files: no pipe can fill up and block the child.
            let base = FileManager.default.temporaryDirectory.appendingPathComponent("peerlink-tool-\(UUID().uuidString)").path
            let outFD = open(base + ".out", O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
            let errFD = open(base + ".err", O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
            var inFDs: [Int32] = [-1, -1]
            guard pipe(&inFDs) == 0 else {
                closeQuietly(outFD); closeQuietly(errFD)
                unlink(base + ".out"); unlink(base + ".err")
                cont.resume(throwing: TestSupportError("pipe: \(String(cString: strerror(errno)))"))
                return
            }
            // Not to be kept by children that parallel tests spawn (see PrivateBus.init).
            try? setCloseOnExec(inFDs[0])
            try? setCloseOnExec(inFDs[1])
            defer {
                closeQuietly(outFD); closeQuietly(errFD); closeQuietly(inFDs[0])
                unlink(base + ".out"); unlink(base + ".err")
            }
            let child: ChildProcess
            do {
                child = try ChildProcess(executable, arguments, stdin: inFDs[0], stdout: outFD, stderr: errFD, environment: environment ?? [:])
            } catch {
                closeQuietly(inFDs[1])
                cont.resume(throwing: TestSupportError("cannot run \(executable): \(error)"))
                return
            }
            if let stdin { try? writeAll(inFDs[1], Array(stdin)) }
            closeQuietly(inFDs[1])
            let st = child.wait(timeout: timeout) ?? child.stop(grace: 1)
            let outData = (try? Data(contentsOf: URL(fileURLWithPath: base + ".out"))) ?? Data()
            let errData = (try? Data(contentsOf: URL(fileURLWithPath: base + ".err"))) ?? Data()
            let p = (terminationStatus: ChildProcess.exitCode(st), ())
            cont.resume(returning: ToolResult(status: p.terminationStatus,
                                              stdout: String(decoding: outData, as: UTF8.self),
                                              stderr: String(decoding: errData, as: UTF8.self)))
        }
    }
}

/// Starts a long-running external program whose output (stdout and stderr) is collected
/// in a temporary file until it is stopped.
public final class BackgroundTool: Sendable {
    private let child: ChildProcess
    private let outputPath: String

    /// Starts `executable` with `arguments`.
    public init(_ executable: String, _ arguments: [String], environment: [String: String] = [:]) throws {
        outputPath = FileManager.default.temporaryDirectory.appendingPathComponent("peerlink-bg-\(UUID().uuidString).out").path
        let fd = open(outputPath, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw TestSupportError("cannot create \(outputPath)") }
        defer { closeQuietly(fd) }
        child = try ChildProcess(executable, arguments, stdout: fd, stderr: fd, environment: environment)
    }

    /// The process id.
    public var pid: Int32 { child.pid }

    /// Everything printed so far.
    public var text: String {
        String(decoding: (try? Data(contentsOf: URL(fileURLWithPath: outputPath))) ?? Data(), as: UTF8.self)
    }

    /// Waits (checking every 20 ms, at most `timeout` seconds) until the output contains all of `needles`.
    public func waitForOutput(containing needles: [String], timeout: Double = 10) async -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            let t = text
            if needles.allSatisfy({ t.contains($0) }) { return true }
            try? await Task.sleep(for: .milliseconds(20))
        }
        return false
    }

    /// Waits for the program to exit by itself (at most `timeout` seconds); its exit code, or nil.
    public func waitForExit(timeout: Double) -> Int32? {
        child.wait(timeout: timeout).map(ChildProcess.exitCode)
    }

    /// Stops the program (SIGTERM, then SIGKILL).
    public func stop() { child.stop() }

    deinit {
        child.stop()
        unlink(outputPath)
    }
}
