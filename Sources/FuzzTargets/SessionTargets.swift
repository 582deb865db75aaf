import Session

/// The peer-session wire, read from any TCP peer (before TLS, and inside it from any peer
/// holding a certificate): the frame decoder, and the TXT record a peer advertises over mDNS.
enum SessionTargets {
    // MARK: Frames

    /// What decoding a whole stream gives: the frames, then how it stopped.
    private struct Decoded: Equatable {
        var frames: [Frame] = []
        var error: FrameError?
        var ignored = 0
    }

    /// Input: a chunking seed (a length byte and the sizes), then the byte stream.
    /// Properties: decoding in those chunks (draining after each) gives the same frames, the
    /// same error (with the same frame index and stream offset) and the same count of skipped
    /// frames as decoding the stream at once; after an error every call throws it again; and
    /// every decoded frame encodes (what this side accepts, it can send) to bytes that decode
    /// to exactly that frame.
    static func frames(_ input: [UInt8]) throws(PropertyViolation) {
        var reader = ByteReader(input)
        let seed = reader.shortBlob()
        let stream = reader.rest()

        let whole = try decode([stream[...]])
        let pieces = try decode(chunks(of: stream, sizes: seed))
        try check(pieces == whole, "chunked decoding differs: at once \(summary(whole)), in chunks \(seed) \(summary(pieces))")

        for frame in whole.frames {
            let bytes: [UInt8]
            do { bytes = try FrameEncoder.encode(frame) } catch {
                throw PropertyViolation("a decoded \(frame.type) frame does not encode: \(error)")
            }
            let again = try decode([bytes[...]])
            try check(again.error == nil && again.frames == [frame],
                      "a \(frame.type) frame re-encoded decodes to \(summary(again)): \(show(bytes))")
        }
    }

    private static func decode(_ chunks: [ArraySlice<UInt8>]) throws(PropertyViolation) -> Decoded {
        var decoder = FrameDecoder()
        var out = Decoded()
        func drain() throws(PropertyViolation) -> Bool {
            while true {
                do {
                    guard let frame = try decoder.nextFrame() else { return true }
                    out.frames.append(frame)
                } catch {
                    out.error = error
                    // The stream cannot be resynchronised: the same error from now on.
                    let second = Result { () throws(FrameError) in try decoder.nextFrame() }
                    guard case .failure(let again) = second, again == error else {
                        throw PropertyViolation("after \(error) the next call gave \(second)")
                    }
                    return false
                }
            }
        }
        for chunk in chunks {
            decoder.append(chunk)
            guard try drain() else { break }
        }
        out.ignored = decoder.ignoredFrameCount
        return out
    }

    private static func summary(_ d: Decoded) -> String {
        "\(d.frames.map(\.type)) ignored \(d.ignored) error \(d.error.map { "\($0)" } ?? "none")"
    }

    // MARK: Discovery TXT records

