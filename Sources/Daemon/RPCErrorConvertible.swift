import BlueZ
import Control

/// An error of a domain (BlueZ, the GATT server, the central, advertising, DNS-SD, …) that
/// knows how the control protocol shows it: its JSON-RPC code, message and `data.kind`.
///
/// Each domain error type conforms once, beside the capability that calls the domain, so a
/// method handler converts every failure the same way: it runs its domain call inside
/// `rpc { }` (or `check { }`) and throws what comes out. A client sees the same code and
/// message whichever method ran into the error.
protocol RPCErrorConvertible: Error {
    /// The error as a control client receives it.
    var rpcError: RPCError { get }
}

extension RPCError: RPCErrorConvertible {
    /// Already the protocol's error: a parameter check inside a domain call passes through unchanged.
    var rpcError: RPCError { self }
}

/// The JSON-RPC error for any error a handler meets: a domain error's own, else an internal
/// error (an error no domain declared is a bug, not something the client can fix).
func rpcError(for error: any Error) -> RPCError {
    if let e = error as? any RPCErrorConvertible { return e.rpcError }
    return .internalError("\(error)")
}

/// Runs a handler's domain call, converting its error once, through `RPCErrorConvertible`.
func rpc<T>(_ body: () async throws -> T) async throws(RPCError) -> T {
    do {
        return try await body()
    } catch {
        throw rpcError(for: error)
    }
}

/// `rpc` for a check that does not wait (validating a parameter with a domain's rules).
func check<T>(_ body: () throws -> T) throws(RPCError) -> T {
    do {
        return try body()
    } catch {
        throw rpcError(for: error)
    }
}

extension BlueZError: RPCErrorConvertible {
    /// bluetoothd, the bus or an adapter failed; every BlueZ capability and the adapter methods share this.
    var rpcError: RPCError {
        switch self {
        case .unavailable:
            RPCError(code: RPCErrorCode.bluetoothUnavailable, message: description, data: ["kind": "bluetooth-unavailable"])
        case .adapterNotFound(let s, let known):
            RPCError(code: RPCErrorCode.adapterNotFound, message: description,
                     data: ["kind": "adapter-not-found", "adapter": .string(s.description), "known": .array(known.map { .string($0) })])
        case .noAdapters:
            RPCError(code: RPCErrorCode.adapterNotFound, message: description, data: ["kind": "no-adapters"])
        case .blocked(let a):
            RPCError(code: RPCErrorCode.adapterBlocked, message: description + "; unblock it with 'rfkill unblock bluetooth'",
                     data: ["kind": "rfkill-blocked", "adapter": .string(a.name), "power_state": .string(a.powerState)])
        case .timeout:
            RPCError(code: RPCErrorCode.timeout, message: description, data: ["kind": "timeout"])
        case .bus(let e):
            RPCError(code: RPCErrorCode.dbusError, message: description,
                     data: ["kind": "dbus-error", "name": .string(e.name), "message": .string(e.message)])
        }
    }
}
