internal import CDBus
#if canImport(Glibc)
import Glibc
#endif

/// Converts between `BusMessage` and libdbus's `DBusMessage*`.
///
/// Everything is validated before libdbus sees it: libdbus treats bad names, paths and
/// strings as programming errors (a warning and a failure, or an abort with fatal warnings).
enum Codec {
    // MARK: Names

    static func validate(busName: String, _ what: String) throws(BusError) {
        if !busName.utf8.contains(0), libdbus.dbus_validate_bus_name(busName, nil) != 0 { return }
        throw BusError.invalid("invalid \(what) \"\(busName)\"")
    }

    static func validate(interface: String) throws(BusError) {
        if !interface.utf8.contains(0), libdbus.dbus_validate_interface(interface, nil) != 0 { return }
        throw BusError.invalid("invalid interface name \"\(interface)\"")
    }

    static func validate(member: String) throws(BusError) {
        if !member.utf8.contains(0), libdbus.dbus_validate_member(member, nil) != 0 { return }
        throw BusError.invalid("invalid member name \"\(member)\"")
    }

    static func validate(errorName: String) throws(BusError) {
        if !errorName.utf8.contains(0), libdbus.dbus_validate_error_name(errorName, nil) != 0 { return }
        throw BusError.invalid("invalid error name \"\(errorName)\"")
    }

    /// Whether `signature` is a valid sequence of complete types.
    static func isValid(signature: String) -> Bool {
        !signature.utf8.contains(0) && libdbus.dbus_signature_validate(signature, nil) != 0
    }

    /// Whether `signature` is exactly one complete type.
    static func isValid(singleSignature signature: String) -> Bool {
        !signature.utf8.contains(0) && libdbus.dbus_signature_validate_single(signature, nil) != 0
    }

    // MARK: Encoding

    /// A new `DBusMessage*` (owned by the caller: unref it) for `m`.
    static func encode(_ m: BusMessage) throws(BusError) -> OpaquePointer {
        let type: Int32
        switch m.kind {
        case .methodCall: type = DBUS_MESSAGE_TYPE_METHOD_CALL
        case .methodReturn: type = DBUS_MESSAGE_TYPE_METHOD_RETURN
        case .error: type = DBUS_MESSAGE_TYPE_ERROR
        case .signal: type = DBUS_MESSAGE_TYPE_SIGNAL
        }
        // Header fields each type requires.
        switch m.kind {
        case .methodCall:
            guard m.path != nil, m.member != nil else { throw BusError.invalid("a method call needs a path and a member") }
        case .signal:
            guard m.path != nil, m.member != nil, m.interface != nil else { throw BusError.invalid("a signal needs a path, an interface and a member") }
        case .methodReturn:
            guard m.replySerial != nil else { throw BusError.invalid("a method return needs a reply serial") }
        case .error:
            guard m.replySerial != nil, m.errorName != nil else { throw BusError.invalid("an error needs a reply serial and an error name") }
        }
        if let d = m.destination { try validate(busName: d, "destination") }
        if let i = m.interface { try validate(interface: i) }
        if let mem = m.member { try validate(member: mem) }
        if let e = m.errorName { try validate(errorName: e) }

        guard let msg = libdbus.dbus_message_new(type) else { throw BusError(name: BusError.noMemory, message: "dbus_message_new") }
        var ok = true
        if let d = m.destination { ok = ok && libdbus.dbus_message_set_destination(msg, d) != 0 }
        if let p = m.path { ok = ok && libdbus.dbus_message_set_path(msg, p.rawValue) != 0 }
        if let i = m.interface { ok = ok && libdbus.dbus_message_set_interface(msg, i) != 0 }
        if let mem = m.member { ok = ok && libdbus.dbus_message_set_member(msg, mem) != 0 }
        if let e = m.errorName { ok = ok && libdbus.dbus_message_set_error_name(msg, e) != 0 }
        if let r = m.replySerial { ok = ok && libdbus.dbus_message_set_reply_serial(msg, r) != 0 }
        if m.noReplyExpected { libdbus.dbus_message_set_no_reply(msg, 1) }
        if m.allowInteractiveAuthorization { libdbus.dbus_message_set_allow_interactive_authorization(msg, 1) }
        guard ok else {
            libdbus.dbus_message_unref(msg)
            throw BusError(name: BusError.noMemory, message: "setting message header")
        }
        var iter = DBusMessageIter()
        libdbus.dbus_message_iter_init_append(msg, &iter)
        do {
            for (i, v) in m.body.enumerated() {
                try append(v, to: &iter, at: "argument \(i)")
            }
        } catch {
            libdbus.dbus_message_unref(msg)
            throw error
        }
        return msg
    }

