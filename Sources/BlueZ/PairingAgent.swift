import BLE
import DBus
import FoundationEssentials
import Logging
import Synchronization

/// How the built-in pairing agent answers.
public enum AgentPolicy: Sendable, Hashable, CustomStringConvertible {
    /// Accept every pairing and authorization without asking (Just Works).
    case justWorks
    /// Ask a control client (an event), refuse when nobody answers in time.
    case confirm
    /// Use this six-digit passkey; a displayed passkey must match it.
    case passkey(UInt32)
    /// Refuse everything.
    case reject

    /// Parses `just-works`, `confirm`, `passkey NNNNNN` (or `passkey:NNNNNN`), `reject`.
    public init?(_ text: String) {
        var trimmed = Substring(text)
        while trimmed.first?.isWhitespace == true { trimmed.removeFirst() }
        while trimmed.last?.isWhitespace == true { trimmed.removeLast() }
        let t = trimmed.lowercased()
        switch t {
        case "just-works", "justworks": self = .justWorks
        case "confirm": self = .confirm
        case "reject": self = .reject
        default:
            let parts = t.split(whereSeparator: { $0 == " " || $0 == ":" || $0 == "=" })
            guard parts.count == 2, parts[0] == "passkey", parts[1].count == 6, let n = UInt32(parts[1]) else { return nil }
            self = .passkey(n)
        }
    }

    /// The BlueZ IO capability the agent registers with.
    var capability: String {
        switch self {
        case .justWorks, .reject: "NoInputNoOutput"
        case .confirm: "DisplayYesNo"
        case .passkey: "KeyboardDisplay"
        }
    }

    /// `just-works`, `confirm`, `passkey 123456`, `reject`.
    public var description: String {
        switch self {
        case .justWorks: "just-works"
        case .confirm: "confirm"
        case .passkey(let n): "passkey " + String(n, zeroPaddedTo: 6)
        case .reject: "reject"
        }
    }
}

/// A yes/no question bluetoothd asks the agent.
public enum AgentQuestion: Sendable, Hashable {
    /// RequestConfirmation: do both sides show the same passkey?
    case confirm
    /// RequestAuthorization: may this device pair?
    case authorize
    /// AuthorizeService: may this device use a service?
    case authorizeService
}

/// What the agent saw; the daemon says it to control clients in its own words.
public enum AgentEvent: Sendable, Hashable {
    /// bluetoothd asked a question; the policy answers it (under `confirm`, a control client).
    case asked(AgentQuestion, device: BluetoothAddress?, passkey: UInt32?)
    /// A PIN code to show (legacy pairing; empty when bluetoothd sent none).
    case displayPinCode(device: BluetoothAddress?, pinCode: String)
    /// A passkey to show.
    case displayPasskey(device: BluetoothAddress?, passkey: UInt32)
    /// bluetoothd canceled the questions pending.
    case canceled
}

/// A question the agent asks a control client.
public struct AgentRequest: Sendable {
    /// The request id to answer with.
    public let id: String
    /// What is asked.
    public let kind: AgentQuestion
    /// The central asking.
    public let device: BluetoothAddress?
    /// The passkey to compare, for `confirm`.
    public let passkey: UInt32?
    /// The service UUID, for `authorize-service`.
    public let service: String?
}

/// The built-in pairing agent (org.bluez.Agent1), registered as the default agent so a
/// headless board can pair by policy; registered again when bluetoothd returns.
public final class PairingAgent: Sendable {
    /// The agent's object path.
    public static let path: ObjectPath = "/org/peerlink/agent"
    private let state = Mutex<(policy: AgentPolicy, pending: [String: CheckedContinuation<Bool, Never>], next: Int)>((.justWorks, [:], 1))
    private let connection = Mutex<BusConnection?>(nil)
    /// The loop applying the session's BlueZ events in order (replaced on attach, ends on detach).
    private let events = Mutex<Task<Void, Never>?>(nil)
    private let logger: Logger
    private let timeout: Duration
    private let onRequest: @Sendable (AgentRequest) -> Void
    private let onEvent: @Sendable (AgentEvent) -> Void

