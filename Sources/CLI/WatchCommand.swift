import Arguments
import Control
import SystemKit

/// `peerlink watch`: subscribe to events and print them as they arrive.
enum WatchCommand {
    /// `watch [--topic T]... [--count N] [--timeout S]`.
    static let watch = CLICommand(
        ["watch"],
        abstract: "Print daemon events as they happen.",
        discussion: """
            Subscribes to events (all of them, or the given topics and their subtopics: 'adapter' \
            selects 'adapter.powered') and prints one line per event until interrupted, until \
            --count events were printed, or until --timeout seconds passed. With --count, running \
            out of time first is an error (exit 1).
            """,
        options: [
            .value("topic", valueName: "topic", parser: .nonEmptyString, repeating: true,
                   help: "Only events with this topic or a subtopic of it."),
            .value("count", valueName: "n", parser: .count, help: "Exit after n events."),
            .value("timeout", key: "watch-timeout", valueName: "seconds", parser: .seconds,
                   help: "Stop after this many seconds."),
            readyFile,
        ],
        action: .custom(run))

    /// `--ready-file PATH`, shared with `peer watch`.
    static let readyFile = Option.value(
        "ready-file", valueName: "path", parser: .path,
        help: "Create this (empty) file once subscribed: events caused after it appears are seen.")

    static func run(_ context: CommandContext) throws(CLIError) -> Int32 {
        try printEvents(context, topics: context.values.strings("topic"), count: context.values.int("count"),
                        seconds: context.values.double("watch-timeout"), line: line(for:))
    }

    /// Subscribes to `topics` (all when empty) and prints one line per event (`line`, or the
    /// event as JSON with --json) until `count` events, `seconds` or the end; running out of
    /// time before `count` is an error (exit 1). `watch` and `peer watch` share it. With
    /// --ready-file, the file is created once the daemon has answered the subscription: from
    /// then on every event is delivered to this client, so a script that starts an action after
    /// seeing the file cannot miss the action's events (a fixed sleep could).
    static func printEvents(_ context: CommandContext, topics: [String], count: Int?, seconds duration: Double?,
                            line: (JSONValue) -> String) throws(CLIError) -> Int32 {
        let client = try context.connect()
        defer { client.close() }
        var params: [String: JSONValue] = [:]
        if !topics.isEmpty { params["topics"] = .array(topics.map(JSONValue.string)) }
        let ready = context.values.string("ready-file")
        if let ready {
            // One left by an earlier run would say "subscribed" too early.
            do { _ = try FileSystem.remove(ready) } catch {
                throw .failure("cannot remove the old ready file \(ready): \(error)", exitCode: 1)
            }
        }
        _ = try context.perform(RPCCall(method: ControlMethod.eventsSubscribe, params: params), on: client)
        // Quiet exits on SIGINT/SIGTERM first: a script may stop the watch as soon as it sees
        // the file.
        context.streamingStarted()
        if let ready {
            do {
                try AtomicFile.write([], to: ready, mode: 0o644)
            } catch {
                throw .failure("cannot create the ready file \(ready): \(error)", exitCode: 1)
            }
        }

        let events = EventReader(client: client, seconds: duration)
        var printed = 0
        while count.map({ printed < $0 }) ?? true {
            guard let params = try events.next() else {
                guard let count else { return 0 }
                let s = PeerlinkCLI.formatSeconds(duration ?? 0)
                throw .failure("timed out after \(s) s with \(printed) of \(count) events", exitCode: 1)
            }
            context.print(context.json ? params.description : line(params))
            printed += 1
        }
        return 0
    }

    /// "2026-11-29T18:00:00.123Z adapter.powered hci0 powered=false".
    static func line(for event: JSONValue) -> String {
        var words = [event["time"]?.stringValue ?? "-", event["topic"]?.stringValue ?? "?"]
        let data = Rendering.eventData(event["data"] ?? .null)
        if !data.isEmpty { words.append(data) }
        return words.joined(separator: " ")
    }
}

/// Reads the `event` notifications of a subscribed connection until an optional deadline
/// (`watch`, `dnssd browse`): replies and other notifications are skipped.
struct EventReader {
    let client: ControlClient
    let deadline: ContinuousClock.Instant?

    /// Reads from `client` for `seconds` (nil: until the connection ends or is interrupted).
    init(client: ControlClient, seconds: Double?) {
        self.client = client
        deadline = seconds.map { ContinuousClock.now + .milliseconds(Int64(($0 * 1000).rounded(.up))) }
    }

    /// The next event's params, or nil once the deadline has passed.
    func next() throws(CLIError) -> JSONValue? {
        while true {
            var wait: Double?
            if let deadline {
                let remaining = deadline - .now
                wait = max(0, Double(remaining.components.seconds) + Double(remaining.components.attoseconds) * 1e-18)
            }
            let notification: RPCNotification?
            do {
                notification = try client.nextNotification(timeout: wait)
            } catch {
                throw .connection(error, during: nil)
            }
            guard let notification else { return nil }
            if notification.method == ControlEvent.method { return notification.params }
        }
    }
}
