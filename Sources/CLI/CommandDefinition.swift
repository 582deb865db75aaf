import Arguments
import Control

/// Where the CLI writes text: standard output or error, or a buffer in tests.
public protocol TextOutput: AnyObject {
    /// Writes `text` at once (unbuffered: scripts poll redirected files line by line).
    func write(_ text: String)
}

/// One leaf command of `peerlink`: its arguments and what it does.
///
/// Most commands are one JSON-RPC call plus a renderer for humans (`.call`); `--json`
/// output, errors and exit codes are handled for them. Streaming commands use `.custom`.
public struct CLICommand: Sendable {
    /// What running the command does.
    public enum Action: Sendable {
        /// Builds one call from the parsed values, then renders its result for humans.
        case call(request: @Sendable (ParsedValues) throws(CLIError) -> RPCCall, render: @Sendable (JSONValue) -> String)
        /// Runs the command itself and returns the exit status.
        case custom(@Sendable (CommandContext) throws(CLIError) -> Int32)
    }

    /// The names below `peerlink`, e.g. ["adapter", "power"]; groups are created as needed.
    public var path: [String]
    /// One line for help and the parent's command list.
    public var abstract: String
    /// Longer help (may be empty).
    public var discussion: String
    /// Options of this command (the global ones are added by the root).
    public var options: [Option]
    /// Positional arguments.
    public var arguments: [Positional]
    /// What it does.
    public var action: Action

    /// Creates a command definition.
    public init(_ path: [String], abstract: String, discussion: String = "", options: [Option] = [],
                arguments: [Positional] = [], action: Action) {
        self.path = path
        self.abstract = abstract
        self.discussion = discussion
        self.options = options
        self.arguments = arguments
        self.action = action
    }
}

extension CLICommand {
    /// A command that names one thing (a peer ID, a transfer's or a stream's number) and makes
    /// one call with it, under the argument's name: `peer trust ID`, `peer cancel N`.
    static func naming(_ path: [String], _ method: String, abstract: String, _ argument: Positional,
                       render: @escaping @Sendable (JSONValue) -> String) -> CLICommand {
        let key = argument.name
        return CLICommand(path, abstract: abstract, arguments: [argument], action: .call(request: { v throws(CLIError) in
            RPCCall(method: method, params: [key: v.int(key).map { .int(Int64($0)) } ?? .string(v.string(key) ?? "")])
        }, render: render))
    }

    /// `peer VERB N`: a command that acts on one numbered `noun` (a transfer, a stream) with
    /// one call and says "`done` `noun` N".
    static func numbered(_ noun: String, _ verb: String, _ method: String, abstract: String, max: Int, listedBy: String,
                         done: String) -> CLICommand {
        .naming(["peer", verb], method, abstract: abstract,
                Positional(noun, parser: .int(in: 1...max), help: "The \(noun)'s number ('\(listedBy)' or the events).")) { r in
            "\(done) \(noun) \(Rendering.scalar(r[noun] ?? .null))"
        }
    }
}

/// A JSON-RPC call a command wants made.
public struct RPCCall: Sendable, Equatable {
    /// The method name.
    public var method: String
    /// The named params.
    public var params: [String: JSONValue]
    /// How long to wait for the reply at least, in seconds (the global `--timeout` applies
    /// when larger); for operations that carry their own timeout to the daemon.
    public var minimumReplyTimeout: Double?
    /// Descriptors passed with the request (SCM_RIGHTS); the caller keeps and closes its own.
    public var passing: [Int32]

    /// Creates a call.
    public init(method: String, params: [String: JSONValue] = [:], minimumReplyTimeout: Double? = nil, passing: [Int32] = []) {
        self.method = method
        self.params = params
        self.minimumReplyTimeout = minimumReplyTimeout
        self.passing = passing
    }
}

/// A failure of a command, mapped to an exit status and a message by `PeerlinkCLI`.
public enum CLIError: Error, Sendable {
    /// Bad command line (exit 2).
    case usage(UsageError)
    /// The daemon answered with an error (exit 1).
    case daemon(RPCError)
    /// The daemon could not be reached, went away or did not answer (exit 3); `during` names the method.
    case connection(ControlClientError, during: String?)
    /// Any other failure: a message and an exit status.
    case failure(String, exitCode: Int32)
}

