import BLE
import BlueZ
import Control
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

extension PeerlinkDaemon {
    /// Registers every control method. Later capabilities add theirs the same way.
    func registerMethods() {
        server.register(ControlMethod.daemonStatus) { [unowned self] params, _ throws(RPCError) in
            try params.rejectUnknown(allowed: [])
            return status()
        }
        server.register(ControlMethod.adapterList) { [unowned self] params, _ throws(RPCError) in
            try params.rejectUnknown(allowed: [])
            let b = try bluez()
            guard b.availableNow else { throw BlueZError.unavailable("bluetoothd is not running").rpcError }
            let def = defaultAdapter(b)
            return ["adapters": .array(b.adaptersNow.map { BLEJSON.adapter($0, isDefault: $0.address == def?.address) })]
        }
        server.register(ControlMethod.adapterPower) { [unowned self] params, _ throws(RPCError) in
            try params.rejectUnknown(allowed: ["on", "adapter", "timeout"])
            let on = try params.bool("on")
            let selector = try BLEParams.adapter(params)
            let timeout = try params.optionalDouble("timeout", in: 0.1...300) ?? 10
            let b = try bluez()
            let a = try await rpc { try await b.setPowered(selector ?? defaultSelector, on: on, timeout: .milliseconds(Int(timeout * 1000))) }
            return BLEJSON.adapter(a, isDefault: a.address == defaultAdapter(b)?.address)
        }
        server.register(ControlMethod.eventsSubscribe) { params, context throws(RPCError) in
            try params.rejectUnknown(allowed: ["topics"])
            let topics = try Self.topics(params)
            // An empty selection is every event: adding topics to it leaves it so.
            let current = context.eventTopics
            let selection = topics.isEmpty || current == [] ? [] : Array(Set((current ?? []) + topics)).sorted()
            guard selection.count <= Self.maxTopics else {
                throw RPCError.invalidParams("topics", "at most \(Self.maxTopics) topics on a connection (the selection would have \(selection.count))")
            }
            context.setEventTopics(selection)
            return ["topics": .array(selection.map { .string($0) })]
        }
        server.register(ControlMethod.eventsUnsubscribe) { params, context throws(RPCError) in
            try params.rejectUnknown(allowed: ["topics"])
            let topics = try Self.topics(params)
            guard !topics.isEmpty else {
                context.setEventTopics(nil)
                return ["topics": []]
            }
            guard let current = context.eventTopics else { return ["topics": []] }
            // "Everything but these" cannot be said with a list of topics.
            guard !current.isEmpty else {
                throw RPCError.invalidParams("topics", "this connection receives every event: unsubscribe from all (no topics), then subscribe to the topics wanted")
            }
            let remaining = current.filter { !topics.contains($0) }
            context.setEventTopics(remaining.isEmpty ? nil : remaining)
            return ["topics": .array(remaining.map { .string($0) })]
        }
    }

    /// Topics a connection may select at most: each event is matched against them all.
    static let maxTopics = 64

    /// `topics` of `events.subscribe` / `events.unsubscribe`: words like `adapter` or
    /// `adapter.powered`, at most 64 bytes each (no topic is longer).
    private static func topics(_ params: RPCParams) throws(RPCError) -> [String] {
        let topics = try params.optionalStringArray("topics") ?? []
        for (i, t) in topics.enumerated() where t.isEmpty || t.utf8.count > 64 || t.contains(where: { $0.isWhitespace }) {
            throw RPCError.invalidParams("topics[\(i)]", "a topic is a word of at most 64 bytes like \"adapter\" or \"adapter.powered\"")
        }
        return topics
    }

    /// `daemon.status`.
    func status() -> JSONValue {
        let cfg = config.withLock { $0 }
        let (connection, bluez, why) = link.withLock { ($0.connection, $0.bluez, $0.lastError) }
        let kind: String
        switch cfg.bus {
        case .system: kind = "system"
        case .session: kind = "session"
        case .address: kind = "address"
        }
        var bus: [String: JSONValue] = ["connected": .bool(connection?.isConnected ?? false), "kind": .string(kind)]
        if let connection { bus["name"] = .string(connection.uniqueName) }
        if let why { bus["error"] = .string(why) }
        let available = bluez?.availableNow ?? false
        let adapters = bluez?.adaptersNow ?? []
        let def = bluez.flatMap { defaultAdapter($0) }
        return [
            "version": .string(Self.version),
            "pid": .int(Int64(getpid())),
            "uptime_seconds": .double(Self.milliseconds(since: started) / 1000),
            "bus": .object(bus),
            "bluez": ["available": .bool(available)],
            "default_adapter": def.map { .string($0.name) } ?? .null,
            "configured_adapter": cfg.adapter.map { .string($0) } ?? .null,
            "adapters": .array(adapters.map { BLEJSON.adapter($0, isDefault: $0.address == def?.address) }),
            "socket": .string(cfg.socketPath),
            "clients": .int(Int64(server.clientCount)),
            "state_dir": .string(cfg.stateDirectory),
            "log_level": .string(cfg.logLevel.name),
        ]
    }

    /// The adapter this daemon uses by default: the configured one, or the first.
    func defaultAdapter(_ b: BlueZClient) -> AdapterInfo? {
        if let s = defaultSelector { return b.adapterNow(s) }
        return b.adaptersNow.first
    }

    func publishBlueZ(_ event: BlueZEvent) {
        let def = link.withLock { $0.bluez }.flatMap { defaultAdapter($0) }
        publish(event, defaultAddress: def?.address)
    }

    /// Whole milliseconds from `start` to now.
    static func milliseconds(since start: ContinuousClock.Instant) -> Double {
        let e = ContinuousClock.now - start
        return Double(e.components.seconds * 1000 + e.components.attoseconds / 1_000_000_000_000_000)
    }
}