    private static func basic<T: BitwiseCopyable>(_ iter: inout DBusMessageIter, _ type: Int32, _ value: T, _ at: String) throws(BusError) {
        var v = value
        if libdbus.dbus_message_iter_append_basic(&iter, type, &v) == 0 {
            throw BusError(name: BusError.noMemory, message: "appending \(at)")
        }
    }

    private static func appendString(_ iter: inout DBusMessageIter, _ type: Int32, _ s: String, _ at: String) throws(BusError) {
        if s.utf8.contains(0) { throw BusError.invalid("\(at): string contains a NUL character") }
        let ok = s.withCString { cs -> Bool in
            var p: UnsafePointer<CChar>? = cs
            return libdbus.dbus_message_iter_append_basic(&iter, type, &p) != 0
        }
        if !ok { throw BusError(name: BusError.noMemory, message: "appending \(at)") }
    }

    private static func container(_ iter: inout DBusMessageIter, _ type: Int32, _ sig: String?, _ at: String,
                                  _ body: (inout DBusMessageIter) throws(BusError) -> Void) throws(BusError) {
        var sub = DBusMessageIter()
        let opened: Bool
        if let sig {
            opened = sig.withCString { libdbus.dbus_message_iter_open_container(&iter, type, $0, &sub) != 0 }
        } else {
            opened = libdbus.dbus_message_iter_open_container(&iter, type, nil, &sub) != 0
        }
        guard opened else { throw BusError(name: BusError.noMemory, message: "opening container at \(at)") }
        do {
            try body(&sub)
        } catch {
            libdbus.dbus_message_iter_abandon_container(&iter, &sub)
            throw error
        }
        guard libdbus.dbus_message_iter_close_container(&iter, &sub) != 0 else {
            throw BusError(name: BusError.noMemory, message: "closing container at \(at)")
        }
    }

    static func append(_ value: DBusValue, to iter: inout DBusMessageIter, at: String) throws(BusError) {
        switch value {
        case .byte(let v): try basic(&iter, DBUS_TYPE_BYTE, v, at)
        case .boolean(let v): try basic(&iter, DBUS_TYPE_BOOLEAN, dbus_bool_t(v ? 1 : 0), at)
        case .int16(let v): try basic(&iter, DBUS_TYPE_INT16, v, at)
        case .uint16(let v): try basic(&iter, DBUS_TYPE_UINT16, v, at)
        case .int32(let v): try basic(&iter, DBUS_TYPE_INT32, v, at)
        case .uint32(let v): try basic(&iter, DBUS_TYPE_UINT32, v, at)
        case .int64(let v): try basic(&iter, DBUS_TYPE_INT64, v, at)
        case .uint64(let v): try basic(&iter, DBUS_TYPE_UINT64, v, at)
        case .double(let v): try basic(&iter, DBUS_TYPE_DOUBLE, v, at)
        case .string(let s): try appendString(&iter, DBUS_TYPE_STRING, s, at)
        case .objectPath(let p): try appendString(&iter, DBUS_TYPE_OBJECT_PATH, p.rawValue, at)
        case .signature(let s):
            guard isValid(signature: s) else { throw BusError.invalid("\(at): invalid signature \"\(s)\"") }
            try appendString(&iter, DBUS_TYPE_SIGNATURE, s, at)
        case .unixFD(let fd):
            // libdbus duplicates the descriptor; ours stays owned by the UnixFD object.
            try basic(&iter, DBUS_TYPE_UNIX_FD, fd.fd, at)
        case .bytes(let bytes):
            try container(&iter, DBUS_TYPE_ARRAY, "y", at) { (sub: inout DBusMessageIter) throws(BusError) in
                let ok = bytes.withUnsafeBufferPointer { buf -> Bool in
                    var p: UnsafePointer<UInt8>? = buf.baseAddress ?? UnsafePointer(bitPattern: 1)
                    return libdbus.dbus_message_iter_append_fixed_array(&sub, DBUS_TYPE_BYTE, &p, Int32(buf.count)) != 0
                }
                if !ok { throw BusError(name: BusError.noMemory, message: "appending \(at)") }
            }
        case .array(let element, let items):
            guard isValid(singleSignature: element) else { throw BusError.invalid("\(at): invalid array element signature \"\(element)\"") }
            try container(&iter, DBUS_TYPE_ARRAY, element, at) { (sub: inout DBusMessageIter) throws(BusError) in
                for (i, item) in items.enumerated() {
                    guard item.signature == element else {
                        throw BusError.invalid("\(at)[\(i)]: element of type \(item.signature) in an array of \(element)")
                    }
                    try append(item, to: &sub, at: "\(at)[\(i)]")
                }
            }
        case .dictionary(let k, let v, let entries):
            let entrySig = "{" + k + v + "}"
            guard isValid(singleSignature: "a" + entrySig) else { throw BusError.invalid("\(at): invalid dictionary signature a\(entrySig)") }
            try container(&iter, DBUS_TYPE_ARRAY, entrySig, at) { (sub: inout DBusMessageIter) throws(BusError) in
                for (i, e) in entries.enumerated() {
                    guard e.key.signature == k, e.value.signature == v else {
                        throw BusError.invalid("\(at){\(i)}: entry of type {\(e.key.signature)\(e.value.signature)} in a dictionary of \(entrySig)")
                    }
                    try container(&sub, DBUS_TYPE_DICT_ENTRY, nil, at) { (entry: inout DBusMessageIter) throws(BusError) in
                        try append(e.key, to: &entry, at: "\(at){\(i)}.key")
                        try append(e.value, to: &entry, at: "\(at){\(i)}.value")
                    }
                }
            }
        case .structure(let members):
            guard !members.isEmpty else { throw BusError.invalid("\(at): empty struct") }
            try container(&iter, DBUS_TYPE_STRUCT, nil, at) { (sub: inout DBusMessageIter) throws(BusError) in
                for (i, m) in members.enumerated() { try append(m, to: &sub, at: "\(at).\(i)") }
            }
        case .variant(let inner):
            let sig = inner.signature
            guard isValid(singleSignature: sig) else { throw BusError.invalid("\(at): invalid variant content signature \"\(sig)\"") }
            try container(&iter, DBUS_TYPE_VARIANT, sig, at) { (sub: inout DBusMessageIter) throws(BusError) in
                try append(inner, to: &sub, at: "\(at).variant")
            }
        }
    }

