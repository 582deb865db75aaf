import Control

/// The control socket's decoders: every byte a local client (or a buggy daemon, for the CLI)
/// sends passes through the line framer, the JSON parser and the JSON-RPC classifiers.
enum ControlTargets {
    // MARK: JSON

    /// The input as one JSON text. Property: a value that parses encodes to bytes that parse
    /// to the same value, and encoding that again gives the same bytes (the encoder is the
    /// parser's inverse on everything the parser accepts, including escapes, surrogate pairs,
    /// integers at Int64's edges and doubles). The String entry point agrees with the bytes one.
    static func json(_ input: [UInt8]) throws(PropertyViolation) {
        let parsed: JSONValue
        do { parsed = try JSONValue.parse(input) } catch { return }
        let encoded = parsed.encoded()
        let again: JSONValue
        do { again = try JSONValue.parse(encoded) } catch {
            throw PropertyViolation("the encoding of a parsed value does not parse: \(error); encoding: \(show(encoded))")
        }
        try check(again == parsed, "parse(encode(v)) != v: \(show(encoded))")
        try check(again.encoded() == encoded, "encode is not stable: \(show(encoded)) then \(show(again.encoded()))")
        if let text = String(validating: input, as: UTF8.self) {
            let fromText = try? JSONValue.parse(text)
            try check(fromText == parsed, "parsing the same text as a String gave \(String(describing: fromText))")
        }
    }

    // MARK: JSON-RPC, server side

    /// The input as one request line, classified as the daemon does. Properties: a request
    /// re-encoded (`encodedLine`) is classified as the same request; the error reply the
    /// server would send for an invalid line is a response the client decodes to the same
    /// id and error.
    static func rpcRequest(_ input: [UInt8]) throws(PropertyViolation) {
        try checkIncoming(RPCIncoming.parse(line: input), inBatch: false)
    }

    private static func checkIncoming(_ incoming: RPCIncoming, inBatch: Bool) throws(PropertyViolation) {
        switch incoming {
        case .request(let request):
            let line = request.encodedLine()
            try check(line.last == 0x0A && !line.dropLast().contains(0x0A), "a request's line is not one line: \(show(line))")
            guard case .request(let again) = RPCIncoming.parse(line: line.dropLast()) else {
                throw PropertyViolation("a re-encoded request is not a request: \(show(line))")
            }
            try check(again == request, "a re-encoded request classifies differently: \(show(line))")
        case .invalid(let id, let error):
            let reply = RPCResponse(id: id, error: error).encodedLine()
            let decoded: RPCServerMessage
            do { decoded = try RPCServerMessage.parse(line: reply.dropLast()) } catch {
                throw PropertyViolation("the server's error reply does not decode: \(error); reply: \(show(reply))")
            }
            guard case .response(let response) = decoded, response.id == id, response.outcome == .failure(error) else {
                throw PropertyViolation("the server's error reply decodes to something else: \(show(reply))")
            }
        case .batch(let elements):
            try check(!inBatch, "a batch inside a batch")
            try check(!elements.isEmpty, "an empty batch was classified as a batch")
            for element in elements { try checkIncoming(element, inBatch: true) }
        }
    }

    // MARK: JSON-RPC, client side

    /// The input as one line from the server, decoded as the CLI does. Property: a response
    /// or notification re-encoded decodes to itself.
    static func rpcResponse(_ input: [UInt8]) throws(PropertyViolation) {
        let message: RPCServerMessage
        do { message = try RPCServerMessage.parse(line: input) } catch { return }
        let line: [UInt8]
        switch message {
        case .response(let r): line = r.encodedLine()
        case .notification(let n): line = n.encodedLine()
        }
        let again: RPCServerMessage
        do { again = try RPCServerMessage.parse(line: line.dropLast()) } catch {
            throw PropertyViolation("a re-encoded server message does not decode: \(error); line: \(show(line))")
        }
        switch (message, again) {
        case (.response(let a), .response(let b)):
            try check(a == b, "a re-encoded response decodes differently: \(show(line))")
        case (.notification(let a), .notification(let b)):
            try check(a == b, "a re-encoded notification decodes differently: \(show(line))")
        default:
            throw PropertyViolation("a re-encoded server message changed kind: \(show(line))")
        }
    }

    // MARK: Line framing

    /// One outcome of `LineFramer.nextLine()`.
    private enum Outcome: Equatable {
        case line([UInt8])
        case tooLong
    }

    /// Input: a limit byte, a chunking seed (a length byte and the sizes), then the stream.
    /// Property: fed in the given chunks and drained after each, the framer yields exactly
    /// what a reference split of the whole stream gives: each "\n"-terminated line without
    /// its "\n" (and one "\r" before it), or `lineTooLong` for one longer than the limit;
    /// and a trailing partial line already over the limit is reported once.
    static func lineFramer(_ input: [UInt8]) throws(PropertyViolation) {
        var reader = ByteReader(input)
        let limit = Int(reader.byte() % 64) + 1
        let seed = reader.shortBlob()
        let stream = reader.rest()

        var framer = LineFramer(maxLineBytes: limit)
        var got: [Outcome] = []
        func drain() throws(PropertyViolation) {
            var guardCount = 0
            while true {
                do {
                    guard let line = try framer.nextLine() else { return }
                    got.append(.line(line))
                } catch {
                    got.append(.tooLong)
                }
                guardCount += 1
                try check(guardCount <= stream.count + 2, "nextLine() keeps returning without consuming input")
            }
        }
        for chunk in chunks(of: stream, sizes: seed) {
            framer.append(chunk)
            try drain()
            try check(framer.bufferedByteCount <= limit + 1 + chunk.count,
                      "the framer holds \(framer.bufferedByteCount) bytes with limit \(limit) after a \(chunk.count)-byte chunk")
        }
        try drain()
        let expected = referenceLines(stream, limit: limit)
        try check(got == expected, "framed \(got) but the reference split gives \(expected) (limit \(limit), chunks \(seed))")
    }

    /// The framer's documented behaviour, written the obvious way over the whole stream.
    private static func referenceLines(_ stream: [UInt8], limit: Int) -> [Outcome] {
        var out: [Outcome] = []
        var parts = stream.split(separator: 0x0A, omittingEmptySubsequences: false)
        let partial = parts.removeLast()  // after the last "\n" (or the whole stream)
        for var line in parts {
            if line.last == 0x0D { line = line.dropLast() }
            out.append(line.count > limit ? .tooLong : .line(Array(line)))
        }
        // A partial line may still lose a final "\r" to its "\n", so only limit + 2 bytes,
        // or limit + 1 not ending in "\r", are known to be too long.
        if partial.count > limit + 1 || (partial.count == limit + 1 && partial.last != 0x0D) {
            out.append(.tooLong)
        }
        return out
    }
}

/// Bytes for a failure message: as text when printable, else hex, cut to 200 bytes.
func show(_ bytes: some Collection<UInt8>) -> String {
    let head = Array(bytes.prefix(200))
    let more = bytes.count > 200 ? "... (\(bytes.count) bytes)" : ""
    if head.allSatisfy({ $0 >= 0x20 && $0 < 0x7F }) { return "\"" + String(decoding: head, as: UTF8.self) + "\"" + more }
    return head.map { String($0, radix: 16).count == 1 ? "0" + String($0, radix: 16) : String($0, radix: 16) }.joined() + more
}
