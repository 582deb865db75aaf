/// What a pin policy answers for a peer's certificate.
public enum PinDecision: Sendable, Equatable {
    /// The certificate is the one expected: the handshake goes on.
    case accept
    /// The certificate is refused, for this reason (it becomes the handshake's error,
    /// `TLSError.Kind.pinRejected`, and the peer gets a fatal alert).
    case reject(String)
}

/// Decides whether a peer's certificate is acceptable, given its fingerprint (the SHA-256 of
/// its DER encoding, 32 bytes): the peer's ID.
///
/// Certificates are self-signed, so no certificate authority vouches for anyone: the pin is
/// the whole of the peer's authentication. The policy runs inside the handshake, on the
/// connection's thread, once per handshake, so it must be quick and must not call back into
/// the connection.
public struct PinPolicy: Sendable {
    /// The check itself.
    public let check: @Sendable (_ fingerprint: [UInt8]) -> PinDecision

    /// A policy answering with `check`.
    public init(_ check: @escaping @Sendable (_ fingerprint: [UInt8]) -> PinDecision) {
        self.check = check
    }

    /// The peer must present exactly the certificate whose fingerprint is `fingerprint`: the
    /// peer ID it announced (in its HELLO, or in DNS-SD), or the one remembered for a known
    /// peer. Any other certificate is refused with a reason naming both fingerprints.
    public static func expect(_ fingerprint: [UInt8]) -> PinPolicy {
        PinPolicy { presented in
            presented == fingerprint
                ? .accept
                : .reject("the peer presented certificate \(Fingerprint.short(presented)), "
                    + "expected \(Fingerprint.short(fingerprint))")
        }
    }

    /// Any certificate is accepted; the caller checks `TLSConnection.peerFingerprint` after
    /// the handshake (e.g. to learn a new peer's ID before deciding whether to trust it).
    public static let acceptAny = PinPolicy { _ in .accept }

    /// `fingerprint` must be one of `known` (e.g. the peers paired with before).
    public static func oneOf(_ known: Set<[UInt8]>) -> PinPolicy {
        PinPolicy { presented in
            known.contains(presented)
                ? .accept
                : .reject("the peer presented certificate \(Fingerprint.short(presented)), which is not a known peer")
        }
    }
}

/// How fingerprints are written for people.
public enum Fingerprint {
    /// The length of a fingerprint: SHA-256.
    public static let length = 32

    /// The whole fingerprint in lower-case hex (64 characters).
    public static func hexString(_ fingerprint: [UInt8]) -> String { hex(fingerprint) }

    /// The first 8 bytes in lower-case hex and an ellipsis, e.g. "3fa2c8d10b7e5a96…": enough
    /// to tell peers apart in a message or a log line.
    public static func short(_ fingerprint: [UInt8]) -> String {
        fingerprint.count <= 8 ? hex(fingerprint) : hex(fingerprint.prefix(8)) + "…"
    }

    /// Parses hex (upper or lower case, optionally with `:` between bytes, as `openssl x509
    /// -fingerprint` prints it) into bytes; nil if it is not hex.
    public static func parse(_ text: String) -> [UInt8]? {
        let digits = text.filter { $0 != ":" }
        guard digits.count % 2 == 0, digits.allSatisfy(\.isHexDigit) else { return nil }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(digits.count / 2)
        var index = digits.startIndex
        while index < digits.endIndex {
            let next = digits.index(index, offsetBy: 2)
            guard let byte = UInt8(digits[index..<next], radix: 16) else { return nil }
            bytes.append(byte)
            index = next
        }
        return bytes
    }
}

/// Lower-case hex of `bytes`, e.g. "3fa2".
func hex(_ bytes: some Sequence<UInt8>) -> String {
    let digits: [Character] = Array("0123456789abcdef")
    var s = ""
    for b in bytes {
        s.append(digits[Int(b >> 4)])
        s.append(digits[Int(b & 0x0f)])
    }
    return s
}
