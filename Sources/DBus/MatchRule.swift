/// A D-Bus match rule: sent to the bus with `AddMatch`, and checked again locally, because
/// one connection's rules all feed the same incoming queue.
public struct MatchRule: Sendable, Hashable, CustomStringConvertible {
    /// Message type (`signal` by default).
    public var kind: BusMessage.Kind? = .signal
    /// Sender: a unique name, or a well-known name resolved through its current owner.
    public var sender: String?
    /// Interface.
    public var interface: String?
    /// Member.
    public var member: String?
    /// Exact object path.
    public var path: ObjectPath?
    /// Object path namespace: the path itself or anything below it.
    public var pathNamespace: ObjectPath?
    /// Destination.
    public var destination: String?
    /// String arguments that must be equal: index → value (0...63).
    public var arguments: [Int: String] = [:]

    /// Creates a rule; nil members match anything.
    public init(kind: BusMessage.Kind? = .signal, sender: String? = nil, interface: String? = nil, member: String? = nil,
                path: ObjectPath? = nil, pathNamespace: ObjectPath? = nil, destination: String? = nil, arguments: [Int: String] = [:]) {
        self.kind = kind
        self.sender = sender
        self.interface = interface
        self.member = member
        self.path = path
        self.pathNamespace = pathNamespace
        self.destination = destination
        self.arguments = arguments
    }

    /// `org.freedesktop.DBus.Properties.PropertiesChanged` from `sender` under `pathNamespace`.
    public static func propertiesChanged(sender: String?, pathNamespace: ObjectPath? = nil, path: ObjectPath? = nil) -> MatchRule {
        MatchRule(sender: sender, interface: "org.freedesktop.DBus.Properties", member: "PropertiesChanged",
                  path: path, pathNamespace: pathNamespace)
    }

    /// `NameOwnerChanged` for one name.
    public static func nameOwnerChanged(_ name: String) -> MatchRule {
        MatchRule(sender: "org.freedesktop.DBus", interface: "org.freedesktop.DBus", member: "NameOwnerChanged",
                  path: "/org/freedesktop/DBus", arguments: [0: name])
    }

    /// The rule text for `AddMatch`, values quoted and escaped as the specification says.
    public var description: String {
        var parts: [String] = []
        func add(_ key: String, _ value: String) {
            // Inside quotes only ' needs escaping, done by closing, escaping, reopening.
            parts.append("\(key)='" + value.split(separator: "'", omittingEmptySubsequences: false).joined(separator: "'\\''") + "'")
        }
        if let kind {
            switch kind {
            case .signal: add("type", "signal")
            case .methodCall: add("type", "method_call")
            case .methodReturn: add("type", "method_return")
            case .error: add("type", "error")
            }
        }
        if let sender { add("sender", sender) }
        if let interface { add("interface", interface) }
        if let member { add("member", member) }
        if let path { add("path", path.rawValue) }
        if let pathNamespace { add("path_namespace", pathNamespace.rawValue) }
        if let destination { add("destination", destination) }
        for (i, v) in arguments.sorted(by: { $0.key < $1.key }) { add("arg\(i)", v) }
        return parts.joined(separator: ",")
    }

    /// Whether the rule's sender is a well-known name that must be resolved to its owner.
    var wellKnownSender: String? {
        guard let s = sender, !s.hasPrefix(":"), s != "org.freedesktop.DBus" else { return nil }
        return s
    }

    /// Whether `m` matches, given the current owner of a well-known sender name.
    func matches(_ m: BusMessage, senderOwner: String?, checkArguments: Bool = true) -> Bool {
        if let kind, kind != m.kind { return false }
        if let sender {
            if wellKnownSender != nil {
                guard let owner = senderOwner, m.sender == owner else { return false }
            } else if m.sender != sender {
                return false
            }
        }
        if let interface, m.interface != interface { return false }
        if let member, m.member != member { return false }
        if let path, m.path != path { return false }
        if let ns = pathNamespace {
            guard let p = m.path, p.isDescendant(of: ns) else { return false }
        }
        if let destination, m.destination != destination { return false }
        guard checkArguments else { return true }
        for (i, v) in arguments {
            guard i < m.body.count, case .string(let s) = m.body[i], s == v else { return false }
        }
        return true
    }
}
