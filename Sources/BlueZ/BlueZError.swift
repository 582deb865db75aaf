import BLE
import DBus

/// Why a BlueZ operation failed: bluetoothd or the adapter is not there or not usable, or
/// a call was refused (`bus`, with the reply read as a `BlueZCallError`).
public enum BlueZError: Error, Sendable, Hashable, CustomStringConvertible {
    /// `bluetoothd` is not on the bus, or the bus is not connected.
    case unavailable(String)
    /// No adapter matches the selector.
    case adapterNotFound(AdapterSelector, known: [String])
    /// No adapter at all.
    case noAdapters
    /// The adapter is blocked by rfkill.
    case blocked(AdapterInfo)
    /// A state was not reached in time.
    case timeout(String)
    /// BlueZ answered with an error.
    case bus(BlueZCallError)

    /// A sentence for users.
    public var description: String {
        switch self {
        case .unavailable(let why): "Bluetooth is unavailable: \(why)"
        case .adapterNotFound(let s, let known):
            "no adapter \(s); adapters present: \(known.isEmpty ? "none" : known.joined(separator: ", "))"
        case .noAdapters: "no Bluetooth adapter is present"
        case .blocked(let a):
            "adapter \(a.name) (\(a.address)) is blocked by rfkill (power state \(a.powerState))"
        case .timeout(let what): "timed out: \(what)"
        case .bus(let e): "BlueZ error \(e.name): \(e.message)"
        }
    }
}

