import DBus

/// D-Bus messages from the system bus: replies and signals from bluetoothd, avahi-daemon and
/// any client allowed to talk to us. libdbus validates the wire format; what it hands over
/// is decoded by `Codec` into `DBusValue`s and read through the typed accessors the BlueZ
/// and DNS-SD code use.
enum DBusTargets {
    /// The input as one message's bytes. Properties: a message libdbus accepts decodes (no
    /// trap in the decoder or the accessors); its header and body re-encode (what we read we
    /// could send); the re-encoded bytes demarshal to a message with the same signature,
    /// and encoding that gives the same bytes again.
    ///
    /// Messages with Unix descriptors are decoded but not re-encoded: demarshalled bytes
    /// carry no descriptors, so there is nothing real to send back.
    static func message(_ input: [UInt8]) throws(PropertyViolation) {
        // The framing the connection relies on: a length once the header is in.
        let needed = BusMessage.wireLength(input)
        guard case .success(let message) = BusMessage.demarshal(input) else { return }
        try check(needed > 0 && needed <= input.count, "libdbus accepted a \(input.count)-byte message it said needs \(needed) bytes")

        _ = message.summary
        _ = message.asError
        for value in message.body { read(value, depth: 0) }
        guard !message.body.contains(where: hasDescriptor) else { return }

        let bytes: [UInt8]
        do { bytes = try outgoing(message).marshal(serial: message.serial) } catch {
            throw PropertyViolation("a message libdbus accepted does not re-encode: \(error) (\(message.summary))")
        }
        guard case .success(let back) = BusMessage.demarshal(bytes) else {
            throw PropertyViolation("a re-encoded message does not demarshal (\(message.summary)): \(show(bytes))")
        }
        try check(back.signature == message.signature, "re-encoding changed the signature from \(message.signature) to \(back.signature)")
        try check(back.path == message.path && back.member == message.member && back.interface == message.interface
                  && back.errorName == message.errorName && back.replySerial == message.replySerial,
                  "re-encoding changed the header: \(message.summary) became \(back.summary)")
        let again: [UInt8]
        do { again = try outgoing(back).marshal(serial: message.serial) } catch {
            throw PropertyViolation("a re-encoded message does not re-encode again: \(error)")
        }
        try check(again == bytes, "encoding is not stable for \(message.summary)")
    }

    /// The message as this side would send it: what the bus sets (the sender) left out.
    private static func outgoing(_ m: BusMessage) -> BusMessage {
        var copy = BusMessage(kind: m.kind, body: m.body)
        copy.replySerial = m.replySerial
        copy.path = m.path
        copy.interface = m.interface
        copy.member = m.member
        copy.errorName = m.errorName
        copy.destination = m.destination
        copy.noReplyExpected = m.noReplyExpected
        copy.allowInteractiveAuthorization = m.allowInteractiveAuthorization
        return copy
    }

    private static func hasDescriptor(_ v: DBusValue) -> Bool {
        switch v {
        case .unixFD: true
        case .variant(let inner): hasDescriptor(inner)
        case .array(_, let items), .structure(let items): items.contains(where: hasDescriptor)
        case .dictionary(_, _, let entries): entries.contains { hasDescriptor($0.key) || hasDescriptor($0.value) }
        default: false
        }
    }

    /// Every accessor the BlueZ and DNS-SD decoders call, on every value in the tree.
    private static func read(_ v: DBusValue, depth: Int) {
        _ = v.signature
        _ = v.unwrapped
        _ = v.string
        _ = v.bool
        _ = v.integer
        _ = v.byteArray
        _ = v.stringArray
        _ = v.dictionaryEntries
        _ = v.stringKeyedMap
        if let path = v.objectPath {
            _ = path.parent
            _ = path.lastElement
        }
        guard depth < 64 else { return }
        switch v {
        case .variant(let inner): read(inner, depth: depth + 1)
        case .array(_, let items), .structure(let items): for i in items { read(i, depth: depth + 1) }
        case .dictionary(_, _, let entries):
            for e in entries {
                read(e.key, depth: depth + 1)
                read(e.value, depth: depth + 1)
            }
        default: break
        }
    }
}
