import Control
import Daemon
import Foundation
import Synchronization
import SystemKit
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The directory holding the binaries built with the tests (`peerlinkd`, `peerlink`).
let binDirectory: String = {
    // The test bundle is …/debug/PeerLinkPackageTests.xctest; the executables sit beside it.
    let exe = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
    return exe.deletingLastPathComponent().path
}()

/// A real `peerlinkd` process on a temporary socket, talking to a private bus.
final class DaemonHarness: Sendable {
    let directory: String
    let socketPath: String
    let logPath: String
    private let child: ChildProcess
    /// An issue was recorded for this daemon's end (`report`).
    private let crashReported = Mutex(false)

    init(busAddress: String, maxClients: Int = 256, maxRequestBytes: Int = 1_048_576, requestTimeout: Double = 30,
         adapter: String? = nil, extraConfig: String = "", environment: [String: String] = [:]) async throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("peerlink-d-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        socketPath = directory + "/control.sock"
        logPath = directory + "/peerlinkd.log"
        let config = """
        # written by DaemonHarness
        max_clients = \(maxClients)
        max_request_bytes = \(maxRequestBytes)
        request_timeout = \(requestTimeout)
        log_level = debug
        \(adapter.map { "adapter = \($0)" } ?? "")
        \(extraConfig)
        """
        try config.write(toFile: directory + "/peerlink.conf", atomically: true, encoding: .utf8)
        let log = open(logPath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        defer { closeQuietly(log) }
        child = try ChildProcess(binDirectory + "/peerlinkd", [
            "--config", directory + "/peerlink.conf", "--socket", socketPath,
            "--state-dir", directory + "/state", "--bus", busAddress,
        ], stdout: log, stderr: log, environment: environment)
        // Ready when the socket answers.
        let deadline = Date().addingTimeInterval(20)
        while Date() < deadline {
            if let c = try? RawClient(socketPath), (try? c.call("daemon.status", timeout: 2)) != nil { return }
            if child.wait(timeout: 0) != nil { break }
            try await Task.sleep(for: .milliseconds(20))
        }
        throw TestSupportError("peerlinkd did not start; log:\n\(self.log)")
    }

    /// What the daemon logged.
    var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    /// The daemon's pid.
    var pid: Int32 { child.pid }

    /// Calls a method on a fresh connection.
    func call(_ method: String, _ params: [String: JSONValue] = [:]) throws -> JSONValue {
        try RawClient(socketPath).call(method, params)
    }

    /// Clients the daemon serves now (from `daemon.status`, which counts its own connection).
    func clientCount() throws -> Int { Int(try call("daemon.status")["clients"]?.intValue ?? -1) - 1 }

    /// Waits until `daemon.status` satisfies `predicate` (checking every 20 ms, at most `timeout` s).
    func waitForStatus(timeout: Double = 10, _ predicate: (JSONValue) -> Bool) async throws -> JSONValue {
        let deadline = Date().addingTimeInterval(timeout)
        var last: JSONValue = .null
        while Date() < deadline {
            last = try call("daemon.status")
            if predicate(last) { return last }
            try await Task.sleep(for: .milliseconds(20))
        }
        throw TestSupportError("status never matched; last: \(last)")
    }

    /// Stops the daemon (SIGTERM) and returns its exit code and everything it logged. A
    /// daemon that does not exit within 5 s of SIGTERM is killed, and that is an issue of
    /// the test that stops it (a hang at stop: systemd would kill it too, after its timeout).
    func stopReadingLog() -> (status: Int32, log: String) {
        let st = ChildProcess.exitCode(child.stop())
        let text = log
        if child.neededKillAtStop { report("peerlinkd did not exit within 5 s of SIGTERM and was killed", text) }
        reportCrash(st, text)
        try? FileManager.default.removeItem(atPath: directory)
        return (st, text)
    }

    @discardableResult
    func stop() -> Int32 { stopReadingLog().status }

    /// Waits up to `timeout` seconds for the daemon to exit by itself: its exit code, or nil.
    func waitForExit(timeout: Double) -> Int32? { child.wait(timeout: timeout).map(ChildProcess.exitCode) }

    /// Signals a daemon dies of by itself (a Swift trap, an abort, a bad access): no test
    /// expects one, so it is an issue of the test that stops it, with the daemon's log.
    /// Its report reaches the log after the daemon's clients saw it go, which is too late
    /// for a failure message written then (a test failed on a broken pipe with a log that
    /// said nothing).
    static let crashSignals: Set<Int32> = [SIGILL, SIGTRAP, SIGABRT, SIGBUS, SIGFPE, SIGSEGV]

    private func reportCrash(_ status: Int32, _ log: String) {
        guard status > 128, Self.crashSignals.contains(status - 128) else { return }
        report("peerlinkd crashed (exit \(status), signal \(status - 128))", log)
    }

    /// Records `what` as an issue with the end of the daemon's log, once per daemon.
    private func report(_ what: String, _ log: String) {
        guard crashReported.withLock({ r in defer { r = true }; return !r }) else { return }
        // Swift's backtracer writes the crashed thread first, then every other one: keep
        // from the crash on (the end alone held only the idle threads).
        let start = log.range(of: "Program crashed")?.lowerBound ?? log.range(of: " crashed:")?.lowerBound
        let text = start.map { String(log[$0...].prefix(12_000)) } ?? String(log.suffix(4000))
        Issue.record("\(what); its log:\n\(text)")
    }

    deinit { stop() }
}

/// A blocking client on the control socket that sends raw bytes and reads raw lines.
final class RawClient {
    /// The connection (-1 once `close()`d).
    private(set) var fd: Int32
    private var framer = LineFramer(maxLineBytes: 64 * 1_048_576)
    private var nextID: Int64 = 1
    /// Descriptors the server passed (SCM_RIGHTS), in arrival order; the test owns them.
    var descriptors: [Int32] = []

