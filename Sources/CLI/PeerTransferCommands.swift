import Arguments
import Control
import FoundationEssentials
import SystemKit
#if canImport(Glibc)
import Glibc
#endif

/// `peerlink peer send-file | send-image | cancel | transfers | inbox | accept-resource |
/// decline-resource`: resources over peer sessions (MultipeerConnectivity's `sendResource`).
enum PeerTransferCommands {
    /// The events a sender follows.
    static let topics = [ControlEvent.peerResourceStarted, ControlEvent.peerResourceProgress, ControlEvent.peerResourceSent,
                         ControlEvent.peerResourceEnded, ControlEvent.peerResourceInterrupted]

    static let sendFile = sendCommand("send-file", image: false, abstract: "Send a file to peers, with progress; resumes after a dropped link.")
    static let sendImage = sendCommand("send-image", image: true, abstract: "Send a PNG or JPEG image to peers (checked before it is offered).")

    private static func sendCommand(_ verb: String, image: Bool, abstract: String) -> CLICommand {
        CLICommand(
            ["peer", verb],
            abstract: abstract,
            discussion: """
                Offers the file to each peer (every session unless --to); each receiver's daemon takes \
                it by its accept_resources policy, saves it under its inbox and checks its SHA-256. \
                On a terminal a progress line per peer shows percent, rate and time left; otherwise \
                one line when each transfer starts and ends. A transfer cut by a dropped link is \
                offered again when the peer is back and resumes where the receiver stopped. The file \
                is opened here and passed to the daemon: one it cannot open by name (a service kept \
                out of your home directory), or standard input (-), is copied into its outbox until \
                every peer has it, and resumes as well. Exits 0 \
                when every peer has the file, 1 when any transfer ended otherwise, 130 or 143 when \
                interrupted (Ctrl-C, SIGTERM; the transfers go on in the daemon); --detach returns \
                once offered. --json prints the reply and the peer.resource-* events.
                """ + (image ? " The file must be a PNG or JPEG; the receiver reports its pixel size." : ""),
            options: [
                .value("to", valueName: "id", parser: .nonEmptyString, repeating: true, help: "A peer; default: every session."),
                .value("name", valueName: "name", parser: .nonEmptyString, help: "The name offered (default: the file's own)."),
                .flag("detach", help: "Return once offered; follow with 'peer transfers' or 'peer watch'."),
            ],
            arguments: [Positional("file", parser: .path, help: "The file to send; - for standard input (with --name).")],
            action: .custom { context throws(CLIError) in try runSend(context, image: image) })
    }

    /// `peer cancel N`, `peer accept-resource N`, `peer decline-resource N`.
    static let cancel = oneTransfer("cancel", ControlMethod.peerCancel, "Cancel a transfer, either way (both sides hear 'cancelled').", done: "cancelled")
    static let acceptResource = oneTransfer("accept-resource", ControlMethod.peerAcceptResource,
                                            "Take a resource a peer offers (accept_resources = ask).", done: "accepted")
    static let declineResource = oneTransfer("decline-resource", ControlMethod.peerDeclineResource,
                                             "Decline a resource a peer offers.", done: "declined")

    private static func oneTransfer(_ verb: String, _ method: String, _ abstract: String, done: String) -> CLICommand {
        .numbered("transfer", verb, method, abstract: abstract, max: Int.max, listedBy: "peer transfers", done: done)
    }

    /// `peer transfers`.
    static let transfers = CLICommand(
        ["peer", "transfers"],
        abstract: "List transfers in progress or waiting, both ways.",
        action: .call(request: { _ throws(CLIError) in RPCCall(method: ControlMethod.peerTransfers) }, render: { r in
            let list = r["transfers"]?.arrayValue ?? []
            return list.isEmpty ? "no transfers" : list.map { t in
                let state = t["started"] == true ? percent(t) : (t["direction"]?.stringValue == "in" ? "offered" : "waiting")
                return "\(Rendering.scalar(t["transfer"] ?? .null)) \(t["direction"]?.stringValue == "in" ? "from" : "to") \(t["short"]?.stringValue ?? "?") "
                    + "\(Rendering.scalar(t["name"] ?? "?")) \(bytes(t["size"]?.intValue ?? 0)) \(state)"
            }.joined(separator: "\n")
        }))