    /// Creates an agent with a policy; `onRequest` publishes questions (policy `confirm`),
    /// `onEvent` reports what happened (a question asked, a passkey to show, a cancel).
    public init(policy: AgentPolicy, timeout: Duration = .seconds(30), logger: Logger,
                onRequest: @escaping @Sendable (AgentRequest) -> Void, onEvent: @escaping @Sendable (AgentEvent) -> Void) {
        state.withLock { $0.policy = policy }
        self.timeout = timeout
        self.logger = logger
        self.onRequest = onRequest
        self.onEvent = onEvent
    }

    /// The policy now.
    public var policy: AgentPolicy { state.withLock { $0.policy } }

    /// Changes the policy and registers again with the capability it needs. When that fails,
    /// the policy is what it was and bluetoothd is brought back to it (said "the policy stays
    /// as it was" while the new one stayed set: `agent policy` then showed a passkey policy
    /// bluetoothd had never been told, under which the kernel bonds anyone "just works").
    public func setPolicy(_ p: AgentPolicy) async throws {
        let old = state.withLock { s -> AgentPolicy in
            defer { s.policy = p }
            return s.policy
        }
        guard let c = connection.withLock({ $0 }) else { return }
        do {
            try await register(on: c)
        } catch {
            let restored = state.withLock { s -> Bool in
                guard s.policy == p else { return false }  // another change came since: it stands
                s.policy = old
                return true
            }
            if restored {
                do { try await register(on: c) } catch {
                    logger.error("pairing agent not registered again after a failed change", ["agent.policy": old.description, "error": "\(error)"])
                }
            }
            throw error
        }
    }

    /// Answers a pending request; false when there is no such request (it may have timed out).
    public func answer(_ id: String, accept: Bool) -> Bool {
        guard let c = state.withLock({ $0.pending.removeValue(forKey: id) }) else { return false }
        c.resume(returning: accept)
        return true
    }

    /// Exports the agent on a connection and registers it whenever bluetoothd is there.
    public func attach(_ c: BusConnection, bluez: BlueZClient) async {
        connection.withLock { $0 = c }
        try? c.export(Self.path, interfaces: [interface], values: [:])
        let loop = bluez.follow { [weak self] e in
            if case .available = e, let self { try? await self.register(on: c) }
        }
        // Cancelled outside the lock: a cancel runs the stream's termination at once.
        events.withLock { e in
            defer { e = loop }
            return e
        }?.cancel()
    }

    /// The connection is gone.
    public func detach() {
        connection.withLock { $0 = nil }
        events.withLock { e in
            defer { e = nil }
            return e
        }?.cancel()
    }

    /// The registrations in flight, one after another: two at once (a policy change while
    /// bluetoothd came back) had the second refused AlreadyExists, and the capability
    /// registered was the one read first, not the policy in force.
    private let registrations = Mutex<Task<Void, any Error>?>(nil)

    /// Registers with the policy in force when its turn comes (after any registration under way).
    func register(on c: BusConnection) async throws {
        let turn = registrations.withLock { last -> Task<Void, any Error> in
            let previous = last
            let t = Task { [self] in
                _ = await previous?.result
                try await registerNow(on: c)
            }
            last = t
            return t
        }
        try await turn.value
    }

    /// RegisterAgent + RequestDefaultAgent (after UnregisterAgent, to change the capability).
    private func registerNow(on c: BusConnection) async throws {
        let p = policy
        _ = try? await c.call(destination: BlueZNames.service, path: "/org/bluez", interface: "org.bluez.AgentManager1",
                              member: "UnregisterAgent", [.objectPath(Self.path)], timeout: .seconds(5))
        _ = try await c.call(destination: BlueZNames.service, path: "/org/bluez", interface: "org.bluez.AgentManager1",
                             member: "RegisterAgent", [.objectPath(Self.path), .string(p.capability)], timeout: .seconds(5))
        _ = try await c.call(destination: BlueZNames.service, path: "/org/bluez", interface: "org.bluez.AgentManager1",
                             member: "RequestDefaultAgent", [.objectPath(Self.path)], timeout: .seconds(5))
        logger.info("pairing agent registered", ["agent.policy": p.description, "agent.capability": p.capability])
    }

    private static let rejected = BusError(name: "org.bluez.Error.Rejected", message: "rejected by policy")

    private func device(_ v: DBusValue) -> BluetoothAddress? {
        v.objectPath.flatMap { BluetoothAddress(bluezPathElement: $0.lastElement) }
    }

