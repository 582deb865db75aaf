import Arguments
import Control

/// `peerlink status`.
enum StatusCommands {
    /// `status` → `daemon.status`.
    static let status = CLICommand(
        ["status"],
        abstract: "Show the daemon's version, uptime, D-Bus and BlueZ state, and adapters.",
        action: .call(request: { _ throws(CLIError) in RPCCall(method: ControlMethod.daemonStatus) }, render: render))

    /// ```
    /// peerlinkd 0.1.0 (pid 123), up 5m 3s
    /// D-Bus: connected (system bus)   BlueZ: available
    /// Default adapter: hci0 (00:AA:01:00:00:00)
    /// Adapters: 2
    /// ```
    static func render(_ result: JSONValue) -> String {
        let version = result["version"]?.stringValue ?? "?"
        let pid = result["pid"]?.intValue.map(String.init) ?? "?"
        let uptime = result["uptime_seconds"]?.doubleValue.map { Rendering.duration(seconds: $0) } ?? "?"
        var lines = ["peerlinkd \(version) (pid \(pid)), up \(uptime)"]

        let bus: String
        if result["bus"]?["connected"]?.boolValue == true {
            switch result["bus"]?["kind"]?.stringValue {
            case "system"?: bus = "connected (system bus)"
            case "session"?: bus = "connected (session bus)"
            case "address"?: bus = "connected (bus at a custom address)"
            default: bus = "connected"
            }
        } else {
            bus = "disconnected"
        }
        let bluez = result["bluez"]?["available"]?.boolValue == true ? "available" : "unavailable"
        lines.append("D-Bus: \(bus)   BlueZ: \(bluez)")

        let adapters = result["adapters"]?.arrayValue ?? []
        if let name = result["default_adapter"]?.stringValue {
            let adapter = adapters.first { $0["name"]?.stringValue == name }
            lines.append("Default adapter: \(adapter.map(Rendering.adapterLabel) ?? name)")
        } else {
            lines.append("Default adapter: none")
        }
        lines.append("Adapters: \(adapters.count)")
        return lines.joined(separator: "\n")
    }
}