    init(_ path: String) throws { fd = try UnixSocket.connect(path: path) }
    deinit { close() }

    /// Closes the connection now, once. (Never `closeQuietly(client.fd)`: the deinit would
    /// close the number again, by then perhaps another test's descriptor: a fake bluetoothd's
    /// bus connection in a test running alongside was cut so.)
    func close() {
        guard fd >= 0 else { return }
        closeQuietly(fd)
        fd = -1
    }

    /// Sends `bytes`, with `passing` descriptors (SCM_RIGHTS) on the first; the test keeps its own.
    func send(_ bytes: [UInt8], passing: [Int32] = []) throws { try SocketIO.sendAll(fd, bytes, passing: passing) }
    func send(_ text: String) throws { try send(Array(text.utf8)) }

    /// The next line, or nil when the server closed the connection; throws after `timeout` seconds.
    func readLine(timeout: Double = 10) throws -> [UInt8]? {
        let deadline = Date().addingTimeInterval(timeout)
        while true {
            if let line = try framer.nextLine() { return line }
            let left = deadline.timeIntervalSinceNow
            guard left > 0 else { throw TestSupportError("no line within \(timeout) s") }
            guard try SocketIO.waitReadable(fd, timeoutMilliseconds: Int32(left * 1000) + 1) else { continue }
            guard let (chunk, fds) = try DescriptorPassing.receive(fd) else { continue }
            descriptors += fds
            if chunk.isEmpty { return nil }
            framer.append(chunk)
        }
    }

    /// The next line parsed as JSON.
    func readJSON(timeout: Double = 10) throws -> JSONValue? {
        guard let line = try readLine(timeout: timeout) else { return nil }
        return try JSONValue.parse(line)
    }

    /// Whether the server closes the connection within `timeout` seconds (other lines are skipped).
    func waitForClose(timeout: Double = 10) throws -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while deadline.timeIntervalSinceNow > 0 {
            do {
                if try readLine(timeout: deadline.timeIntervalSinceNow) == nil { return true }
            } catch let e as SystemError where SocketIO.isDisconnect(e) {
                return true
            } catch is TestSupportError {
                return false
            }
        }
        return false
    }

    /// Sends a request and returns the whole reply (result or error; notifications are skipped).
    func request(_ method: String, _ params: [String: JSONValue] = [:], passing: [Int32] = [], timeout: Double = 30) throws -> JSONValue {
        let id = nextID
        nextID += 1
        try send(RPCRequest(id: .int(id), method: method, params: params).encodedLine(), passing: passing)
        while true {
            guard let reply = try readJSON(timeout: timeout) else { throw TestSupportError("connection closed") }
            if reply["id"] == .int(id) { return reply }
        }
    }

    /// Sends a request and returns its result, or throws the RPC error (notifications are skipped).
    func call(_ method: String, _ params: [String: JSONValue] = [:], timeout: Double = 30) throws -> JSONValue {
        let id = nextID
        nextID += 1
        try send(RPCRequest(id: .int(id), method: method, params: params).encodedLine())
        while true {
            guard let reply = try readJSON(timeout: timeout) else { throw TestSupportError("connection closed") }
            guard reply["id"] == .int(id) else { continue }
            if let e = reply["error"] { throw try RPCError(json: e) }
            return reply["result"] ?? .null
        }
    }

    /// Reads until an event notification with `topic` arrives; returns its params.
    func nextEvent(_ topic: String, timeout: Double = 10) throws -> JSONValue {
        let deadline = Date().addingTimeInterval(timeout)
        while true {
            guard let m = try readJSON(timeout: max(0.01, deadline.timeIntervalSinceNow)) else { throw TestSupportError("closed") }
            if m["method"] == "event", m["params"]?["topic"]?.stringValue == topic { return m["params"]! }
        }
    }

    /// Reads events until one of each of `topics` arrived, in any order (others are
    /// skipped); returns the first params of each topic. Throws after `timeout` seconds,
    /// naming the topics still missing.
    func events(_ topics: Set<String>, timeout: Double = 10) throws -> [String: JSONValue] {
        let deadline = Date().addingTimeInterval(timeout)
        var seen: [String: JSONValue] = [:]
        while seen.count < topics.count {
            let m: JSONValue?
            do { m = try readJSON(timeout: max(0.01, deadline.timeIntervalSinceNow)) } catch {
                throw TestSupportError("no \(topics.subtracting(seen.keys).sorted()) within \(timeout) s")
            }
            guard let m else { throw TestSupportError("closed") }
            if m["method"] == "event", let t = m["params"]?["topic"]?.stringValue, topics.contains(t), seen[t] == nil { seen[t] = m["params"]! }
        }
        return seen
    }
}