    // MARK: Decoding

    private static func string(_ p: UnsafePointer<CChar>?) -> String? {
        p.map { String(cString: $0) }
    }

    /// The kind of `msg`; nil for a message type this side does not know. libdbus accepts
    /// those (the specification says to ignore them), so every reader checks this first:
    /// such a message was once decoded as a signal without path, interface or member.
    static func kind(of msg: OpaquePointer) -> BusMessage.Kind? {
        switch libdbus.dbus_message_get_type(msg) {
        case DBUS_MESSAGE_TYPE_METHOD_CALL: .methodCall
        case DBUS_MESSAGE_TYPE_METHOD_RETURN: .methodReturn
        case DBUS_MESSAGE_TYPE_ERROR: .error
        case DBUS_MESSAGE_TYPE_SIGNAL: .signal
        default: nil
        }
    }

    /// The header of `msg` without its body (cheap: for routing decisions); `msg` is of a
    /// known kind (`kind(of:)`).
    static func decodeHeader(_ msg: OpaquePointer) -> BusMessage {
        var m = BusMessage(kind: kind(of: msg) ?? .signal)
        m.serial = libdbus.dbus_message_get_serial(msg)
        let r = libdbus.dbus_message_get_reply_serial(msg)
        m.replySerial = r == 0 ? nil : r
        m.path = string(libdbus.dbus_message_get_path(msg)).map { ObjectPath(unchecked: $0) }
        m.interface = string(libdbus.dbus_message_get_interface(msg))
        m.member = string(libdbus.dbus_message_get_member(msg))
        m.errorName = string(libdbus.dbus_message_get_error_name(msg))
        m.destination = string(libdbus.dbus_message_get_destination(msg))
        m.sender = string(libdbus.dbus_message_get_sender(msg))
        m.noReplyExpected = libdbus.dbus_message_get_no_reply(msg) != 0
        m.allowInteractiveAuthorization = libdbus.dbus_message_get_allow_interactive_authorization(msg) != 0
        return m
    }

    /// The whole message. libdbus has already validated the wire data against the signature.
    static func decode(_ msg: OpaquePointer) -> BusMessage {
        var m = decodeHeader(msg)
        var iter = DBusMessageIter()
        if libdbus.dbus_message_iter_init(msg, &iter) != 0 {
            repeat {
                m.body.append(read(&iter))
            } while libdbus.dbus_message_iter_next(&iter) != 0
        }
        return m
    }

