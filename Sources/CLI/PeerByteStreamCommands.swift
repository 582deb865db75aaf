import Arguments
import Control
import FoundationEssentials
import SystemKit
#if canImport(Glibc)
import Glibc
#endif

/// `peerlink peer open-stream | accept-stream | decline-stream | close-stream | streams`: byte
/// streams with peers (MultipeerConnectivity's `startStream`). The daemon passes a Unix stream
/// socket with the reply; these commands copy a file or standard input into it, or out of it,
/// and wait for `peer.stream-closed` to say whether every byte arrived.
enum PeerByteStreamCommands {
    static let open = CLICommand(
        ["peer", "open-stream"],
        abstract: "Send a byte stream to a peer (standard input or a file), under the session's flow control.",
        discussion: """
            Opens a stream named NAME to the peer (peer.open-stream) and copies standard input \
            (or --from FILE) into it; the end of the input ends the stream. The peer's clients \
            see peer.stream-opened and take it with 'peerlink peer accept-stream'. When the \
            reader is slower, writing waits (nothing is dropped). Killed before the input ended, \
            the stream is cancelled: the reader never takes a cut stream for a whole one. Exits 0 once the receiving \
            daemon has handed every byte to its reader, 130 or 143 when interrupted (Ctrl-C, \
            SIGTERM), 1 when the stream ended otherwise \
            (declined, nobody accepted it within 30 s, cancelled, the session ended); the reason \
            goes to standard error (--json: the closing event).
            """,
        options: [.value("from", valueName: "file", parser: .nonEmptyString, help: "Read the bytes from this file instead of standard input.")],
        arguments: [Positional("peer", help: "The peer ID: 64 hex digits, the grouped form, or its start as lists show it (7 characters or more)."),
                    Positional("name", help: "The stream's name (at most 255 bytes; no '/' or control characters).")],
        action: .custom(runOpen))

    static let accept = CLICommand(
        ["peer", "accept-stream"],
        abstract: "Take a byte stream a peer opened and write it to standard output or a file.",
        discussion: """
            Takes stream STREAM (peer.accept-stream; the number is in peer.stream-opened and \
            'peerlink peer streams'), or with no number the oldest one nobody took yet, else the \
            next a peer opens (--peer: from that peer only; --wait: for at most that many seconds). Writes the \
            bytes to standard output, or to FILE with --to (written as FILE.part and renamed \
            once the stream ended normally; removed otherwise, on Ctrl-C too). Exits 0 when the \
            opener ended the stream normally and every byte was written, 130 or 143 when \
            interrupted, 1 otherwise.
            """,
        options: [
            .value("to", valueName: "file", parser: .nonEmptyString, help: "Write the bytes to this file (atomically) instead of standard output."),
            .value("peer", valueName: "id", parser: .nonEmptyString, help: "With no stream number: wait for a stream from this peer only."),
            .value("wait", valueName: "seconds", parser: .seconds, help: "With no stream number: give up after this many seconds (default: wait until one comes)."),
        ],
        arguments: [Positional("stream", parser: .int(in: 1...Int(Int32.max)), optional: true, help: "The stream's number (default: the next one opened).")],
        action: .custom(runAccept))

    static let decline = oneStream("decline-stream", ControlMethod.peerDeclineStream, "Decline a byte stream a peer opened (it hears 'declined').", done: "declined")
    static let close = oneStream("close-stream", ControlMethod.peerCloseStream, "Stop a byte stream, either way (both sides hear 'cancelled').", done: "cancelled")

    private static func oneStream(_ verb: String, _ method: String, _ abstract: String, done: String) -> CLICommand {
        .numbered("stream", verb, method, abstract: abstract, max: Int(Int32.max), listedBy: "peer streams", done: done)
    }

    static let list = CLICommand(
        ["peer", "streams"],
        abstract: "List byte streams open or waiting to be accepted, both ways.",
        action: .call(request: { _ throws(CLIError) in RPCCall(method: ControlMethod.peerStreams) }, render: { r in
            let list = r["streams"]?.arrayValue ?? []
            return list.isEmpty ? "no streams" : list.map(line).joined(separator: "\n")
        }))

    /// One line for a stream: number, direction, peer, name, whether a client has it.
    static func line(_ s: JSONValue) -> String {
        let incoming = s["direction"]?.stringValue == "in"
        let state = incoming ? (s["accepted"] == true ? "reading" : "waiting: peerlink peer accept-stream \(Rendering.scalar(s["stream"] ?? .null))") : "writing"
        return "stream \(Rendering.scalar(s["stream"] ?? .null)) \(incoming ? "from" : "to") \(s["short"]?.stringValue ?? "?") "
            + "\(Rendering.scalar(s["name"] ?? "?")) \(state)"
    }

    // MARK: Opening

