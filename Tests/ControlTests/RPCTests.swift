import Foundation
import Testing
@testable import Control

@Suite struct RPCIncomingTests {
    private func classify(_ line: String) -> RPCIncoming { RPCIncoming.parse(line: Array(line.utf8)) }

    @Test func validRequestsAndNotifications() throws {
        guard case .request(let r) = classify(#"{"jsonrpc":"2.0","id":7,"method":"adapter.power","params":{"on":true}}"#) else {
            Issue.record("not a request")
            return
        }
        #expect(r == RPCRequest(id: 7, method: "adapter.power", params: ["on": true]))
        #expect(!r.isNotification)

        guard case .request(let n) = classify(#"{"jsonrpc":"2.0","method":"events.unsubscribe"}"#) else {
            Issue.record("not a notification")
            return
        }
        #expect(n.id == nil && n.isNotification && n.params.values.isEmpty)

        guard case .request(let nullID) = classify(#"{"jsonrpc":"2.0","id":null,"method":"m","params":null}"#) else {
            Issue.record("null id must be a request")
            return
        }
        #expect(nullID.id == .null && !nullID.isNotification)

        guard case .request(let stringID) = classify(#"{"jsonrpc":"2.0","id":"abc","method":"m"}"#) else {
            Issue.record("string id")
            return
        }
        #expect(stringID.id == "abc")
    }

