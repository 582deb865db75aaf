import Arguments
import BLE
import Control
import FoundationEssentials
import SystemKit
#if canImport(Glibc)
import Glibc
#endif

/// `peerlink peer stream PEER`: a message stream with one peer (`peer.message-stream`) on a
/// terminal or in a pipe: lines of standard input out as messages, messages in to standard
/// output.
enum PeerStreamCommand {
    static let command = CLICommand(
        ["peer", "stream"],
        abstract: "Exchange messages with a peer through a data stream (input lines out, messages in to output).",
        discussion: """
            Opens a message stream (peer.message-stream): each line of standard input (without \
            its newline; UTF-8, or hex with --hex) is sent as one reliable message, in order, \
            with no request per message; empty lines are skipped. Each message from the peer \
            is printed on a line of its own (as UTF-8 text, as hex with --hex, or as \
            {"data_base64": ...} with --json); while the stream is open the peer's messages \
            are not peer.message events. When the peer does not take messages as fast as they \
            are read, reading waits (nothing is dropped). At the end of input the stream \
            closes (with --keep, messages are printed until the session ends); counts go to \
            standard error. Exit 1 when the session ends before every line of the input was \
            sent, or a line is longer than the stream carries (the max_message the daemon \
            reports: it depends on net.core.wmem_max) or is not hex.
            """,
        options: [
            .flag("hex", help: "Lines in and messages out are hex."),
            .flag("keep", help: "After the end of input, keep printing messages until the session ends."),
            .value("from", valueName: "file", parser: .nonEmptyString, help: "Read the lines from this file instead of standard input."),
        ],
        arguments: [Positional("peer", help: "The peer ID: 64 hex digits, the grouped form, or its start as lists show it (7 characters or more).")],
        action: .custom(run))

    /// What the loop ended on.
    private enum Outcome { case inputEnded, sessionEnded, failed(String) }

    static func run(_ context: CommandContext) throws(CLIError) -> Int32 {
        let v = context.values
        let hex = v.flag("hex")
        let (input, source) = try PeripheralCommands.openInput(v.string("from"))
        defer { if input != 0 { closeQuietly(input) } }
        let client = try context.connect()
        defer { client.close() }
        let r = try context.perform(RPCCall(method: ControlMethod.peerMessageStream, params: ["peer": .string(v.string("peer") ?? "")]), on: client)
        guard let fd = client.takeDescriptor() else {
            throw .failure("the daemon answered without passing the stream's socket", exitCode: 1)
        }
        let limit = Int(r["max_message"]?.intValue ?? 0)
        let streamID = r["stream"]?.stringValue ?? ""
        if !context.json {
            context.stderr.write("streaming with \(r["short"]?.stringValue ?? "?") (messages up to \(limit) bytes)\n")
        }
        context.streamingStarted()
        let outcome = loop(fd, input: input, source: source, limit: limit, hex: hex, keep: v.flag("keep"), context)
        // The daemon sees the end of the socket and reports the stream's counts.
        _ = shutdown(fd, Int32(SHUT_RDWR))
        closeQuietly(fd)
        let events = EventReader(client: client, seconds: 30)
        var ended: JSONValue?
        while ended == nil {
            guard let e = try events.next() else { break }
            if e["topic"]?.stringValue == ControlEvent.peerStreamEnded, e["data"]?["stream"]?.stringValue == streamID { ended = e["data"] }
        }
        if let ended {
            context.stderr.write("sent \(ended["sent"]?.intValue ?? 0) messages, received \(ended["received"]?.intValue ?? 0) (\(ended["message"]?.stringValue ?? "?"))\n")
        }
        if case .failed(let why) = outcome { throw .failure(why, exitCode: 1) }
        return 0
    }

