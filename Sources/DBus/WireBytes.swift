internal import CDBus

/// Messages to and from their wire bytes without a connection, for the fuzz targets and
/// tests (`package`: not part of the module's API for the daemon). The bytes go through
/// `dbus_message_demarshal`, libdbus's full validation of a message read from a socket, and
/// then through the same `Codec.decode` every received reply and signal goes through, so
/// what is fuzzed here is what bluetoothd and avahi-daemon's messages meet.
extension BusMessage {
    /// The message in `bytes` (one whole message in either byte order), decoded; a failure
    /// when libdbus rejects it (with libdbus's reason) or its type is unknown (ignored, as
    /// the connection ignores it).
    package static func demarshal(_ bytes: [UInt8]) -> Result<BusMessage, BusError> {
        var error = DBusError()
        libdbus.dbus_error_init(&error)
        defer { libdbus.dbus_error_free(&error) }
        let msg = bytes.withUnsafeBufferPointer { buf -> OpaquePointer? in
            buf.withMemoryRebound(to: CChar.self) { chars in
                libdbus.dbus_message_demarshal(chars.baseAddress, Int32(clamping: chars.count), &error)
            }
        }
        guard let msg else {
            let name = error.name.map { String(cString: $0) } ?? BusError.failed
            let text = error.message.map { String(cString: $0) } ?? "dbus_message_demarshal failed"
            return .failure(BusError(name: name, message: text))
        }
        defer { libdbus.dbus_message_unref(msg) }
        // As the connection's filter does: a type this side does not know is not decoded.
        guard Codec.kind(of: msg) != nil else {
            return .failure(BusError(name: BusError.failed, message: "message type \(libdbus.dbus_message_get_type(msg)) is not one this side knows"))
        }
        return .success(Codec.decode(msg))
    }

    /// How many bytes the message at the start of `bytes` takes, once its header is in: 0
    /// when more bytes are needed to tell, -1 when the header is invalid.
    package static func wireLength(_ bytes: [UInt8]) -> Int {
        bytes.withUnsafeBufferPointer { buf in
            buf.withMemoryRebound(to: CChar.self) { chars in
                Int(libdbus.dbus_message_demarshal_bytes_needed(chars.baseAddress, Int32(clamping: chars.count)))
            }
        }
    }

    /// The message's wire bytes (libdbus's encoding, in this machine's byte order), with
    /// `serial` (a message on the wire never has serial 0).
    package func marshal(serial: UInt32 = 1) throws(BusError) -> [UInt8] {
        let msg = try Codec.encode(self)
        defer { libdbus.dbus_message_unref(msg) }
        libdbus.dbus_message_set_serial(msg, serial == 0 ? 1 : serial)
        var data: UnsafeMutablePointer<CChar>?
        var length: Int32 = 0
        guard libdbus.dbus_message_marshal(msg, &data, &length) != 0, let data else {
            throw BusError(name: BusError.noMemory, message: "dbus_message_marshal")
        }
        defer { libdbus.dbus_free(data) }
        return data.withMemoryRebound(to: UInt8.self, capacity: Int(length)) { Array(UnsafeBufferPointer(start: $0, count: Int(length))) }
    }
}