/// What a running command gets: its parsed values, the global settings and the outputs.
public struct CommandContext {
    /// The parsed values of the command line.
    public let values: ParsedValues
    /// `--json` was given.
    public let json: Bool
    /// The control socket path (`--socket`, `$PEERLINK_SOCKET` or the default).
    public let socketPath: String
    /// Seconds to wait for a reply (`--timeout`).
    public let replyTimeout: Double
    /// Standard output.
    public let stdout: any TextOutput
    /// Standard error.
    public let stderr: any TextOutput
    /// Called by streaming commands once they start printing; the real CLI makes SIGINT and
    /// SIGTERM exit 0 quietly (`.ends`: a watch ends so) or with 130/143 (`.fails`: a transfer
    /// or a stream not done, with a part file to remove), tests pass a no-op.
    public let onStreamingStarted: @Sendable (Interruption) -> Void

    /// What SIGINT or SIGTERM means to a streaming command.
    public enum Interruption: Sendable {
        /// The normal end (a watch): exit 0.
        case ends
        /// The work is not done: exit 130/143, removing this file first if given.
        case fails(removing: String?)
    }

    /// A watch-like command starts printing: interrupted, it exits 0.
    public func streamingStarted() { onStreamingStarted(.ends) }

    /// Connects to the daemon.
    public func connect() throws(CLIError) -> ControlClient {
        do {
            return try ControlClient(socketPath: socketPath)
        } catch {
            throw .connection(error, during: nil)
        }
    }

    /// Makes `call` on `client`, mapping failures to `CLIError`.
    public func perform(_ call: RPCCall, on client: ControlClient) throws(CLIError) -> JSONValue {
        let timeout = max(replyTimeout, call.minimumReplyTimeout ?? 0)
        do {
            return try client.call(method: call.method, params: call.params, passing: call.passing, timeout: timeout)
        } catch .rpc(let error) {
            throw .daemon(error)
        } catch {
            throw .connection(error, during: call.method)
        }
    }

    /// Writes `line` and a newline to standard output.
    public func print(_ line: String) {
        stdout.write(line + "\n")
    }
}

extension ValueParser {
    /// A positive number of seconds (fractions allowed), stored as `.double`.
    public static let seconds = ValueParser.custom { text throws(ValueError) in
        guard let d = Double(text), d.isFinite else { throw ValueError("expected a number of seconds") }
        guard d > 0 else { throw ValueError("must be more than 0 seconds") }
        // (Milliseconds of it are counted in 64 bits: 1e16 trapped.)
        guard d <= 31_536_000 else { throw ValueError("must be at most a year (31536000 seconds)") }
        return .double(d)
    }

    /// A number of seconds within `range` (fractions allowed), stored as `.double`: for a
    /// time the daemon bounds too, refused here as a usage error naming the option.
    public static func seconds(in range: ClosedRange<Double>) -> ValueParser {
        let (low, high) = (format(range.lowerBound), format(range.upperBound))  // 0.5, not 0
        return ValueParser.custom(helpNote: "\(low)-\(high)") { text throws(ValueError) in
            guard let d = Double(text), d.isFinite else { throw ValueError("expected a number of seconds") }
            guard range.contains(d) else { throw ValueError("must be between \(low) and \(high) seconds") }
            return .double(d)
        }
    }

    /// An adapter, hciN or its address; shells complete it from `peerlink adapter list`.
    public static let adapter = ValueParser.nonEmptyString.completing(.dynamic("adapter"))

    /// A UUID of the daemon's own GATT applications; shells complete it from `peerlink gatt list`.
    public static let localUUID = ValueParser.nonEmptyString.completing(.dynamic("uuid"))

    /// A file's path; shells complete file names.
    public static let path = ValueParser.nonEmptyString.completing(.file)

    /// A positive count, stored as `.int`.
    public static let count = ValueParser.custom { text throws(ValueError) in
        guard let n = Int(text) else { throw ValueError("expected an integer") }
        guard n > 0 else { throw ValueError("must be at least 1") }
        return .int(n)
    }
}