    @Test(arguments: [
        ("{", JSONValue.null, RPCErrorCode.parseError, "parse error: at byte 1: unexpected end of input in object"),
        ("", .null, RPCErrorCode.parseError, "parse error: at byte 0: unexpected end of input"),
        ("[]", .null, RPCErrorCode.invalidRequest, "invalid request: empty batch"),
        ("42", .null, RPCErrorCode.invalidRequest, "invalid request: a request must be an object, got number"),
        (#"{"id":1,"method":"m"}"#, 1, RPCErrorCode.invalidRequest, #"invalid request: missing "jsonrpc": "2.0""#),
        (#"{"jsonrpc":"1.0","id":1,"method":"m"}"#, 1, RPCErrorCode.invalidRequest, #"invalid request: "jsonrpc" must be "2.0", got "1.0""#),
        (#"{"jsonrpc":2.0,"id":"a","method":"m"}"#, "a", RPCErrorCode.invalidRequest, #"invalid request: "jsonrpc" must be "2.0", got 2.0"#),
        (#"{"jsonrpc":"2.0","id":1}"#, 1, RPCErrorCode.invalidRequest, #"invalid request: missing "method""#),
        (#"{"jsonrpc":"2.0","id":1,"method":5}"#, 1, RPCErrorCode.invalidRequest, #"invalid request: "method" must be a string, got number"#),
        (#"{"jsonrpc":"2.0","id":1,"method":""}"#, 1, RPCErrorCode.invalidRequest, #"invalid request: "method" must not be empty"#),
        (#"{"jsonrpc":"2.0","id":1,"method":"rpc.x"}"#, 1, RPCErrorCode.invalidRequest, #"invalid request: method names beginning with "rpc." are reserved: rpc.x"#),
        (#"{"jsonrpc":"2.0","id":1,"method":"m","params":[1]}"#, 1, RPCErrorCode.invalidParams, "invalid params: positional params are not supported; use an object"),
        (#"{"jsonrpc":"2.0","id":1,"method":"m","params":"x"}"#, 1, RPCErrorCode.invalidRequest, #"invalid request: "params" must be an object, got string"#),
        (#"{"jsonrpc":"2.0","id":1.5,"method":"m"}"#, .null, RPCErrorCode.invalidRequest, #"invalid request: "id" must be a string, an integer or null, got 1.5"#),
        (#"{"jsonrpc":"2.0","id":{},"method":"m"}"#, .null, RPCErrorCode.invalidRequest, #"invalid request: "id" must be a string, an integer or null, got object"#),
        (#"{"jsonrpc":"2.0","id":[1],"method":"m"}"#, .null, RPCErrorCode.invalidRequest, #"invalid request: "id" must be a string, an integer or null, got array"#),
        (#"{"jsonrpc":"2.0","id":true,"method":"m"}"#, .null, RPCErrorCode.invalidRequest, #"invalid request: "id" must be a string, an integer or null, got boolean"#),
        (#"{"jsonrpc":"2.0","id":"q","method":"m","extra":1}"#, "q", RPCErrorCode.invalidRequest, #"invalid request: unknown member "extra""#),
        (#"{"jsonrpc":"2.0","method":"m","params":[]}"#, .null, RPCErrorCode.invalidParams, "invalid params: positional params are not supported; use an object"),
    ])
    func invalidMessages(line: String, id: JSONValue, code: Int, message: String) {
        guard case .invalid(let gotID, let error) = classify(line) else {
            Issue.record("expected .invalid for \(line)")
            return
        }
        #expect(gotID == id)
        #expect(error.code == code)
        #expect(error.message == message)
    }

    @Test func integralDoubleIDIsAnInteger() {
        guard case .request(let r) = classify(#"{"jsonrpc":"2.0","id":3.0,"method":"m"}"#) else {
            Issue.record("expected a request")
            return
        }
        #expect(r.id == .int(3))
    }

    @Test func batches() {
        let line = #"[{"jsonrpc":"2.0","id":1,"method":"a"}, 5, [], {"jsonrpc":"2.0","method":"b"}, {"id":2}]"#
        guard case .batch(let items) = classify(line) else {
            Issue.record("expected a batch")
            return
        }
        #expect(items.count == 5)
        guard items.count == 5 else { return }
        if case .request(let r) = items[0] { #expect(r.method == "a" && r.id == 1) } else { Issue.record("item 0") }
        if case .invalid(let id, let e) = items[1] {
            #expect(id == .null && e.message == "invalid request: a batch element must be an object, got number")
        } else { Issue.record("item 1") }
        if case .invalid(_, let e) = items[2] {
            #expect(e.message == "invalid request: a batch element must be an object, got array")
        } else { Issue.record("item 2: nested arrays are invalid, not batches") }
        if case .request(let r) = items[3] { #expect(r.isNotification) } else { Issue.record("item 3") }
        if case .invalid(let id, let e) = items[4] { #expect(id == 2 && e.code == RPCErrorCode.invalidRequest) } else { Issue.record("item 4") }
    }

    /// Every element of a batch is answered: a long one of junk (a megabyte of `1,`) is one
    /// error, not an error per element (a reply sixty times the request's size).
    @Test func aBatchPastTheLimitIsOneError() {
        let most = "[" + Array(repeating: "1", count: RPCIncoming.maxBatch).joined(separator: ",") + "]"
        guard case .batch(let items) = classify(most) else {
            Issue.record("\(RPCIncoming.maxBatch) elements are a batch")
            return
        }
        #expect(items.count == RPCIncoming.maxBatch)
        let over = "[" + Array(repeating: "1", count: RPCIncoming.maxBatch + 1).joined(separator: ",") + "]"
        guard case .invalid(let id, let e) = classify(over) else {
            Issue.record("expected one error")
            return
        }
        #expect(id == .null && e.code == RPCErrorCode.invalidRequest)
        #expect(e.message == "invalid request: a batch of 257 requests: at most 256 in one")
    }
}

@Suite struct RPCMessageTests {
    private func text(_ bytes: [UInt8]) -> String { String(decoding: bytes, as: UTF8.self) }

    @Test func encodesRequests() {
        #expect(text(RPCRequest(id: 1, method: "daemon.status").encodedLine()) == "{\"id\":1,\"jsonrpc\":\"2.0\",\"method\":\"daemon.status\"}\n")
        #expect(text(RPCRequest(id: nil, method: "m", params: ["on": true]).encodedLine()) == "{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"params\":{\"on\":true}}\n")
        #expect(text(RPCRequest(id: .null, method: "m").encodedLine()) == "{\"id\":null,\"jsonrpc\":\"2.0\",\"method\":\"m\"}\n")
    }

    @Test func encodesResponsesAndNotifications() {
        #expect(text(RPCResponse(id: 3, result: ["ok": true]).encodedLine()) == "{\"id\":3,\"jsonrpc\":\"2.0\",\"result\":{\"ok\":true}}\n")
        #expect(text(RPCResponse(id: .null, error: .parseError("at byte 0: x")).encodedLine())
            == "{\"error\":{\"code\":-32700,\"message\":\"parse error: at byte 0: x\"},\"id\":null,\"jsonrpc\":\"2.0\"}\n")
        let event = ControlEvent.notification(topic: "adapter.powered", time: Date(timeIntervalSince1970: 1_795_975_200.123),
                                              data: ["powered": false])
        #expect(text(event.encodedLine())
            == "{\"jsonrpc\":\"2.0\",\"method\":\"event\",\"params\":{\"data\":{\"powered\":false},\"time\":\"2026-11-29T18:00:00.123Z\",\"topic\":\"adapter.powered\"}}\n")
    }

    @Test func clientSideRoundTrips() throws {
        let response = RPCResponse(id: 9, error: .methodNotFound("foo.bar"))
        guard case .response(let r) = try RPCServerMessage.parse(line: response.encodedLine().dropLast()) else {
            Issue.record("expected a response")
            return
        }
        #expect(r == response)
        let note = RPCNotification(method: "event", params: ["topic": "x"])
        guard case .notification(let n) = try RPCServerMessage.parse(line: note.encodedLine()) else {
            Issue.record("expected a notification")
            return
        }
        #expect(n == note)
    }

    @Test(arguments: [
        ("nope", "parse error: at byte 1: unexpected character 'o'"),
        ("[]", "invalid request: a server message must be an object, got array"),
        (#"{"id":1,"result":1}"#, #"invalid request: server message lacks "jsonrpc": "2.0""#),
        (#"{"jsonrpc":"2.0","result":1}"#, #"invalid request: response has no "id""#),
        (#"{"jsonrpc":"2.0","id":1}"#, #"invalid request: response has neither "result" nor "error""#),
        (#"{"jsonrpc":"2.0","id":1,"result":1,"error":{}}"#, #"invalid request: response has both "result" and "error""#),
        (#"{"jsonrpc":"2.0","id":1,"error":{"message":"x"}}"#, #"invalid request: "error" has no "code""#),
        (#"{"jsonrpc":"2.0","id":1,"error":{"code":"x","message":"x"}}"#, #"invalid request: "error.code" must be an integer, got "x""#),
        (#"{"jsonrpc":"2.0","id":1,"error":{"code":1}}"#, #"invalid request: "error" has no "message""#),
        (#"{"jsonrpc":"2.0","id":1,"error":[]}"#, #"invalid request: "error" must be an object, got array"#),
        (#"{"jsonrpc":"2.0","method":1}"#, #"invalid request: "method" must be a string, got number"#),
    ])
    func rejectsMalformedServerMessages(line: String, message: String) {
        #expect(throws: RPCError.self) { try RPCServerMessage.parse(line: Array(line.utf8)) }
        do {
            _ = try RPCServerMessage.parse(line: Array(line.utf8))
        } catch {
            #expect(error.message == message)
        }
    }

    @Test func errorFactories() throws {
        let nf = RPCError.methodNotFound("foo.bar")
        #expect(nf.code == -32601 && nf.message == "method not found: foo.bar" && nf.data == ["method": "foo.bar"])
        let ip = RPCError.invalidParams("timeout", "must be positive")
        #expect(ip.message == "invalid params: timeout: must be positive")
        #expect(ip.data == ["param": "timeout", "reason": "must be positive"])
        #expect(try RPCError(json: ip.json) == ip)
        #expect(RPCError.internalError("boom").json == ["code": -32603, "message": "internal error: boom"])
        #expect(RPCError(code: RPCErrorCode.adapterNotFound, message: "no adapter hci9").description == "no adapter hci9 (code -32002)")
    }
}

@Suite struct RPCParamsTests {
    private let params = RPCParams(["s": "x", "b": true, "i": 5, "d": 2.5, "n": nil, "a": ["p", "q"], "bad": ["p", 1], "f": 1.5])

    private func reason(_ body: () throws -> Void) -> String? {
        do {
            try body()
            return nil
        } catch let error as RPCError {
            #expect(error.code == RPCErrorCode.invalidParams)
            return error.message
        } catch {
            return "unexpected \(error)"
        }
    }

    @Test func typedAccessors() throws {
        #expect(try params.string("s") == "x")
        #expect(try params.optionalString("n") == nil)
        #expect(try params.optionalString("absent") == nil)
        #expect(try params.bool("b"))
        #expect(try params.optionalBool("n") == nil)
        #expect(try params.int("i", in: 1...10) == 5)
        #expect(try params.optionalInt("absent") == nil)
        #expect(try params.optionalDouble("d", in: 0...3) == 2.5)
        #expect(try params.optionalDouble("i") == 5)
        #expect(try params.optionalStringArray("a") == ["p", "q"])
        try params.rejectUnknown(allowed: Set(params.values.keys))
    }

    @Test func errorsNameTheKey() {
        #expect(reason { _ = try params.string("absent") } == "invalid params: absent: required")
        #expect(reason { _ = try params.string("n") } == "invalid params: n: required")
        #expect(reason { _ = try params.string("i") } == "invalid params: i: expected a string, got number")
        #expect(reason { _ = try params.optionalBool("s") } == "invalid params: s: expected a boolean, got string")
        #expect(reason { _ = try params.int("f") } == "invalid params: f: expected an integer, got 1.5")
        #expect(reason { _ = try params.int("s") } == "invalid params: s: expected an integer, got string")
        #expect(reason { _ = try params.int("i", in: 6...9) } == "invalid params: i: must be between 6 and 9, got 5")
        #expect(reason { _ = try params.optionalDouble("d", in: 0...1) } == "invalid params: d: must be between 0.0 and 1.0, got 2.5")
        #expect(reason { _ = try params.optionalDouble("b") } == "invalid params: b: expected a number, got boolean")
        #expect(reason { _ = try params.optionalStringArray("s") } == "invalid params: s: expected an array of strings, got string")
        #expect(reason { _ = try params.optionalStringArray("bad") } == "invalid params: bad: expected an array of strings, got number at index 1")
        #expect(reason { try params.rejectUnknown(allowed: ["s"]) } == "invalid params: a: unknown parameter")
        #expect(reason { try RPCParams(["frobnicate": 1]).rejectUnknown(allowed: []) } == "invalid params: frobnicate: unknown parameter")
    }
}

@Suite struct ControlEventTests {
    @Test func topicMatching() {
        #expect(ControlEvent.matches(topic: "adapter.powered", filters: []))
        #expect(ControlEvent.matches(topic: "adapter.powered", filters: ["adapter"]))
        #expect(ControlEvent.matches(topic: "adapter.powered", filters: ["adapter.powered"]))
        #expect(!ControlEvent.matches(topic: "adapterx.powered", filters: ["adapter"]))
        #expect(!ControlEvent.matches(topic: "adapter", filters: ["adapter.powered"]))
        #expect(ControlEvent.matches(topic: "bluez.available", filters: ["adapter", "bluez"]))
    }

    @Test func timestamps() {
        #expect(ControlEvent.timestamp(Date(timeIntervalSince1970: 0)) == "1970-01-01T00:00:00.000Z")
        #expect(ControlEvent.timestamp(Date(timeIntervalSince1970: 951_782_400.5)) == "2000-02-29T00:00:00.500Z")
        #expect(ControlEvent.timestamp(Date(timeIntervalSince1970: 1_795_975_200.123)) == "2026-11-29T18:00:00.123Z")
    }
}
