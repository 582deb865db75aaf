import Daemon
import DNSSD

/// The daemon's configuration file, and the DNS-SD names and records that come from control
/// clients (publish, browse) and from the network (browsed TXT records).
enum ServiceTargets {
    // MARK: Configuration

    /// The input as the contents of peerlink.conf, read as `DaemonConfig.load` reads a file.
    /// Properties: bytes that are UTF-8 parse exactly as the same text does (the byte entry
    /// point only adds the size and UTF-8 checks); a rejection names a line within the
    /// file; a parsed configuration differs from itself in no key.
    static func config(_ input: [UInt8]) throws(PropertyViolation) {
        let result = Result { () throws(ConfigError) in try DaemonConfig.parse(bytes: input, file: "fuzz.conf") }
        if let text = String(validating: input, as: UTF8.self) {
            let fromText = Result { () throws(ConfigError) in try DaemonConfig.parse(text, file: "fuzz.conf") }
            try check(fromText == result, "the bytes and the text parse differently: \(result) and \(fromText)")
        }
        switch result {
        case .success(let config):
            try check(config.changedKeys(comparedTo: config).isEmpty, "a configuration differs from itself")
        case .failure(let error):
            let lines = input.reduce(1) { $1 == 0x0A ? $0 + 1 : $0 }
            if let line = error.line {
                try check(line >= 1 && line <= lines, "the error names line \(line) of a \(lines)-line file: \(error)")
            }
        }
    }

    // MARK: DNS-SD

    /// The input as text for each DNS-SD check, and as a TXT record in wire format.
    /// Properties: what a check accepts, it accepts again in the form it returned (service
    /// types, domains, subtypes print and parse back to themselves); a TXT record that is
    /// valid survives its wire format unchanged; an instance name that passes is 1 to 63
    /// bytes without control characters.
    static func dnssd(_ input: [UInt8]) throws(PropertyViolation) {
        let text = String(decoding: input, as: UTF8.self)

        if let type = try? ServiceType(text) {
            try check((try? ServiceType(type.description)) == type, "service type \(type) does not parse back")
            if let full = try? DNSSDValidation.subtype("_printer", of: type) {
                try check((try? DNSSDValidation.subtype(full, of: type)) == full, "subtype \(full) is not stable")
            }
        }
        let http = try! ServiceType("_http._tcp")
        if let full = try? DNSSDValidation.subtype(text, of: http) {
            try check((try? DNSSDValidation.subtype(full, of: http)) == full, "subtype \(full) of \(text.debugDescription) is not stable")
        }
        if let name = try? DNSSDValidation.instanceName(text) {
            try check((1...63).contains(name.utf8.count) && !name.unicodeScalars.contains { $0.value < 0x20 || $0.value == 0x7F },
                      "instance name \(name.debugDescription) was accepted")
        }
        if let domain = try? DNSSDValidation.domain(text) {
            try check((try? DNSSDValidation.domain(domain)) == domain, "domain \(domain) is not stable")
            try check(domain.utf8.count <= 253, "a \(domain.utf8.count)-byte domain was accepted")
        }

        guard let wire = TXTRecord(wireFormat: input) else { return }
        guard let record = try? TXTRecord(bytes: wire.entries) else { return }
        try check(TXTRecord(wireFormat: record.wireFormat) == record, "TXT record \(record.strings) does not survive its wire format")
        try check(record.wireFormat.count <= TXTRecord.maxRecordBytes || record.entries.isEmpty,
                  "a \(record.wireFormat.count)-byte TXT record was accepted")
        try check((try? TXTRecord(record.strings)) == record || !record.entries.allSatisfy { String(validating: $0, as: UTF8.self) != nil },
                  "a UTF-8 TXT record read back from its strings differs: \(record.strings)")
    }
}