    private static func get<T: BitwiseCopyable>(_ iter: inout DBusMessageIter, _ zero: T) -> T {
        var v = zero
        libdbus.dbus_message_iter_get_basic(&iter, &v)
        return v
    }

    private static func iterSignature(_ iter: inout DBusMessageIter) -> String {
        guard let p = libdbus.dbus_message_iter_get_signature(&iter) else { return "" }
        defer { libdbus.dbus_free(p) }
        return String(cString: p)
    }

    static func read(_ iter: inout DBusMessageIter) -> DBusValue {
        switch libdbus.dbus_message_iter_get_arg_type(&iter) {
        case DBUS_TYPE_BYTE: return .byte(get(&iter, UInt8(0)))
        case DBUS_TYPE_BOOLEAN: return .boolean(get(&iter, dbus_bool_t(0)) != 0)
        case DBUS_TYPE_INT16: return .int16(get(&iter, Int16(0)))
        case DBUS_TYPE_UINT16: return .uint16(get(&iter, UInt16(0)))
        case DBUS_TYPE_INT32: return .int32(get(&iter, Int32(0)))
        case DBUS_TYPE_UINT32: return .uint32(get(&iter, UInt32(0)))
        case DBUS_TYPE_INT64: return .int64(get(&iter, Int64(0)))
        case DBUS_TYPE_UINT64: return .uint64(get(&iter, UInt64(0)))
        case DBUS_TYPE_DOUBLE: return .double(get(&iter, Double(0)))
        case DBUS_TYPE_STRING:
            return .string(string(get(&iter, UnsafePointer<CChar>?.none)) ?? "")
        case DBUS_TYPE_OBJECT_PATH:
            return .objectPath(ObjectPath(unchecked: string(get(&iter, UnsafePointer<CChar>?.none)) ?? "/"))
        case DBUS_TYPE_SIGNATURE:
            return .signature(string(get(&iter, UnsafePointer<CChar>?.none)) ?? "")
        case DBUS_TYPE_UNIX_FD:
            // get_basic returns a new descriptor that the caller owns.
            return .unixFD(UnixFD(taking: get(&iter, Int32(-1))))
        case DBUS_TYPE_VARIANT:
            var sub = DBusMessageIter()
            libdbus.dbus_message_iter_recurse(&iter, &sub)
            return .variant(read(&sub))
        case DBUS_TYPE_STRUCT:
            var sub = DBusMessageIter()
            libdbus.dbus_message_iter_recurse(&iter, &sub)
            var members: [DBusValue] = []
            if libdbus.dbus_message_iter_get_arg_type(&sub) != DBUS_TYPE_INVALID {
                repeat { members.append(read(&sub)) } while libdbus.dbus_message_iter_next(&sub) != 0
            }
            return .structure(members)
        case DBUS_TYPE_ARRAY:
            let full = iterSignature(&iter)            // "aX"
            let element = String(full.dropFirst())
            var sub = DBusMessageIter()
            libdbus.dbus_message_iter_recurse(&iter, &sub)
            if element == "y" {
                var p: UnsafePointer<UInt8>? = nil
                var n: Int32 = 0
                if libdbus.dbus_message_iter_get_arg_type(&sub) == DBUS_TYPE_BYTE {
                    libdbus.dbus_message_iter_get_fixed_array(&sub, &p, &n)
                }
                return .bytes(n > 0 && p != nil ? Array(UnsafeBufferPointer(start: p, count: Int(n))) : [])
            }
            if element.hasPrefix("{") {
                // "{KV}": the key is one basic type character.
                let inner = element.dropFirst().dropLast()
                let key = String(inner.prefix(1))
                let value = String(inner.dropFirst())
                var entries: [DBusValue.DictEntry] = []
                while libdbus.dbus_message_iter_get_arg_type(&sub) == DBUS_TYPE_DICT_ENTRY {
                    var e = DBusMessageIter()
                    libdbus.dbus_message_iter_recurse(&sub, &e)
                    let k = read(&e)
                    _ = libdbus.dbus_message_iter_next(&e)
                    let v = read(&e)
                    entries.append(.init(k, v))
                    _ = libdbus.dbus_message_iter_next(&sub)
                }
                return .dictionary(key: key, value: value, entries)
            }
            var items: [DBusValue] = []
            while libdbus.dbus_message_iter_get_arg_type(&sub) != DBUS_TYPE_INVALID {
                items.append(read(&sub))
                _ = libdbus.dbus_message_iter_next(&sub)
            }
            return .array(element: element, items)
        default:
            return .structure([])  // unreachable for a valid message
        }
    }
}