    /// `peer inbox`.
    static let inbox = CLICommand(
        ["peer", "inbox"],
        abstract: "List the files peers sent (whole and verified), with image sizes.",
        action: .call(request: { _ throws(CLIError) in RPCCall(method: ControlMethod.peerInbox) }, render: { r in
            let files = r["files"]?.arrayValue ?? []
            let head = "inbox \(r["directory"]?.stringValue ?? "?")"
            return ([head] + files.map { f in
                let image = f["width"] != nil ? " \(f["media_type"]?.stringValue ?? "image") \(Rendering.scalar(f["width"] ?? .null))x\(Rendering.scalar(f["height"] ?? .null))" : ""
                return "\(Rendering.scalar(f["name"] ?? "?")) \(bytes(f["size"]?.intValue ?? 0))\(image)"
            }).joined(separator: "\n")
        }))

    // MARK: Sending

    static func runSend(_ context: CommandContext, image: Bool) throws(CLIError) -> Int32 {
        let v = context.values
        let file = v.string("file") ?? ""
        let to = v.strings("to")
        var params: [String: JSONValue] = ["to": to.isEmpty ? "all" : .array(to.map(JSONValue.string)), "image": .bool(image), "descriptor": true]
        if let name = v.string("name") { params["name"] = .string(name) }
        // The bytes go as a descriptor opened here, with this user's permissions: the daemon
        // reads the file by its path when it can open it too (no copy), and otherwise copies
        // what the descriptor gives (a service that cannot see this user's files; "-"), with
        // its size, so that a copy that ends short is an error rather than a shorter file.
        let fd: Int32
        if file == "-" {
            guard params["name"] != nil else {
                throw .usage(UsageError("--name is required when the file is '-' (standard input has no name)", commandPath: ["peerlink", "peer", image ? "send-image" : "send-file"]))
            }
            fd = try bufferedStandardInput()
        } else {
            // Absolute by its first byte: "/" and a combining mark after it are one Character.
            let path = file.utf8.first == UInt8(ascii: "/") ? file : AtomicFile.join(FileManager.default.currentDirectoryPath, file)
            params["path"] = .string(path)
            do {
                fd = try syscall("open", context: path) { open(path, O_RDONLY | O_CLOEXEC) }
            } catch {
                throw .failure("cannot open \(file): \((error as? SystemError)?.reason ?? "\(error)")", exitCode: 1)
            }
        }
        defer { closeQuietly(fd) }
        var info = stat()
        if fstat(fd, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG { params["size"] = .int(Int64(info.st_size)) }
        let client = try context.connect()
        defer { client.close() }
        let detach = v.flag("detach")
        // Subscribed before the offer, so no event of these transfers is missed.
        if !detach { _ = try context.perform(RPCCall(method: ControlMethod.eventsSubscribe, params: ["topics": .array(topics.map(JSONValue.string))]), on: client) }
        // Hashing a large file takes the daemon a while before it answers.
        let r = try context.perform(RPCCall(method: ControlMethod.peerSendResource, params: params, minimumReplyTimeout: 600, passing: [fd]), on: client)
        let sent = r["transfers"]?.arrayValue ?? []
        // Interrupted from here on, it exits 130/143 (not every peer has the file): set before
        // anything is printed, which a script may act on at once.
        if !detach { context.onStreamingStarted(.fails(removing: nil)) }
        if context.json { context.print(r.description) }
        if detach {
            if !context.json { for t in sent { context.print("offered transfer \(Rendering.scalar(t["transfer"] ?? .null)) to \(t["short"]?.stringValue ?? "?")") } }
            return 0
        }
        let live = !context.json && isatty(1) == 1
        var progress = ProgressBoard(sent, live: live, columns: live ? Self.terminalColumns() : nil)
        // On a terminal the board shows at once: a receiver that asks its user (accept_resources
        // = ask) may take its time, and a blank screen said nothing meanwhile.
        if live { for line in progress.render() { context.print(line) } }
        var failed = 0
        let events = EventReader(client: client, seconds: nil)
        while !progress.allDone, let e = try events.next() {
            guard let topic = e["topic"]?.stringValue, let d = e["data"], let id = d["transfer"]?.intValue, progress.has(id) else { continue }
            if context.json { context.print(e.description) }
            switch topic {
            case ControlEvent.peerResourceSent: progress.finish(id, "sent, verified by the peer")
            case ControlEvent.peerResourceEnded:
                failed += 1
                progress.finish(id, "failed: \(d["reason"]?.stringValue ?? "?")\(d["by_peer"] == true ? " (by the peer)" : "") \(Rendering.text(d["detail"]?.stringValue ?? ""))")
            case ControlEvent.peerResourceInterrupted: progress.note(id, "interrupted at \(bytes(d["bytes"]?.intValue ?? 0)); resumes when the peer is back")
            default: progress.update(id, d)
            }
            if !context.json { for line in progress.render() { context.print(line) } }
        }
        return failed == 0 ? 0 : 1
    }

    /// The width of the terminal on standard output, if it says.
    static func terminalColumns() -> Int? {
        var size = winsize()
        guard ioctl(1, UInt(TIOCGWINSZ), &size) == 0, size.ws_col > 0 else { return nil }
        return Int(size.ws_col)
    }

    /// Standard input as a file of its own, read to its end first: a pipe's end of file
    /// cannot tell a writer that finished from one that was killed (Ctrl-C on the pipeline),
    /// so nothing is handed to the daemon until all of it is here, and then with its size.
    /// The file is unnamed (unlinked at once) in `$TMPDIR` or /tmp.
    static func bufferedStandardInput() throws(CLIError) -> Int32 {
        let directory = ProcessInfo.processInfo.environment["TMPDIR"].flatMap { $0.isEmpty ? nil : $0 } ?? "/tmp"
        var template = Array((directory + "/peerlink-stdin-XXXXXX").utf8CString)
        let fd = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
        guard fd >= 0 else { throw .failure("cannot buffer standard input in \(directory): \(SystemError(call: "mkstemp", code: errno).reason)", exitCode: 1) }
        _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        template.withUnsafeBufferPointer { _ = unlink($0.baseAddress!) }
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        do {
            while true {
                let n = try syscall("read", context: "standard input") { buffer.withUnsafeMutableBytes { read(0, $0.baseAddress, $0.count) } }
                if n == 0 { break }
                try writeAll(fd, Array(buffer[0..<n]))
            }
            _ = try syscall("lseek") { lseek(fd, 0, SEEK_SET) }
        } catch {
            closeQuietly(fd)
            throw .failure("cannot buffer standard input in \(directory): \((error as? SystemError)?.reason ?? "\(error)")", exitCode: 1)
        }
        return fd
    }

    static func bytes(_ n: Int64) -> String {
        let units = ["B", "KiB", "MiB", "GiB", "TiB"]
        var v = Double(n), i = 0
        while v >= 1024, i < units.count - 1 { v /= 1024; i += 1 }
        return i == 0 ? "\(n) B" : "\(String(oneDecimal: v)) \(units[i])"
    }

    static func percent(_ t: JSONValue) -> String {
        let size = t["size"]?.intValue ?? 0, done = t["bytes"]?.intValue ?? 0
        return size == 0 ? "100%" : "\(done * 100 / size)%"
    }
}

/// The lines a sender shows: one a transfer, redrawn in place on a terminal, or printed
/// when something changes (a start, an end) otherwise.
struct ProgressBoard {
    private struct Row {
        let id: Int64
        let peer: String
        let size: Int64
        var bytes: Int64 = 0
        var rate: Double = 0
        var left: Double?
        var status: String?
        var done = false
    }