    /// Asks a control client (policy `confirm`); false on timeout.
    private func ask(_ kind: AgentQuestion, _ device: BluetoothAddress?, passkey: UInt32? = nil, service: String? = nil) async -> Bool {
        let id = state.withLock { s -> String in
            defer { s.next += 1 }
            return "p\(s.next)"
        }
        let timeout = self.timeout
        return await withCheckedContinuation { (c: CheckedContinuation<Bool, Never>) in
            state.withLock { $0.pending[id] = c }
            onRequest(AgentRequest(id: id, kind: kind, device: device, passkey: passkey, service: service))
            Task {
                try? await Task.sleep(for: timeout)
                if self.answer(id, accept: false) {
                    self.logger.notice("pairing request unanswered; refused", ["agent.request": id])
                }
            }
        }
    }

    /// Decides a yes/no question by policy.
    private func decide(_ kind: AgentQuestion, _ device: BluetoothAddress?, passkey: UInt32? = nil, service: String? = nil, reply: MethodReply) {
        onEvent(.asked(kind, device: device, passkey: passkey))
        switch policy {
        case .justWorks: reply.succeed()
        case .reject: reply.fail(Self.rejected)
        case .passkey(let n):
            // A pairing that shows no passkey ("just works": a central without input or
            // output, or one asking no protection against a man in the middle) proves nothing:
            // accepted, any device near would bond without knowing NNNNNN.
            if kind == .authorize || passkey.map({ $0 != n }) == true { reply.fail(Self.rejected) } else { reply.succeed() }
        case .confirm:
            Task {
                if await ask(kind, device, passkey: passkey, service: service) { reply.succeed() } else { reply.fail(Self.rejected) }
            }
        }
    }

    private var interface: InterfaceSpec {
        InterfaceSpec("org.bluez.Agent1", methods: [
            MethodSpec("Release") { [self] _, reply in
                logger.notice("bluetoothd released the pairing agent")
                reply.succeed()
            },
            MethodSpec("RequestPinCode", inputs: [("device", "o")], outputs: [("pincode", "s")]) { [self] call, reply in
                // Legacy (BR/EDR) PIN pairing: only a fixed passkey can answer it.
                if case .passkey(let n) = policy { reply.succeed([.string(String(n, zeroPaddedTo: 6))]) } else { reply.fail(Self.rejected) }
                _ = call
            },
            MethodSpec("DisplayPinCode", inputs: [("device", "o"), ("pincode", "s")]) { [self] call, reply in
                onEvent(.displayPinCode(device: device(call.arguments[0]), pinCode: call.arguments[1].string ?? ""))
                reply.succeed()
            },
            MethodSpec("RequestPasskey", inputs: [("device", "o")], outputs: [("passkey", "u")]) { [self] _, reply in
                if case .passkey(let n) = policy { reply.succeed([.uint32(n)]) } else { reply.fail(Self.rejected) }
            },
            MethodSpec("DisplayPasskey", inputs: [("device", "o"), ("passkey", "u"), ("entered", "q")]) { [self] call, reply in
                onEvent(.displayPasskey(device: device(call.arguments[0]), passkey: UInt32(call.arguments[1].integer ?? 0)))
                reply.succeed()
            },
            MethodSpec("RequestConfirmation", inputs: [("device", "o"), ("passkey", "u")]) { [self] call, reply in
                decide(.confirm, device(call.arguments[0]), passkey: UInt32(call.arguments[1].integer ?? 0), reply: reply)
            },
            MethodSpec("RequestAuthorization", inputs: [("device", "o")]) { [self] call, reply in
                decide(.authorize, device(call.arguments[0]), reply: reply)
            },
            MethodSpec("AuthorizeService", inputs: [("device", "o"), ("uuid", "s")]) { [self] call, reply in
                decide(.authorizeService, device(call.arguments[0]), service: call.arguments[1].string, reply: reply)
            },
            MethodSpec("Cancel") { [self] _, reply in
                let pending = state.withLock { s -> [CheckedContinuation<Bool, Never>] in
                    defer { s.pending.removeAll() }
                    return Array(s.pending.values)
                }
                for p in pending { p.resume(returning: false) }
                onEvent(.canceled)
                reply.succeed()
            },
        ])
    }
}
