import Control
import Dispatch
import Foundation
import Synchronization
import SystemKit
import Testing
@testable import CLI

/// A scripted stand-in for `peerlinkd` on a temporary Unix socket.
///
/// Accepts one connection on its own thread and runs `script` with it; records every request.
/// The real daemon is tested in DaemonTests; this only checks the CLI's side of the wire.
final class FakeDaemon: Sendable {
    let path: String
    private let received = Mutex<[RPCRequest]>([])
    private let finished = DispatchSemaphore(value: 0)
    /// Why the script stopped early (a request it expected never came, a reply it could
    /// not send): reported by `finish`, on the test's own task.
    private let scriptError = Mutex<String?>(nil)

    init(_ script: @escaping @Sendable (FakeConnection) throws -> Void) throws {
        path = "/tmp/peerlink-cli-test-\(UUID().uuidString.prefix(12)).sock"
        let listener = try UnixSocket.listen(path: path, mode: 0o600)
        // The thread owns the listener and closes it once it has its one connection (or gave
        // up waiting): closed by `finish` after a timeout, the number could already belong to
        // another test's descriptor when the thread next used it.
        Thread { [self] in
            defer { finished.signal() }
            var accepted: Int32?
            if (try? SocketIO.waitReadable(listener, timeoutMilliseconds: 10_000)) == true {
                accepted = try? UnixSocket.accept(listener)
            }
            closeQuietly(listener)
            guard let fd = accepted else { return }
            defer { closeQuietly(fd) }
            try? setNonBlocking(fd, false)
            let connection = FakeConnection(fd: fd) { request in self.received.withLock { $0.append(request) } }
            do { try script(connection) } catch { scriptError.withLock { $0 = "\(error)" } }
        }.start()
    }

    /// The requests received so far.
    var requests: [RPCRequest] { received.withLock { $0 } }

    /// Waits for the script to end, then removes the socket.
    func finish() {
        if finished.wait(timeout: .now() + 10) == .timedOut { Issue.record("the fake daemon's script did not end within 10 s") }
        _ = unlink(path)
        if let e = scriptError.withLock({ $0 }) { Issue.record("the fake daemon's script failed: \(e) (requests: \(requests.map(\.method)))") }
    }
}

/// The server end of one connection, used by a script on the fake daemon's thread.
final class FakeConnection {
    let fd: Int32
    private var framer = LineFramer()
    /// Descriptors the client passed, oldest first (the script takes and closes them).
    var descriptors: [Int32] = []
    private let record: (RPCRequest) -> Void

    init(fd: Int32, record: @escaping (RPCRequest) -> Void) {
        self.fd = fd
        self.record = record
    }

    /// The next request, or nil when the client closed the connection.
    func nextRequest() throws -> RPCRequest? {
        while true {
            if let line = try framer.nextLine() {
                guard case .request(let request) = RPCIncoming.parse(line: line) else { throw FakeError.badRequest(line) }
                record(request)
                return request
            }
            // recvmsg: a request may carry a descriptor (a resource's bytes).
            guard let (chunk, fds) = try DescriptorPassing.receive(fd) else { continue }
            descriptors += fds
            if chunk.isEmpty { return nil }
            framer.append(chunk)
        }
    }

    /// Reads a request and checks its method.
    @discardableResult
    func expect(_ method: String) throws -> RPCRequest {
        guard let request = try nextRequest() else { throw FakeError.closed }
        guard request.method == method else { throw FakeError.unexpected(request.method) }
        return request
    }

    /// Replies with `fd` passed along (SCM_RIGHTS), as the daemon does for data streams.
    func reply(_ request: RPCRequest, _ result: JSONValue, passing fd: Int32) throws {
        let line = RPCResponse(id: request.id ?? .null, result: result).encodedLine()
        let n = try line.withUnsafeBytes { try DescriptorPassing.send(self.fd, $0, passing: [fd]) } ?? 0
        if n < line.count { try SocketIO.sendAll(self.fd, Array(line[n...])) }
    }

    func reply(_ request: RPCRequest, _ result: JSONValue) throws {
        try SocketIO.sendAll(fd, RPCResponse(id: request.id ?? .null, result: result).encodedLine())
    }

    func reply(_ request: RPCRequest, error: RPCError) throws {
        try SocketIO.sendAll(fd, RPCResponse(id: request.id ?? .null, error: error).encodedLine())
    }

    func event(_ topic: String, _ data: JSONValue, time: String = "2026-11-29T18:00:00.123Z") throws {
        let note = RPCNotification(method: ControlEvent.method, params: ["topic": .string(topic), "time": .string(time), "data": data])
        try SocketIO.sendAll(fd, note.encodedLine())
    }

    func sendRaw(_ text: String) throws {
        try SocketIO.sendAll(fd, Array(text.utf8))
    }

    /// Blocks until the client hangs up.
    func waitForClose() {
        while (try? nextRequest()) != nil {}
    }
}

enum FakeError: Error {
    case closed
    case unexpected(String)
    case badRequest([UInt8])
}

/// Collects what the CLI writes.
final class Capture: TextOutput {
    var text = ""
    func write(_ text: String) { self.text += text }
}

/// The outcome of one in-process CLI run.
struct CLIRun {
    var code: Int32
    var out: String
    var err: String
}

/// Runs `peerlink` in-process with `arguments`, pointing it at `daemon` when given.
func peerlink(_ arguments: [String], daemon: FakeDaemon? = nil, environment: [String: String] = [:]) -> CLIRun {
    let out = Capture(), err = Capture()
    var env = environment
    if let daemon { env[ControlDefaults.socketEnvironmentVariable] = daemon.path }
    let code = PeerlinkCLI.run(arguments, environment: env, stdout: out, stderr: err)
    daemon?.finish()
    return CLIRun(code: code, out: out.text, err: err.text)
}

/// Sample adapters as the daemon describes them.
enum Samples {
    static let hci0: JSONValue = [
        "name": "hci0", "address": "00:AA:01:00:00:00", "address_type": "public", "alias": "peerlink-a",
        "powered": true, "power_state": "on", "discoverable": false, "discovering": false,
        "roles": ["central", "peripheral"], "path": "/org/bluez/hci0", "default": true,
    ]
    static let hci1: JSONValue = [
        "name": "hci1", "address": "00:AA:01:00:00:01", "address_type": "public", "alias": "second one",
        "powered": false, "power_state": "off", "discoverable": false, "discovering": false,
        "roles": ["central"], "path": "/org/bluez/hci1", "default": false,
    ]
    static let status: JSONValue = [
        "version": "0.1.0", "pid": 123, "uptime_seconds": 303.4,
        "bus": ["connected": true, "kind": "system"], "bluez": ["available": true],
        "default_adapter": "hci0", "adapters": [hci0, hci1],
        "socket": "/run/peerlink/control.sock", "state_dir": "/var/lib/peerlink",
    ]
}
