import Arguments
import FoundationEssentials
import Control
import SystemKit
#if canImport(Glibc)
import Glibc
#endif

/// The `peerlink` program: parses the command line, runs a command, maps failures to exit codes.
///
/// Exit status: 0 success; 1 the daemon reported an error (or a command's own failure, such
/// as `watch --count` timing out); 2 usage error; 3 the daemon is unreachable, closed the
/// connection or did not reply in time.
public enum PeerlinkCLI {
    /// The CLI's version.
    public static let version = "0.1.0"

    /// Runs with the process's arguments (`CommandLine.arguments`), environment and standard streams.
    public static func main(_ arguments: [String]) -> Int32 {
        run(Array(arguments.dropFirst()),
            environment: readEnvironment([ControlDefaults.socketEnvironmentVariable]),
            stdout: FileDescriptorOutput(fd: 1),
            stderr: FileDescriptorOutput(fd: 2),
            onStreamingStarted: { meaning in
                switch meaning {
                case .ends: ProcessSignals.exitQuietlyOnInterrupt()
                case .fails(let path): ProcessSignals.exitFailingOnInterrupt(removing: path)
                }
            })
    }

    /// The variables in `names` that are set, read one by one: the CLI reads only these, and
    /// `ProcessInfo.environment` decodes every variable into a dictionary first, a tenth of
    /// the instructions of a whole `peerlink status` (counted with callgrind).
    static func readEnvironment(_ names: [String]) -> [String: String] {
        var found: [String: String] = [:]
        for name in names {
            if let value = getenv(name) { found[name] = String(cString: value) }
        }
        return found
    }

    /// Runs `arguments` (without the program name) in-process; the testable entry point.
    public static func run(
        _ arguments: [String],
        environment: [String: String],
        stdout: any TextOutput,
        stderr: any TextOutput,
        onStreamingStarted: @escaping @Sendable (CommandContext.Interruption) -> Void = { _ in }
    ) -> Int32 {
        let invocation: Invocation
        do {
            switch try CommandParser(root: CommandTable.root).parse(arguments) {
            case .help(let text):
                stdout.write(text)
                return 0
            case .version(let text):
                stdout.write(text + "\n")
                return 0
            case .run(let parsed):
                invocation = parsed
            }
        } catch {
            report(.usage(error), json: false, stdout: stdout, stderr: stderr)
            return 2
        }

        guard let definition = CommandTable.command(at: invocation.path) else {
            stderr.write("peerlink: internal error: no command at '\(invocation.commandName)'\n")
            return 1
        }
        let values = invocation.values
        let socketPath = values.string("socket")
            ?? environment[ControlDefaults.socketEnvironmentVariable].flatMap { $0.isEmpty ? nil : $0 }
            ?? ControlDefaults.socketPath
        let context = CommandContext(values: values, json: values.flag("json"), socketPath: socketPath,
                                     replyTimeout: values.double("timeout") ?? 30,
                                     stdout: stdout, stderr: stderr, onStreamingStarted: onStreamingStarted)
        do {
            return try execute(definition, context)
        } catch {
            report(error, json: context.json, verbose: values.flag("verbose"), socketPath: socketPath, stdout: stdout, stderr: stderr)
            return exitCode(for: error)
        }
    }

    private static func execute(_ definition: CLICommand, _ context: CommandContext) throws(CLIError) -> Int32 {
        switch definition.action {
        case .custom(let body):
            return try body(context)
        case .call(let makeRequest, let render):
            let call = try makeRequest(context.values)
            let client = try context.connect()
            defer { client.close() }
            let result = try context.perform(call, on: client)
            if context.json {
                context.print(result.description)
            } else {
                let text = render(result)
                if !text.isEmpty { context.stdout.write(text.hasSuffix("\n") ? text : text + "\n") }
            }
            return 0
        }
    }

    /// The exit status for `error`.
    static func exitCode(for error: CLIError) -> Int32 {
        switch error {
        case .usage: return 2
        case .daemon: return 1
        case .connection: return 3
        case .failure(_, let code): return code
        }
    }

    /// Prints `error` the way users and scripts expect it (see docs/cli.md).
    ///
    /// A daemon error is said once, in the daemon's words: its message already names the
    /// parameter and the reason, so the code and data would only repeat it for a person.
    /// Scripts get them from the `{"error": ...}` object `--json` prints; `--verbose` adds them
    /// to standard error for someone reporting a problem.
    static func report(_ error: CLIError, json: Bool, verbose: Bool = false, socketPath: String = "",
                       stdout: any TextOutput, stderr: any TextOutput) {
        switch error {
        case .usage(let usage):
            stderr.write("peerlink: error: \(usage.message)\n\(usage.hint)\n")
        case .daemon(let rpc):
            stderr.write("peerlink: error: \(rpc.message)\n")
            if verbose {
                var detail = "peerlink: JSON-RPC error \(rpc.code)"
                if let name = RPCErrorCode.name(of: rpc.code) { detail += " (\(name))" }
                if let data = rpc.data { detail += ", data: \(data)" }
                stderr.write(detail + "\n")
            }
            if json { stdout.write(JSONValue.object(["error": rpc.json]).description + "\n") }
        case .connection(let failure, let method):
            stderr.write("peerlink: \(connectionMessage(failure, method: method, socketPath: socketPath))\n")
        case .failure(let message, _):
            stderr.write("peerlink: \(message)\n")
        }
    }

    private static func connectionMessage(_ failure: ControlClientError, method: String?, socketPath: String) -> String {
        let during = method.map { " to \($0)" } ?? ""
        switch failure {
        case .unreachable(let path, let error):
            return "cannot reach peerlinkd at \(path): \(error.reason). Is the daemon running? "
                + "(systemctl status peerlinkd; or pass --socket PATH / set \(ControlDefaults.socketEnvironmentVariable))"
        case .closed:
            if let method { return "peerlinkd closed the connection before replying to \(method)" }
            return "peerlinkd closed the connection"
        case .timedOut(let seconds):
            return "no reply from peerlinkd within \(formatSeconds(seconds)) s\(during) (pass --timeout SECONDS to wait longer)"
        case .io(let error):
            return "connection to peerlinkd at \(socketPath) failed\(during): \(error)"
        case .invalidReply(let reason):
            return "invalid reply from peerlinkd\(during): \(reason)"
        case .rpc(let error):
            return "error: \(error.message)"
        }
    }

    /// "30" for 30.0, "2.5" for 2.5.
    static func formatSeconds(_ seconds: Double) -> String {
        if seconds.rounded() == seconds, abs(seconds) < 1e15 { return String(Int64(seconds)) }
        return String(seconds)
    }
}

/// Writes straight to a file descriptor (no buffering, so every line is visible at once).
public final class FileDescriptorOutput: TextOutput {
    private let fd: Int32

    /// Writes to `fd` (1 for standard output, 2 for standard error).
    public init(fd: Int32) {
        self.fd = fd
    }

    /// Writes `text`; errors (a closed pipe) are ignored.
    public func write(_ text: String) {
        try? writeAll(fd, Array(text.utf8))
    }
}
