internal import COpenSSL

/// Every failure of the TLS module: what kind it is (for code to branch on) and a message for
/// people, which ends with OpenSSL's own error text when OpenSSL gave one.
public struct TLSError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What went wrong, for code to branch on.
    public enum Kind: Sendable, Equatable {
        /// The handshake failed on our side for a reason not named by another kind.
        case handshakeFailed
        /// The peer presented no certificate (a client without one, refused by a server).
        case peerCertificateMissing
        /// Our pin policy refused the peer's certificate; the reason is the policy's.
        case pinRejected(reason: String)
        /// The peer does not speak TLS 1.3 (it offered, or asked for, another version).
        case protocolVersion
        /// The peer ended the connection with a fatal alert, e.g. "certificate required" when
        /// it refused our certificate (or our lack of one).
        case peerAlert(String)
        /// Our side is closed: a write after `close()` (or after OpenSSL shut the connection).
        /// The peer's close_notify is not an error: it shows as `TLSConnection.peerClosed`.
        case closed
        /// The record layer failed after the handshake (a corrupt or forged record, a memory
        /// buffer that could not grow).
        case io
        /// A call made at the wrong time, e.g. the exporter before the handshake is done.
        case invalidState
        /// An identity file is missing, unreadable, corrupt or does not match its partner;
        /// the path names it.
        case identityFile(path: String)
        /// Another OpenSSL call failed (making a context, a key or a certificate).
        case library
    }

    /// What went wrong.
    public let kind: Kind
    /// What went wrong, for people.
    public let message: String

    /// Creates an error of `kind` with `message`.
    public init(_ kind: Kind, _ message: String) {
        self.kind = kind
        self.message = message
    }

    /// The message (it already names the kind's subject).
    public var description: String { message }
}

/// OpenSSL's per-thread error queue, read in one place.
///
/// The queue is thread-local and a `TLSConnection` may run on a different thread for each
/// call, so every entry point clears it first (`OpenSSLErrors.clear()`) and reads it before
/// returning, on the same thread, in the same call: text is never left behind for the next
/// caller of OpenSSL on that thread.
enum OpenSSLErrors {
    /// One entry of the queue: the packed code and its text.
    struct Entry {
        let code: UInt
        let text: String
        var library: Int32 { peerlink_err_lib(code) }
        var reason: Int32 { peerlink_err_reason(code) }
    }

    /// Empties the queue (left-overs from an earlier call on this thread are not ours).
    static func clear() { openSSL.ERR_clear_error() }

    /// Takes every entry off the queue, oldest first, leaving it empty.
    static func drain() -> [Entry] {
        var entries: [Entry] = []
        while true {
            let code = openSSL.ERR_get_error()
            if code == 0 { break }
            var buffer = [CChar](repeating: 0, count: 256)
            openSSL.ERR_error_string_n(code, &buffer, buffer.count)
            let text = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            entries.append(Entry(code: code, text: text))
        }
        return entries
    }

    /// The entries' texts joined, e.g. "error:0A000086:SSL routines::certificate verify failed".
    static func text(_ entries: [Entry]) -> String {
        entries.map(\.text).joined(separator: "; ")
    }

    /// `message`, plus OpenSSL's text when the queue had any (the queue is left empty).
    static func message(_ message: String) -> String {
        let text = text(drain())
        return text.isEmpty ? message : "\(message): \(text)"
    }

    /// An error of `kind` for a failed call: `what` failed, plus the queue's text.
    static func error(_ kind: TLSError.Kind, _ what: String) -> TLSError {
        TLSError(kind, message("\(what) failed"))
    }
}

/// Checks an OpenSSL return code that means success when it is 1 (most of the API).
/// Anything else throws `kind` with the error queue's text; the queue is left empty.
@inline(__always)
func check(_ result: Int32, _ what: @autoclosure () -> String, kind: TLSError.Kind = .library) throws(TLSError) {
    if result != 1 { throw OpenSSLErrors.error(kind, what()) }
}

/// Checks an OpenSSL constructor: a nil result throws `kind` with the error queue's text.
@inline(__always)
func check<P>(_ pointer: P?, _ what: @autoclosure () -> String, kind: TLSError.Kind = .library) throws(TLSError) -> P {
    guard let pointer else { throw OpenSSLErrors.error(kind, what()) }
    return pointer
}

/// TLS alert descriptions (RFC 8446 §6) as words, e.g. 116 → "certificate required".
/// OpenSSL 3.0's `SSL_alert_desc_string_long` predates the TLS 1.3 alerts and calls them
/// "unknown", so the names are kept here.
func alertName(_ code: Int32) -> String {
    switch code {
    case 0: "close notify"
    case 10: "unexpected message"
    case 20: "bad record mac"
    case 22: "record overflow"
    case 40: "handshake failure"
    case 42: "bad certificate"
    case 43: "unsupported certificate"
    case 44: "certificate revoked"
    case 45: "certificate expired"
    case 46: "certificate unknown"
    case 47: "illegal parameter"
    case 48: "unknown ca"
    case 49: "access denied"
    case 50: "decode error"
    case 51: "decrypt error"
    case 70: "protocol version"
    case 71: "insufficient security"
    case 80: "internal error"
    case 86: "inappropriate fallback"
    case 90: "user canceled"
    case 109: "missing extension"
    case 110: "unsupported extension"
    case 112: "unrecognized name"
    case 113: "bad certificate status response"
    case 115: "unknown psk identity"
    case 116: "certificate required"
    case 120: "no application protocol"
    default: "alert \(code)"
    }
}