    private var rows: [Row]
    private let live: Bool
    /// The terminal's width: a live line longer than it would wrap, and the redraw, which
    /// moves up one line a row, would leave stale copies behind.
    private let columns: Int?
    private var drawn = 0
    private var changed: [Int] = []

    /// A row's status until its transfer starts.
    static let waiting = "offered, waiting for the peer to accept"

    init(_ transfers: [JSONValue], live: Bool, columns: Int? = nil) {
        rows = transfers.map { t in
            Row(id: t["transfer"]?.intValue ?? 0, peer: "\(t["name"].map { Rendering.scalar($0) } ?? "?") to \(t["short"]?.stringValue ?? "?")",
                size: t["size"]?.intValue ?? 0, status: Self.waiting)
        }
        self.live = live
        self.columns = columns
        changed = live ? Array(rows.indices) : []
    }

    var allDone: Bool { rows.allSatisfy(\.done) }
    func has(_ id: Int64) -> Bool { rows.contains { $0.id == id } }

    mutating func update(_ id: Int64, _ d: JSONValue) {
        guard let i = rows.firstIndex(where: { $0.id == id }) else { return }
        let first = rows[i].bytes == 0 && (rows[i].status == nil || rows[i].status == Self.waiting)
        rows[i].bytes = d["bytes"]?.intValue ?? rows[i].bytes
        rows[i].rate = d["bytes_per_second"]?.doubleValue ?? rows[i].rate
        rows[i].left = d["seconds_left"]?.doubleValue
        rows[i].status = nil
        if live || first { changed.append(i) }
    }