    static func runOpen(_ context: CommandContext) throws(CLIError) -> Int32 {
        let v = context.values
        let (input, source) = try PeripheralCommands.openInput(v.string("from"))
        defer { if input != 0 { closeQuietly(input) } }
        let client = try context.connect()
        defer { client.close() }
        // explicit_finish: the stream ends normally only when this command says so
        // (peer.finish-stream) after the whole input; killed by a signal, its socket and
        // connection close without it, and both sides hear `cancelled`, not `normal`.
        let r = try context.perform(RPCCall(method: ControlMethod.peerOpenStream,
                                            params: ["peer": .string(v.string("peer") ?? ""), "name": .string(v.string("name") ?? ""),
                                                     "explicit_finish": true]), on: client)
        guard let fd = client.takeDescriptor() else { throw .failure("the daemon answered without passing the stream's socket", exitCode: 1) }
        context.onStreamingStarted(.fails(removing: nil))  // killed before the end: the stream is cancelled, and that is a failure
        if context.json { context.print(r.description) }
        var failure: String?
        var copied: Int64 = 0
        while failure == nil {
            let chunk: [UInt8]
            do { chunk = try SocketIO.receive(input, maxBytes: 65_536) } catch {
                failure = "reading \(source): \((error as? SystemError)?.reason ?? "\(error)")"
                break
            }
            if chunk.isEmpty { break }
            do {
                try SocketIO.sendAll(fd, chunk)
                copied += Int64(chunk.count)
            } catch let e as SystemError where SocketIO.isDisconnect(e) {
                break  // the stream ended on the daemon's side: its event says why
            } catch {
                failure = "writing to the stream: \(error)"
            }
        }
        // The socket's end alone does not end the stream (explicit_finish): after a failure it
        // is stopped, so a cut input never reads as whole; otherwise peer.finish-stream ends it
        // normally once the daemon has sent what it read. A stream that ended already answers
        // not-found: its event says why.
        closeQuietly(fd)
        let end = failure == nil ? ControlMethod.peerFinishStream : ControlMethod.peerCloseStream
        _ = try? context.perform(RPCCall(method: end, params: ["stream": r["stream"] ?? .null]), on: client)
        let closed = closingEvent(r["stream"], client)
        if context.json, let closed { context.print(JSONValue.object(["topic": .string(ControlEvent.peerStreamClosed), "data": closed]).description) }
        let reason = closed?["reason"]?.stringValue ?? "unknown (the daemon's connection ended)"
        if !context.json {
            context.stderr.write("stream \(Rendering.scalar(r["stream"] ?? .null)) to \(r["short"]?.stringValue ?? "?"): wrote \(copied) bytes; "
                                 + (reason == "normal" ? "the peer's reader has them all\n" : "ended: \(reason)\(detail(closed))\n"))
        }
        if let failure { throw .failure(failure, exitCode: 1) }
        return reason == "normal" ? 0 : 1
    }

    // MARK: Accepting