    /// One thread, one `poll`: input lines go out as packets when the socket takes them (a
    /// blocked write never stops the printing of what arrives, so two streams feeding each
    /// other cannot wait on each other forever), packets in are printed at once.
    private static func loop(_ fd: Int32, input: Int32, source: String, limit: Int, hex: Bool, keep: Bool, _ context: CommandContext) -> Outcome {
        do { try setNonBlocking(fd) } catch { return .failed("the stream's socket: \(error)") }
        var framer = LineFramer(maxLineBytes: max(limit, 1) * (hex ? 2 : 1) + 1)
        var waiting: [[UInt8]] = []
        var lineNumber = 0
        var inputDone = false
        while true {
            if inputDone, waiting.isEmpty, !keep { return .inputEnded }
            var fds = [pollfd(fd: fd, events: Int16(POLLIN) | (waiting.isEmpty ? 0 : Int16(POLLOUT)), revents: 0)]
            if waiting.isEmpty, !inputDone { fds.append(pollfd(fd: input, events: Int16(POLLIN), revents: 0)) }
            do { _ = try syscall("poll") { poll(&fds, nfds_t(fds.count), -1) } } catch { return .failed("poll: \(error)") }
            // Messages in.
            if fds[0].revents != 0 {
                switch printArrived(fd, limit: limit, hex: hex, context) {
                // (Before the input's end, lines were not sent: a script must not take that for success.)
                case .some(.sessionEnded) where !inputDone || !waiting.isEmpty:
                    return .failed("the session ended before all the input was sent")
                case .some(.sessionEnded): return .sessionEnded
                case .some(let other): return other
                case nil: break
                }
            }
            // Messages out, in order.
            while let next = waiting.first {
                do {
                    guard try SocketIO.sendNow(fd, next[...]) != nil else { break }
                } catch let e as SystemError {
                    if e.code == EMSGSIZE { return .failed("a line of \(next.count) bytes is longer than the stream carries (\(limit) bytes)") }
                    if SocketIO.isDisconnect(e) { return .failed("the session ended before all the input was sent") }
                    return .failed("writing to the stream: \(e.reason)")
                } catch {
                    return .failed("writing to the stream: \(error)")
                }
                waiting.removeFirst()
            }
            // Lines in.
            if fds.count > 1, fds[1].revents != 0 {
                let chunk: [UInt8]
                do { chunk = try SocketIO.receive(input, maxBytes: 65_536) } catch { return .failed("reading \(source): \(error)") }
                if chunk.isEmpty {
                    inputDone = true
                    framer.append([0x0A])  // a last line without its newline
                } else {
                    framer.append(chunk[...])
                }
                while true {
                    let line: [UInt8]?
                    do { line = try framer.nextLine() } catch {
                        return .failed("\(source), line \(lineNumber + 1): longer than the stream carries (\(limit) bytes)")
                    }
                    guard let line else { break }
                    lineNumber += 1
                    if line.isEmpty { continue }
                    guard !hex else {
                        guard let bytes = parseHex(String(decoding: line, as: UTF8.self)), !bytes.isEmpty else {
                            return .failed("\(source), line \(lineNumber): not hex: expected pairs of 0-9a-f")
                        }
                        waiting.append(bytes)
                        continue
                    }
                    waiting.append(line)
                }
            }
        }
    }

    /// Prints every packet waiting on `fd`; `.sessionEnded` at its end.
    private static func printArrived(_ fd: Int32, limit: Int, hex: Bool, _ context: CommandContext) -> Outcome? {
        while true {
            let packet: [UInt8]?
            do { packet = try SocketIO.receiveNow(fd, maxBytes: limit + 1) } catch {
                return .failed("reading the stream: \((error as? SystemError)?.reason ?? "\(error)")")
            }
            guard let m = packet else { return nil }
            // An empty packet is the end here: the daemon never sends one (no empty messages).
            if m.isEmpty { return .sessionEnded }
            if context.json {
                context.print(JSONValue.object(["data_base64": .string(Data(m).base64EncodedString())]).description)
            } else {
                context.print(hex ? hexString(m) : String(decoding: m, as: UTF8.self))
            }
        }
    }
}