    /// Input: a TXT record in DNS wire format (each entry a length byte and its bytes), as
    /// Avahi hands a browsed peer's record over. Properties: a record that parses can be
    /// published again by this side (`SessionValidation.discoveryInfo` accepts its versions,
    /// peer ID, name and info) and the published entries parse to the same record; the
    /// published record has `pv`, `pid` and `pn` first and no entry over 255 bytes.
    static func discoveryRecord(_ input: [UInt8]) throws(PropertyViolation) {
        var entries: [[UInt8]] = []
        var reader = ByteReader(input)
        while !reader.isAtEnd { entries.append(reader.shortBlob()) }

        // The same bytes as a service type or a display name (what `peer.*` parameters give):
        // an accepted type is accepted again as returned; neither check may trap.
        if let text = String(validating: input, as: UTF8.self) {
            if let type = try? SessionValidation.serviceType(text) {
                try check((try? SessionValidation.serviceType(type)) == type, "an accepted service type is not accepted as returned")
            }
            _ = try? SessionValidation.displayName(text)
        }

        let record: DiscoveredRecord
        do { record = try DiscoveredRecord(entries: entries) } catch { return }
        try check(!record.versions.isEmpty && !record.versions.contains(0), "a record with versions \(record.versions) parsed")

        let published: DiscoveryRecord
        do {
            published = try SessionValidation.discoveryInfo(record.info, peerID: record.peer, displayName: record.displayName,
                                                            versions: record.versions)
        } catch {
            throw PropertyViolation("a record that parses cannot be published again: \(error)")
        }
        // Bytes, not Characters: a name starting with a combining mark makes "=" and the mark
        // one Character, and String.hasPrefix("pn=") false for "pn=\u{30F}..." (the target's
        // own false alarm, kept in regressions/discovery-record).
        func starts(_ i: Int, _ key: String) -> Bool { published.entries[i].utf8.starts(with: key.utf8) }
        try check(published.entries.count >= 3 && starts(0, "pv=") && starts(1, "pid=") && starts(2, "pn="),
                  "the published record does not start with pv, pid, pn: \(published.entries)")
        for entry in published.entries where entry.utf8.count > SessionValidation.maxTXTEntry {
            throw PropertyViolation("a published entry is \(entry.utf8.count) bytes: \(entry.prefix(40))")
        }
        let again: DiscoveredRecord
        do { again = try DiscoveredRecord(entries: published.entries.map { Array($0.utf8) }) } catch {
            throw PropertyViolation("the re-published record does not parse: \(error); entries \(published.entries)")
        }
        try check(again == record, "the re-published record parses differently: \(published.entries)")
    }

    // MARK: Resource names

    /// Input: a resource's name as a peer sends it (any bytes; UTF-8 decoding replaces what
    /// is not). Properties: the sanitised name is one file name inside the inbox (one path
    /// component, not "." or "..", no NUL, not hidden, 1 to 255 bytes), sanitising it again
    /// changes nothing, and its numbered forms (for collisions) keep the same rules.
    static func resourceName(_ input: [UInt8]) throws(PropertyViolation) {
        let name = String(decoding: input, as: UTF8.self)
        let safe = ResourceName.sanitise(name)
        try checkStaysInInbox(safe, from: name)
        // Bytes: String's == is canonical equivalence.
        try check(Array(ResourceName.sanitise(safe).utf8) == Array(safe.utf8), "sanitising \"\(safe)\" again gives \"\(ResourceName.sanitise(safe))\"")
        for n in [2, 10, 9_999] {
            try checkStaysInInbox(ResourceName.numbered(safe, n), from: name)
        }
    }

    private static func checkStaysInInbox(_ file: String, from name: String) throws(PropertyViolation) {
        let bytes = Array(file.utf8)
        try check(!bytes.isEmpty && bytes.count <= ResourceName.maxBytes, "\(shown(name)) gave a name of \(bytes.count) bytes")
        try check(!bytes.contains(0x2F) && !bytes.contains(0), "\(shown(name)) gave \"\(file)\", with '/' or NUL")
        try check(file != "." && file != ".." && bytes.first != 0x2E, "\(shown(name)) gave \"\(file)\": a dot name")
    }

    private static func shown(_ name: String) -> String { "the name \(show(Array(name.utf8.prefix(64))))" }

    // MARK: Image headers

    /// Input: a received file's first bytes. Properties: a header found has a known format
    /// and a size of at least 1 × 1, and more bytes after it never change it (the header is
    /// read from the bytes before it alone); the media type agrees with the header.
    static func imageHeader(_ input: [UInt8]) throws(PropertyViolation) {
        let header = ImageHeader.parse(input)
        try check(ImageHeader.mediaType(of: input) == (header?.format.mediaType ?? "application/octet-stream"),
                  "the media type disagrees with the header \(String(describing: header))")
        guard let header else { return }
        try check(header.width >= 1 && header.height >= 1, "a header of \(header.width) x \(header.height)")
        if input.count < ImageHeader.maxHeaderBytes {
            let longer = ImageHeader.parse(input + [0xFF, 0xD9, 0x00, 0x89])
            try check(longer == header, "appending bytes changed \(header) to \(String(describing: longer))")
        }
    }
}