/// How a BlueZ method call failed: the one error every typed proxy (`Adapter1`, `Device1`,
/// `GattCharacteristic1`) throws. Its `kind` comes from the `org.bluez.Error.*` name (or the
/// D-Bus error behind a call that got no answer), and an ATT error code BlueZ put in the
/// message is parsed once here, so call sites switch on cases instead of matching strings.
public struct BlueZCallError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What went wrong, from the error's name.
    public enum Kind: Sendable, Hashable {
        /// `org.bluez.Error.Failed` (the catch-all; the message says more).
        case failed
        /// `org.bluez.Error.InProgress`
        case inProgress
        /// `org.bluez.Error.NotPermitted`
        case notPermitted
        /// `org.bluez.Error.NotAuthorized`
        case notAuthorized
        /// `org.bluez.Error.NotReady`
        case notReady
        /// `org.bluez.Error.NotSupported`
        case notSupported
        /// `org.bluez.Error.NotAvailable`
        case notAvailable
        /// `org.bluez.Error.NotConnected`
        case notConnected
        /// `org.bluez.Error.AlreadyConnected`
        case alreadyConnected
        /// `org.bluez.Error.AlreadyExists`
        case alreadyExists
        /// `org.bluez.Error.DoesNotExist`
        case doesNotExist
        /// `org.bluez.Error.InvalidArguments`
        case invalidArguments
        /// `org.bluez.Error.InvalidLength`
        case invalidLength
        /// `org.bluez.Error.InvalidOffset`
        case invalidOffset
        /// `org.bluez.Error.AuthenticationFailed`
        case authenticationFailed
        /// `org.bluez.Error.AuthenticationCanceled`
        case authenticationCanceled
        /// `org.bluez.Error.AuthenticationRejected`
        case authenticationRejected
        /// `org.bluez.Error.AuthenticationTimeout`
        case authenticationTimeout
        /// `org.bluez.Error.ConnectionAttemptFailed`
        case connectionAttemptFailed
        /// `org.bluez.Error.Blocked`
        case blocked
        /// `org.bluez.Error.Rejected`
        case rejected
        /// `org.bluez.Error.Canceled`
        case canceled
        /// No answer within the timeout (`org.freedesktop.DBus.Error.NoReply`).
        case noReply
        /// bluetoothd is not on the bus, or the bus connection is gone.
        case serviceGone
        /// The object does not have the method (`UnknownMethod`): e.g. `ConnectDevice`
        /// without `bluetoothd --experimental`.
        case unknownMethod
        /// The object is not there (`UnknownObject`).
        case unknownObject
        /// The caller's task was cancelled before the answer came.
        case cancelled
        /// Any other name (kept whole).
        case other(String)
    }

    private static let bluezKinds: [String: Kind] = [
        "Failed": .failed, "InProgress": .inProgress, "NotPermitted": .notPermitted, "NotAuthorized": .notAuthorized,
        "NotReady": .notReady, "NotSupported": .notSupported, "NotAvailable": .notAvailable, "NotConnected": .notConnected,
        "AlreadyConnected": .alreadyConnected, "AlreadyExists": .alreadyExists, "DoesNotExist": .doesNotExist,
        "InvalidArguments": .invalidArguments, "InvalidLength": .invalidLength, "InvalidOffset": .invalidOffset,
        "AuthenticationFailed": .authenticationFailed, "AuthenticationCanceled": .authenticationCanceled,
        "AuthenticationRejected": .authenticationRejected, "AuthenticationTimeout": .authenticationTimeout,
        "ConnectionAttemptFailed": .connectionAttemptFailed, "Blocked": .blocked, "Rejected": .rejected, "Canceled": .canceled,
    ]

    /// The kind.
    public var kind: Kind
    /// The D-Bus error name as received, e.g. `org.bluez.Error.Failed`.
    public var name: String
    /// The message that came with it (may be empty).
    public var message: String
    /// The ATT error code, when BlueZ reported one ("Operation failed with ATT error: 0x0e").
    public var att: ATTError?

    /// Reads an error reply.
    public init(_ e: BusError) {
        name = e.name
        message = e.message
        att = Self.attCode(in: e.message)
        if e.name.hasPrefix("org.bluez.Error.") {
            kind = Self.bluezKinds[String(e.name.dropFirst("org.bluez.Error.".count))] ?? .other(e.name)
        } else if e.name == BusError.noReply {
            kind = .noReply
        } else if e.isServiceGone {
            kind = .serviceGone
        } else if e.name == BusError.unknownMethod {
            kind = .unknownMethod
        } else if e.name == BusError.unknownObject {
            kind = .unknownObject
        } else {
            kind = .other(e.name)
        }
    }

    /// Wraps whatever a bus call threw: error replies keep their name; anything else is
    /// reported as `Failed` with its description.
    public init(_ error: any Error) {
        if let e = error as? BlueZCallError {
            self = e
        } else if let e = error as? BusError {
            self.init(e)
        } else if error is CancellationError {
            self.init(kind: .cancelled, name: BusError.failed, message: "cancelled")
        } else {
            self.init(BusError(name: BusError.failed, message: "\(error)"))
        }
    }

    /// Makes an error (for replies that came back in the wrong shape, and for tests).
    public init(kind: Kind, name: String, message: String, att: ATTError? = nil) {
        self.kind = kind
        self.name = name
        self.message = message
        self.att = att
    }

    /// A reply whose body is not what the method returns.
    static func badReply(_ member: String, _ body: [DBusValue], expected: String) -> BlueZCallError {
        BlueZCallError(BusError(name: BusError.invalidSignature, message: "\(member) returned (\(body.map(\.signature).joined())), expected (\(expected))"))
    }

    /// The code in BlueZ's "Operation failed with ATT error: 0x0e" (its gatt-client prints
    /// codes it has no D-Bus error for that way).
    static func attCode(in message: String) -> ATTError? {
        guard let r = message.firstRange(of: "ATT error: 0x") else { return nil }
        let hex = message[r.upperBound...].prefix { $0.isHexDigit }
        guard !hex.isEmpty, hex.count <= 2, let v = UInt8(hex, radix: 16) else { return nil }
        return ATTError(v)
    }

    /// "org.bluez.Error.Failed: Operation failed with ATT error: 0x0e (Unlikely Error (0x0e):
    /// pairing was refused or is needed)": BlueZ's text, then the ATT code's name.
    public var description: String {
        let base = "\(name): \(message)"
        guard let att else { return base }
        return "\(base) (\(att.explanation))"
    }

    /// Whether the adapter is blocked by rfkill: bluetoothd answers `org.bluez.Error.Blocked`,
    /// or (older versions) `Failed` with "Blocked through rfkill".
    public var isRFKillBlock: Bool { kind == .blocked || message.lowercased().contains("rfkill") }

    /// Whether `RegisterAdvertisement` was refused because every advertising instance is in
    /// use: bluetoothd says so only in the message ("Maximum advertisements reached").
    public var isAdvertisingLimit: Bool {
        (kind == .notPermitted || kind == .failed) && message.contains("Maximum advertisements")
    }

    /// Whether a failed `Connect`/`ConnectDevice` is worth another attempt: BlueZ is busy, or
    /// the link attempt was aborted, cancelled or timed out. BlueZ names all of those
    /// `Failed` and says which in the message (its errno text), so the message is read here,
    /// once.
    public var isTransientConnectFailure: Bool {
        if kind == .inProgress || kind == .notReady { return true }
        let m = message.lowercased()
        return Self.transientReasons.contains { m.contains($0) }
    }

    private static let transientReasons = [
        "le-connection-abort-by-local", "software caused connection abort", "connection-aborted",
        "br-connection-canceled", "le-connection-canceled", "connection refused", "timed out", "timeout",
        "resource temporarily unavailable", "busy", "page-timeout", "connection-timeout",
    ]
}

/// Classifies BlueZ errors of Connect that a retry can fix (docs/reference-flows.md U2).
public enum ConnectErrors {
    /// Whether a failed Connect/ConnectDevice is worth another attempt.
    public static func isTransient(_ e: BusError) -> Bool { BlueZCallError(e).isTransientConnectFailure }
}