    mutating func note(_ id: Int64, _ status: String) {
        guard let i = rows.firstIndex(where: { $0.id == id }) else { return }
        rows[i].status = status
        changed.append(i)
    }

    mutating func finish(_ id: Int64, _ status: String) {
        guard let i = rows.firstIndex(where: { $0.id == id }) else { return }
        rows[i].status = status
        rows[i].done = true
        if status.hasPrefix("sent") { rows[i].bytes = rows[i].size }
        changed.append(i)
    }

    /// What to print now: on a terminal the whole board (after moving up over the last one),
    /// else the rows that changed.
    mutating func render() -> [String] {
        defer { changed = [] }
        guard !changed.isEmpty else { return [] }
        if !live { return Array(Set(changed)).sorted().map { line(rows[$0]) } }
        let up = drawn > 0 ? "\u{1B}[\(drawn)A" : ""
        drawn = rows.count
        var lines = rows.map { r -> String in
            let text = line(r)
            guard let columns, text.count >= columns else { return "\u{1B}[2K" + text }
            return "\u{1B}[2K" + text.prefix(max(columns - 2, 1)) + "…"
        }
        lines[0] = up + lines[0]
        return lines
    }

    private func line(_ r: Row) -> String {
        let pct = r.size == 0 ? 100 : Int(r.bytes * 100 / r.size)
        if let s = r.status { return "\(r.id) \(r.peer): \(s)" }
        let width = 20
        let bar = String(repeating: "#", count: pct * width / 100) + String(repeating: ".", count: width - pct * width / 100)
        let rate = r.rate > 0 ? " \(PeerTransferCommands.bytes(Int64(r.rate)))/s" : ""
        let left = r.left.map { " \(Int($0.rounded())) s left" } ?? ""
        return "\(r.id) \(r.peer) [\(bar)] \(pct)% \(PeerTransferCommands.bytes(r.bytes))/\(PeerTransferCommands.bytes(r.size))\(rate)\(left)"
    }
}
