import Arguments
import Control

/// `peerlink adapter ...`.
enum AdapterCommands {
    /// `adapter list` → `adapter.list`.
    static let list = CLICommand(
        ["adapter", "list"],
        abstract: "List Bluetooth adapters.",
        discussion: "The default adapter is marked with '*'.",
        action: .call(request: { _ throws(CLIError) in RPCCall(method: ControlMethod.adapterList) }, render: renderList))

    /// `adapter power on|off [--adapter A] [--timeout S]` → `adapter.power`.
    static let power = CLICommand(
        ["adapter", "power"],
        abstract: "Power an adapter on or off.",
        discussion: "Waits until the adapter reports the new power state.",
        options: [
            .value("adapter", valueName: "hciN|address", parser: .adapter,
                   help: "The adapter to use (default: the daemon's default adapter)."),
            .value("timeout", key: "power-timeout", valueName: "seconds", parser: .seconds,
                   help: "Seconds the daemon waits for the adapter to change state."),
        ],
        arguments: [Positional("state", parser: .choice(["on", "off"]), help: "The new power state.")],
        action: .call(request: powerRequest, render: renderPower))

    static func powerRequest(_ values: ParsedValues) throws(CLIError) -> RPCCall {
        var params: [String: JSONValue] = ["on": .bool(values.string("state") == "on")]
        if let adapter = values.string("adapter") { params["adapter"] = .string(adapter) }
        var minimum: Double?
        if let timeout = values.double("power-timeout") {
            params["timeout"] = .double(timeout)
            minimum = timeout + 5  // the daemon replies after its own timeout; leave it room
        }
        return RPCCall(method: ControlMethod.adapterPower, params: params, minimumReplyTimeout: minimum)
    }

    /// "hci0 (00:AA:01:00:00:00) powered on".
    static func renderPower(_ adapter: JSONValue) -> String {
        let state = adapter["powered"]?.boolValue == true ? "on" : "off"
        return "\(Rendering.adapterLabel(adapter)) powered \(state)"
    }

    /// A table `NAME ADDRESS POWERED STATE ALIAS`, or "No adapters.".
    static func renderList(_ result: JSONValue) -> String {
        let adapters = result["adapters"]?.arrayValue ?? []
        if adapters.isEmpty { return "No adapters." }
        let rows = adapters.map { a -> [String] in
            let name = (a["name"]?.stringValue ?? "?") + (a["default"]?.boolValue == true ? "*" : "")
            return [
                name,
                a["address"]?.stringValue ?? "-",
                a["powered"]?.boolValue == true ? "yes" : "no",
                a["power_state"]?.stringValue ?? "-",
                a["alias"]?.stringValue ?? "",
            ]
        }
        return Rendering.table(header: ["NAME", "ADDRESS", "POWERED", "STATE", "ALIAS"], rows: rows)
    }
}
