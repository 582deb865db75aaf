import BLE
import Testing

/// ATT error codes carry the names the Core specification (Vol 3, Part F, 3.4.1.1) and the
/// Core Specification Supplement (Part B, 1.2) give them.
@Suite struct ATTErrorTests {
    static let spec: [(UInt8, String)] = [
        (0x01, "Invalid Handle"), (0x02, "Read Not Permitted"), (0x03, "Write Not Permitted"), (0x04, "Invalid PDU"),
        (0x05, "Insufficient Authentication"), (0x06, "Request Not Supported"), (0x07, "Invalid Offset"),
        (0x08, "Insufficient Authorization"), (0x09, "Prepare Queue Full"), (0x0A, "Attribute Not Found"),
        (0x0B, "Attribute Not Long"), (0x0C, "Encryption Key Size Too Short"), (0x0D, "Invalid Attribute Value Length"),
        (0x0E, "Unlikely Error"), (0x0F, "Insufficient Encryption"), (0x10, "Unsupported Group Type"),
        (0x11, "Insufficient Resources"), (0x12, "Database Out Of Sync"), (0x13, "Value Not Allowed"),
    ]

    @Test func everyCoreCodeHasItsSpecName() {
        for (code, name) in Self.spec {
            #expect(ATTError(code).name == name, "0x\(String(code, radix: 16))")
        }
    }

    @Test func staticNamesMatchTheirCodes() {
        #expect(ATTError.invalidHandle.rawValue == 0x01)
        #expect(ATTError.insufficientAuthentication.rawValue == 0x05)
        #expect(ATTError.encryptionKeySizeTooShort.rawValue == 0x0C)
        #expect(ATTError.unlikelyError.rawValue == 0x0E)
        #expect(ATTError.insufficientEncryption.rawValue == 0x0F)
        #expect(ATTError.insufficientResources.rawValue == 0x11)
        #expect(ATTError(rawValue: 0x0E) == .unlikelyError)
    }

    @Test func commonProfileAndServiceCodesAreNamedAsTheSupplementNamesThem() {
        #expect(ATTError(0xFC).name == "Write Request Rejected")
        #expect(ATTError(0xFD).name == "Client Characteristic Configuration Descriptor Improperly Configured")
        #expect(ATTError(0xFE).name == "Procedure Already in Progress")
        #expect(ATTError(0xFF).name == "Out of Range")
        #expect(ATTError.outOfRange.isCommonProfileError && ATTError(0xE0).isCommonProfileError)
        #expect(ATTError(0xE0).name == "Common Profile and Service Error")
        #expect(ATTError(0xFB).name == "Common Profile and Service Error")
    }

    @Test func applicationAndReservedRanges() {
        for code: UInt8 in [0x80, 0x90, 0x9F] {
            #expect(ATTError(code).name == "Application Error" && ATTError(code).isApplicationError)
        }
        for code: UInt8 in [0x00, 0x14, 0x7F, 0xA0, 0xDF] {
            #expect(ATTError(code).name == "Reserved" && !ATTError(code).isApplicationError)
        }
        #expect(!ATTError(0x7F).isCommonProfileError && !ATTError(0xA0).isApplicationError)
    }

    @Test func securityCodesSayThatPairingIsTheFix() {
        #expect(ATTError.unlikelyError.description == "Unlikely Error (0x0e)")
        #expect(ATTError.unlikelyError.explanation == "Unlikely Error (0x0e): pairing was refused or is needed")
        #expect(ATTError.insufficientAuthentication.hint?.contains("pair") == true)
        #expect(ATTError.insufficientEncryption.hint?.contains("pair") == true)
        #expect(ATTError.insufficientAuthorization.hint != nil && ATTError.encryptionKeySizeTooShort.hint != nil)
        #expect(ATTError.readNotPermitted.hint == nil && ATTError.readNotPermitted.explanation == "Read Not Permitted (0x02)")
        #expect(ATTError(0xFF).hex == "0xff" && ATTError(0x01).hex == "0x01")
    }
}
