import FoundationEssentials

/// Method names of the control protocol, shared by `peerlinkd` and `peerlink`.
public enum ControlMethod {
    /// Daemon version, uptime, D-Bus and BlueZ state, adapters.
    public static let daemonStatus = "daemon.status"
    /// All adapters: `{"adapters": [Adapter]}`.
    public static let adapterList = "adapter.list"
    /// Powers an adapter on or off: params `{"on", "adapter"?, "timeout"?}` → Adapter.
    public static let adapterPower = "adapter.power"
    /// Starts event notifications on this connection: params `{"topics"?: [String]}`.
    public static let eventsSubscribe = "events.subscribe"
    /// Stops event notifications on this connection.
    public static let eventsUnsubscribe = "events.unsubscribe"
}

/// The `event` notification sent by the server to subscribed clients.
///
/// Shape: `{"jsonrpc":"2.0","method":"event","params":{"topic":..,"time":..,"data":{..}}}`.
public enum ControlEvent {
    /// The notification's method name.
    public static let method = "event"

    /// Topic: an adapter appeared.
    public static let adapterAdded = "adapter.added"
    /// Topic: an adapter disappeared.
    public static let adapterRemoved = "adapter.removed"
    /// Topic: adapter properties changed: `{"adapter": Adapter, "changed": [String]}`.
    public static let adapterChanged = "adapter.changed"
    /// Topic: an adapter's power changed: `{"adapter": Adapter, "powered": Bool}`.
    public static let adapterPowered = "adapter.powered"
    /// Topic: BlueZ appeared on the bus.
    public static let bluezAvailable = "bluez.available"
    /// Topic: BlueZ left the bus.
    public static let bluezUnavailable = "bluez.unavailable"
    /// Topic: the configuration was reloaded (SIGHUP): `{"changed": [key], "restart_needed": [key]}`.
    public static let daemonReloaded = "daemon.reloaded"
    /// Topic: a reload (SIGHUP) refused the file; the running configuration stays: `{"error": String}`.
    public static let daemonReloadFailed = "daemon.reload-failed"

    /// Builds the notification for one event; `time` is rendered as RFC 3339 UTC with milliseconds.
    public static func notification(topic: String, time: Date, data: JSONValue) -> RPCNotification {
        RPCNotification(method: method, params: ["topic": .string(topic), "time": .string(timestamp(time)), "data": data])
    }

    /// True when `topic` is selected by `filters`: no filters selects everything; a filter
    /// selects the topic equal to it and every topic under it ("adapter" selects "adapter.powered").
    public static func matches(topic: String, filters: [String]) -> Bool {
        if filters.isEmpty { return true }
        for filter in filters {
            if topic == filter { return true }
            if topic.count > filter.count, topic.hasPrefix(filter),
               topic.utf8[topic.utf8.index(topic.utf8.startIndex, offsetBy: filter.utf8.count)] == UInt8(ascii: ".") {
                return true
            }
        }
        return false
    }

    /// "2026-11-29T18:00:00.123Z".
    public static func timestamp(_ date: Date) -> String {
        let millis = Int64((date.timeIntervalSince1970 * 1000).rounded(.down))
        let seconds = millis >= 0 ? millis / 1000 : (millis - 999) / 1000
        let ms = Int(millis - seconds * 1000)
        let days = seconds >= 0 ? seconds / 86_400 : (seconds - 86_399) / 86_400
        let secondOfDay = Int(seconds - days * 86_400)
        let (year, month, day) = civilDate(daysSinceEpoch: days)
        func pad(_ v: Int, _ width: Int) -> String {
            let s = String(v)
            return s.count >= width ? s : String(repeating: "0", count: width - s.count) + s
        }
        return "\(pad(Int(year), 4))-\(pad(month, 2))-\(pad(day, 2))T\(pad(secondOfDay / 3600, 2)):"
            + "\(pad(secondOfDay / 60 % 60, 2)):\(pad(secondOfDay % 60, 2)).\(pad(ms, 3))Z"
    }

    /// Howard Hinnant's days-to-civil algorithm (proleptic Gregorian, UTC).
    private static func civilDate(daysSinceEpoch: Int64) -> (Int64, Int, Int) {
        let z = daysSinceEpoch + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let day = Int(doy - (153 * mp + 2) / 5 + 1)
        let month = Int(mp < 10 ? mp + 3 : mp - 9)
        let year = yoe + era * 400 + (month <= 2 ? 1 : 0)
        return (year, month, day)
    }
}

/// Defaults shared by both ends of the control socket.
public enum ControlDefaults {
    /// Where `peerlinkd` listens unless configured otherwise.
    public static let socketPath = "/run/peerlink/control.sock"
    /// The environment variable the CLI reads for the socket path.
    public static let socketEnvironmentVariable = "PEERLINK_SOCKET"
    /// The longest request line the server accepts (1 MiB); longer is error -32000 and a close.
    public static let maxLineBytes = 1_048_576
}
