/// An Attribute Protocol error code, named as the Bluetooth Core specification names it
/// (Vol 3, Part F, 3.4.1.1) and, for 0xE0–0xFF, as the Core Specification Supplement
/// names the common profile and service error codes (Part B, 1.2).
///
/// A struct rather than an enum: a peer may answer any byte (application errors
/// 0x80–0x9F, codes a later spec adds), and every byte must still have a name.
public struct ATTError: RawRepresentable, Sendable, Hashable, CustomStringConvertible {
    /// The code as it travels in the ATT Error Response.
    public var rawValue: UInt8

    /// Wraps a code.
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    /// Wraps a code.
    public init(_ rawValue: UInt8) { self.rawValue = rawValue }

    /// 0x01: the handle given was not valid on this server.
    public static let invalidHandle = ATTError(0x01)
    /// 0x02: the attribute cannot be read.
    public static let readNotPermitted = ATTError(0x02)
    /// 0x03: the attribute cannot be written.
    public static let writeNotPermitted = ATTError(0x03)
    /// 0x04: the request PDU was invalid.
    public static let invalidPDU = ATTError(0x04)
    /// 0x05: the attribute needs an authenticated (paired) link.
    public static let insufficientAuthentication = ATTError(0x05)
    /// 0x06: the server does not support the request.
    public static let requestNotSupported = ATTError(0x06)
    /// 0x07: the offset given was past the end of the attribute.
    public static let invalidOffset = ATTError(0x07)
    /// 0x08: the attribute needs authorization.
    public static let insufficientAuthorization = ATTError(0x08)
    /// 0x09: too many prepare writes are queued.
    public static let prepareQueueFull = ATTError(0x09)
    /// 0x0A: no attribute in the handle range given.
    public static let attributeNotFound = ATTError(0x0A)
    /// 0x0B: the attribute cannot be read or written with a blob request.
    public static let attributeNotLong = ATTError(0x0B)
    /// 0x0C: the encryption key of the link is too short.
    public static let encryptionKeySizeTooShort = ATTError(0x0C)
    /// 0x0D: the value's length is not valid for the operation.
    public static let invalidAttributeValueLength = ATTError(0x0D)
    /// 0x0E: the request hit an error that was unlikely. Seen from BlueZ when a read needed
    /// pairing and the peripheral's agent refused it.
    public static let unlikelyError = ATTError(0x0E)
    /// 0x0F: the attribute needs an encrypted link.
    public static let insufficientEncryption = ATTError(0x0F)
    /// 0x10: the attribute type is not a grouping attribute the server supports.
    public static let unsupportedGroupType = ATTError(0x10)
    /// 0x11: the server has not enough resources to complete the request.
    public static let insufficientResources = ATTError(0x11)
    /// 0x12: the server's database changed and the client has not seen the change yet.
    public static let databaseOutOfSync = ATTError(0x12)
    /// 0x13: the value written is not allowed.
    public static let valueNotAllowed = ATTError(0x13)
    /// 0xFC (CSS): the write was rejected.
    public static let writeRequestRejected = ATTError(0xFC)
    /// 0xFD (CSS): a Client Characteristic Configuration descriptor is not configured as
    /// the operation needs.
    public static let cccdImproperlyConfigured = ATTError(0xFD)
    /// 0xFE (CSS): a procedure is already running.
    public static let procedureAlreadyInProgress = ATTError(0xFE)
    /// 0xFF (CSS): the value is out of range.
    public static let outOfRange = ATTError(0xFF)

    private static let names: [UInt8: String] = [
        0x01: "Invalid Handle", 0x02: "Read Not Permitted", 0x03: "Write Not Permitted", 0x04: "Invalid PDU",
        0x05: "Insufficient Authentication", 0x06: "Request Not Supported", 0x07: "Invalid Offset",
        0x08: "Insufficient Authorization", 0x09: "Prepare Queue Full", 0x0A: "Attribute Not Found",
        0x0B: "Attribute Not Long", 0x0C: "Encryption Key Size Too Short", 0x0D: "Invalid Attribute Value Length",
        0x0E: "Unlikely Error", 0x0F: "Insufficient Encryption", 0x10: "Unsupported Group Type",
        0x11: "Insufficient Resources", 0x12: "Database Out Of Sync", 0x13: "Value Not Allowed",
        0xFC: "Write Request Rejected", 0xFD: "Client Characteristic Configuration Descriptor Improperly Configured",
        0xFE: "Procedure Already in Progress", 0xFF: "Out of Range",
    ]

    /// The spec's name: "Unlikely Error", "Application Error" for 0x80–0x9F, "Reserved"
    /// for codes no spec assigns (0x00, 0x14–0x7F, 0xA0–0xDF) and "Common Profile and
    /// Service Error" for the CSS range without a name yet (0xE0–0xFB).
    public var name: String {
        if let n = Self.names[rawValue] { return n }
        switch rawValue {
        case 0x80...0x9F: return "Application Error"
        case 0xE0...0xFB: return "Common Profile and Service Error"
        default: return "Reserved"
        }
    }

    /// Whether a server application (not the protocol) chose the code: 0x80–0x9F.
    public var isApplicationError: Bool { (0x80...0x9F).contains(rawValue) }

    /// Whether it is a common profile and service error code (CSS): 0xE0–0xFF.
    public var isCommonProfileError: Bool { rawValue >= 0xE0 }

    /// What the security codes mean for the user (nil for the others): they are the ones a
    /// new user meets first, and their names alone do not say that pairing is the fix.
    public var hint: String? {
        switch self {
        case .insufficientAuthentication: "the attribute needs an authenticated link: pair with the device"
        case .insufficientAuthorization: "the peripheral did not authorize the access"
        case .encryptionKeySizeTooShort: "the link's encryption key is too short for the attribute"
        case .insufficientEncryption: "the attribute needs an encrypted link: pair with the device"
        case .unlikelyError: "pairing was refused or is needed"
        default: nil
        }
    }

    /// The code in hex, as BlueZ and the spec print it: "0x0e".
    public var hex: String {
        let h = String(rawValue, radix: 16)
        return "0x" + (h.count < 2 ? "0" + h : h)
    }

    /// "Unlikely Error (0x0e)".
    public var description: String { "\(name) (\(hex))" }

    /// The description with the hint: "Unlikely Error (0x0e): pairing was refused or is needed".
    public var explanation: String { hint.map { "\(description): \($0)" } ?? description }
}