    static func runAccept(_ context: CommandContext) throws(CLIError) -> Int32 {
        let v = context.values
        let path = ["peerlink", "peer", "accept-stream"]
        // Standard output carries the stream's bytes: JSON lines there would be mixed in.
        if context.json, v.string("to") == nil {
            throw .usage(UsageError("--json needs --to FILE (without it the stream's bytes go to standard output, where the JSON goes)", commandPath: path))
        }
        if let peer = v.string("peer") {
            let start = peer.filter { $0 != "-" }
            guard start.count >= 7, start.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber) }) else {
                throw .usage(UsageError("--peer expects a peer ID, or at least its first 7 characters, got \"\(peer)\"", commandPath: path))
            }
        }
        let client = try context.connect()
        defer { client.close() }
        let number: Int64
        if let n = v.int("stream") {
            number = Int64(n)
        } else {
            number = try nextOpened(client, context, from: v.string("peer"), seconds: v.double("wait"))
        }
        let target = v.string("to")
        // The file is opened before the stream is taken: a bad path costs the peer nothing.
        let output = try target.map { path throws(CLIError) in
            do {
                let file = try RegularFile.openForWriting(path + ".part", mode: 0o644)
                try file.truncate(to: 0)  // a part left by an earlier run
                return file
            } catch {
                throw .failure("cannot write \(path).part: \((error as? SystemError)?.reason ?? "\(error)")", exitCode: 1)
            }
        }
        let r: JSONValue
        do {
            r = try context.perform(RPCCall(method: ControlMethod.peerAcceptStream, params: ["stream": .int(number)]), on: client)
        } catch {
            if let target { discard(output, target) }
            throw error
        }
        guard let fd = client.takeDescriptor() else {
            if let target { discard(output, target) }
            throw .failure("the daemon answered without passing the stream's socket", exitCode: 1)
        }
        context.onStreamingStarted(.fails(removing: target.map { $0 + ".part" }))  // the part goes, as on any other failure
        if context.json { context.print(r.description) }
        var failure: String?
        var written: UInt64 = 0
        while failure == nil {
            let chunk: [UInt8]
            do { chunk = try SocketIO.receive(fd, maxBytes: 65_536) } catch {
                failure = "reading the stream: \(error)"
                break
            }
            if chunk.isEmpty { break }
            do {
                if let output { try output.write(chunk, at: written) } else { try writeAll(1, chunk) }
                written += UInt64(chunk.count)
            } catch {
                failure = "writing \(target ?? "standard output"): \((error as? SystemError)?.reason ?? "\(error)")"
            }
        }
        // Closing early (a write that failed) stops the stream: the opener hears 'cancelled'.
        closeQuietly(fd)
        let closed = closingEvent(r["stream"], client)
        if context.json, let closed { context.print(JSONValue.object(["topic": .string(ControlEvent.peerStreamClosed), "data": closed]).description) }
        let reason = closed?["reason"]?.stringValue ?? "unknown (the daemon's connection ended)"
        let whole = failure == nil && reason == "normal"
        if let target, let output {
            if whole {
                do {
                    try output.sync()
                    output.close()
                    try syscall("rename", context: target) { rename(target + ".part", target) }
                } catch {
                    failure = "saving \(target): \((error as? SystemError)?.reason ?? "\(error)")"
                }
            } else {
                discard(output, target)
            }
        }
        if !context.json {
            context.stderr.write("stream \(Rendering.scalar(r["stream"] ?? .null)) \(Rendering.scalar(r["name"] ?? "?")) from \(r["short"]?.stringValue ?? "?"): "
                                 + "read \(written) bytes; " + (reason == "normal" ? "complete\n" : "ended: \(reason)\(detail(closed))\n"))
        }
        if let failure { throw .failure(failure, exitCode: 1) }
        return whole ? 0 : 1
    }

    /// The oldest incoming stream nobody took yet, else the next `peer.stream-opened` (from
    /// `peer` when given): its number. Subscribed before looking, so a stream opened in
    /// between is seen one way or the other.
    private static func nextOpened(_ client: ControlClient, _ context: CommandContext, from peer: String?, seconds: Double?) throws(CLIError) -> Int64 {
        _ = try context.perform(RPCCall(method: ControlMethod.eventsSubscribe, params: ["topics": .array([.string(ControlEvent.peerStreamOpened)])]), on: client)
        // Any form of the ID, or its start (as lists show it): the grouped form matched
        // neither the hex nor the short form before, and the command waited for ever.
        let wanted = peer.map { $0.uppercased().filter { $0 != "-" } }
        func fits(_ d: JSONValue) -> Bool {
            guard let wanted else { return true }
            let text = (d["peer_text"]?.stringValue ?? "").uppercased().filter { $0 != "-" }
            return text.hasPrefix(wanted) || (d["peer"]?.stringValue ?? "").uppercased().hasPrefix(wanted)
        }
        let listed = try context.perform(RPCCall(method: ControlMethod.peerStreams), on: client)["streams"]?.arrayValue ?? []
        if let waiting = listed.first(where: { $0["direction"] == "in" && $0["accepted"] == false && fits($0) }), let n = waiting["stream"]?.intValue {
            return n
        }
        let events = EventReader(client: client, seconds: seconds)
        while let e = try events.next() {
            guard e["topic"]?.stringValue == ControlEvent.peerStreamOpened, let d = e["data"], let n = d["stream"]?.intValue, fits(d) else { continue }
            if context.json { context.print(e.description) }
            return n
        }
        throw .failure("no stream was opened" + (seconds.map { " within \(Int($0)) s" } ?? ""), exitCode: 1)
    }

    /// The `peer.stream-closed` event of stream `number` (sent to this connection), or nil
    /// when the connection ends first (the daemon stopped or died: the stream did not end
    /// normally, and the caller still cleans up).
    private static func closingEvent(_ number: JSONValue?, _ client: ControlClient) -> JSONValue? {
        let events = EventReader(client: client, seconds: nil)
        while let e = try? events.next() {
            if e["topic"]?.stringValue == ControlEvent.peerStreamClosed, e["data"]?["stream"] == number { return e["data"] }
        }
        return nil
    }

    private static func detail(_ closed: JSONValue?) -> String {
        guard let closed else { return "" }
        return (closed["by_peer"] == true ? " (by the peer)" : "") + (closed["detail"]?.stringValue.map { " \(Rendering.text($0))" } ?? "")
    }

    private static func discard(_ output: RegularFile?, _ target: String) {
        output?.close()
        _ = try? FileSystem.remove(target + ".part")
    }
}
