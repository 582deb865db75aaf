import Control
import SystemKit

/// Why a control-socket exchange failed.
public enum ControlClientError: Error, Sendable, Equatable, CustomStringConvertible {
    /// `connect` to the socket failed (no file, refused, permission denied).
    case unreachable(path: String, error: SystemError)
    /// The daemon closed the connection.
    case closed
    /// No reply (or notification) within the timeout, in seconds.
    case timedOut(seconds: Double)
    /// Reading or writing the socket failed.
    case io(SystemError)
    /// The daemon sent something that is not a valid message, or a reply over the size limit.
    case invalidReply(String)
    /// The daemon answered with an error.
    case rpc(RPCError)

    /// A one-line explanation.
    public var description: String {
        switch self {
        case .unreachable(let path, let error): return "cannot connect to \(path): \(error.reason)"
        case .closed: return "the daemon closed the connection"
        case .timedOut(let seconds): return "no reply within \(seconds) s"
        case .io(let error): return "socket error: \(error)"
        case .invalidReply(let reason): return "invalid reply: \(reason)"
        case .rpc(let error): return error.description
        }
    }
}

/// A blocking JSON-RPC client on the daemon's control socket.
///
/// One request at a time: `call` sends a request and reads lines until the response with
/// its id arrives, queueing any notifications (events) that come first for
/// `nextNotification`. Not thread-safe; use it from one thread.
public final class ControlClient {
    /// The largest reply line accepted (16 MiB).
    public static let maxReplyBytes = 16 * 1_048_576

    /// The socket path connected to.
    public let socketPath: String
    private var fd: Int32
    private var framer = LineFramer(maxLineBytes: ControlClient.maxReplyBytes)
    private var nextID: Int64 = 1
    private var queued: [RPCNotification] = []
    private var queueHead = 0
    /// Descriptors the daemon passed (SCM_RIGHTS), oldest first, until taken.
    private var descriptors: [Int32] = []

    /// Connects to the daemon at `socketPath`.
    public init(socketPath: String) throws(ControlClientError) {
        self.socketPath = socketPath
        do {
            fd = try UnixSocket.connect(path: socketPath)
        } catch let error as SystemError {
            throw .unreachable(path: socketPath, error: error)
        } catch {
            throw .invalidReply("\(error)")
        }
    }

    deinit {
        close()
        for d in descriptors { closeQuietly(d) }
    }

    /// Closes the connection (idempotent).
    public func close() {
        closeQuietly(fd)
        fd = -1
    }

    /// The oldest descriptor the daemon passed with a reply (a data stream's socket), now
    /// owned by the caller; nil when none came.
    public func takeDescriptor() -> Int32? {
        descriptors.isEmpty ? nil : descriptors.removeFirst()
    }

    /// Calls `method` and returns its result; `timeout` (seconds, nil = forever) bounds the wait.
    ///
    /// Throws `.rpc` when the daemon answers with an error, including an error with a null
    /// id (the daemon could not read the request).
    /// `passing`: descriptors sent with the request's first byte (SCM_RIGHTS), for a method
    /// that takes one (`peer.send-resource` with `"descriptor": true`); the caller keeps its own.
    public func call(method: String, params: [String: JSONValue] = [:], passing: [Int32] = [],
                     timeout: Double?) throws(ControlClientError) -> JSONValue {
        let id = nextID
        nextID += 1
        try send(RPCRequest(id: .int(id), method: method, params: params).encodedLine(), passing: passing)
        let deadline = Self.deadline(after: timeout)
        while true {
            guard let message = try readMessage(until: deadline) else { throw .timedOut(seconds: timeout ?? 0) }
            switch message {
            case .notification(let notification):
                queued.append(notification)
            case .response(let response):
                guard response.id == .int(id) || response.id == .null else { continue }  // stale reply: skip
                if response.id == .null, case .success = response.outcome { continue }
                switch response.outcome {
                case .success(let result): return result
                case .failure(let error): throw .rpc(error)
                }
            }
        }
    }

    /// The next notification (queued or read), or nil when `timeout` seconds pass first.
    public func nextNotification(timeout: Double?) throws(ControlClientError) -> RPCNotification? {
        if queueHead < queued.count {
            let n = queued[queueHead]
            queueHead += 1
            if queueHead == queued.count {
                queued.removeAll(keepingCapacity: true)
                queueHead = 0
            }
            return n
        }
        let deadline = Self.deadline(after: timeout)
        while true {
            guard let message = try readMessage(until: deadline) else { return nil }
            if case .notification(let notification) = message { return notification }
            // A response nobody waits for (e.g. to an abandoned call) is skipped.
        }
    }

    /// Sends raw bytes (one or more encoded lines), with `passing` descriptors on the first.
    public func send(_ bytes: [UInt8], passing: [Int32] = []) throws(ControlClientError) {
        do {
            try SocketIO.sendAll(fd, bytes, passing: passing)
        } catch let error as SystemError {
            throw SocketIO.isDisconnect(error) ? .closed : .io(error)
        } catch {
            throw .io(SystemError(call: "send", code: 0, context: "\(error)"))
        }
    }

    private static func deadline(after seconds: Double?) -> ContinuousClock.Instant? {
        guard let seconds else { return nil }
        return .now + .milliseconds(Int64((seconds * 1000).rounded(.up)))
    }

    /// Reads the next message; nil when `deadline` passes first.
    private func readMessage(until deadline: ContinuousClock.Instant?) throws(ControlClientError) -> RPCServerMessage? {
        while true {
            let line: [UInt8]?
            do {
                line = try framer.nextLine()
            } catch {
                throw .invalidReply("a reply line is longer than \(ControlClient.maxReplyBytes) bytes")
            }
            if let line {
                if line.isEmpty { continue }
                do {
                    return try RPCServerMessage.parse(line: line)
                } catch {
                    throw .invalidReply(error.message)
                }
            }
            var waitMilliseconds: Int32 = -1
            if let deadline {
                let remaining = deadline - .now
                if remaining <= .zero { return nil }
                let ms = remaining.components.seconds * 1000 + remaining.components.attoseconds / 1_000_000_000_000_000 + 1
                waitMilliseconds = Int32(clamping: ms)
            }
            do {
                guard try SocketIO.waitReadable(fd, timeoutMilliseconds: waitMilliseconds) else { continue }
                // recvmsg: a reply may carry a descriptor (a data stream's socket).
                guard let (chunk, fds) = try DescriptorPassing.receive(fd) else { continue }
                descriptors += fds
                if chunk.isEmpty { throw ControlClientError.closed }
                framer.append(chunk)
            } catch let error as ControlClientError {
                throw error
            } catch let error as SystemError {
                throw .io(error)
            } catch {
                throw .io(SystemError(call: "read", code: 0, context: "\(error)"))
            }
        }
    }
}
