extension BusConnection {
    /// The introspection XML for `path`: its interfaces (with the standard ones) and its
    /// immediate children. Nil when nothing is exported at or below `path`.
    func introspect(_ path: ObjectPath) -> String? {
        let (object, children, isManager) = objects.table.withLock { t -> (ExportedObject?, [String], Bool) in
            var kids = Set<String>()
            for p in t.objects.keys where p.isDescendant(of: path, orSelf: false) {
                // The first element below `path`.
                let rest = path.rawValue == "/" ? String(p.rawValue.dropFirst()) : String(p.rawValue.dropFirst(path.rawValue.count + 1))
                if let first = rest.split(separator: "/").first { kids.insert(String(first)) }
            }
            for m in t.managers where m.isDescendant(of: path, orSelf: false) {
                let rest = path.rawValue == "/" ? String(m.rawValue.dropFirst()) : String(m.rawValue.dropFirst(path.rawValue.count + 1))
                if let first = rest.split(separator: "/").first { kids.insert(String(first)) }
            }
            return (t.objects[path], kids.sorted(), t.managers.contains(path))
        }
        guard object != nil || !children.isEmpty || isManager else { return nil }
        var x = """
        <!DOCTYPE node PUBLIC "-//freedesktop//DTD D-BUS Object Introspection 1.0//EN"
         "http://www.freedesktop.org/standards/dbus/1.0/introspect.dtd">
        <node>

        """
        x += Self.standardInterfacesXML(withProperties: object != nil, withObjectManager: isManager)
        if let object {
            for name in object.order {
                if let i = object.interfaces[name] { x += Self.xml(i) }
            }
        }
        for c in children { x += "  <node name=\"\(c)\"/>\n" }
        x += "</node>\n"
        return x
    }

    static func xml(_ i: InterfaceSpec) -> String {
        var x = "  <interface name=\"\(escape(i.name))\">\n"
        for m in i.methods {
            x += "    <method name=\"\(escape(m.name))\">\n"
            for (n, t) in m.inputs { x += "      <arg name=\"\(escape(n))\" type=\"\(escape(t))\" direction=\"in\"/>\n" }
            for (n, t) in m.outputs { x += "      <arg name=\"\(escape(n))\" type=\"\(escape(t))\" direction=\"out\"/>\n" }
            x += "    </method>\n"
        }
        for s in i.signals {
            x += "    <signal name=\"\(escape(s.name))\">\n"
            for (n, t) in s.arguments { x += "      <arg name=\"\(escape(n))\" type=\"\(escape(t))\"/>\n" }
            x += "    </signal>\n"
        }
        for p in i.properties {
            let emits: String
            switch p.changeSignal {
            case .emits: emits = ""
            case .invalidates: emits = "invalidates"
            case .none: emits = "false"
            }
            if emits.isEmpty {
                x += "    <property name=\"\(escape(p.name))\" type=\"\(escape(p.signature))\" access=\"\(p.access.rawValue)\"/>\n"
            } else {
                x += "    <property name=\"\(escape(p.name))\" type=\"\(escape(p.signature))\" access=\"\(p.access.rawValue)\">\n"
                x += "      <annotation name=\"org.freedesktop.DBus.Property.EmitsChangedSignal\" value=\"\(emits)\"/>\n"
                x += "    </property>\n"
            }
        }
        x += "  </interface>\n"
        return x
    }

    static func standardInterfacesXML(withProperties: Bool, withObjectManager: Bool) -> String {
        var x = """
          <interface name="org.freedesktop.DBus.Introspectable">
            <method name="Introspect">
              <arg name="xml_data" type="s" direction="out"/>
            </method>
          </interface>
          <interface name="org.freedesktop.DBus.Peer">
            <method name="Ping"/>
            <method name="GetMachineId">
              <arg name="machine_uuid" type="s" direction="out"/>
            </method>
          </interface>

        """
        if withProperties {
            x += """
              <interface name="org.freedesktop.DBus.Properties">
                <method name="Get">
                  <arg name="interface_name" type="s" direction="in"/>
                  <arg name="property_name" type="s" direction="in"/>
                  <arg name="value" type="v" direction="out"/>
                </method>
                <method name="GetAll">
                  <arg name="interface_name" type="s" direction="in"/>
                  <arg name="props" type="a{sv}" direction="out"/>
                </method>
                <method name="Set">
                  <arg name="interface_name" type="s" direction="in"/>
                  <arg name="property_name" type="s" direction="in"/>
                  <arg name="value" type="v" direction="in"/>
                </method>
                <signal name="PropertiesChanged">
                  <arg name="interface_name" type="s"/>
                  <arg name="changed_properties" type="a{sv}"/>
                  <arg name="invalidated_properties" type="as"/>
                </signal>
              </interface>

            """
        }
        if withObjectManager {
            x += """
              <interface name="org.freedesktop.DBus.ObjectManager">
                <method name="GetManagedObjects">
                  <arg name="objects" type="a{oa{sa{sv}}}" direction="out"/>
                </method>
                <signal name="InterfacesAdded">
                  <arg name="object" type="o"/>
                  <arg name="interfaces" type="a{sa{sv}}"/>
                </signal>
                <signal name="InterfacesRemoved">
                  <arg name="object" type="o"/>
                  <arg name="interfaces" type="as"/>
                </signal>
              </interface>

            """
        }
        return x
    }

    static func escape(_ s: String) -> String {
        var out = ""
        for c in s {
            switch c {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            default: out.append(c)
            }
        }
        return out
    }
}
