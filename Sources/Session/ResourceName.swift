/// A resource's name as a peer gives it, made into a file name that is safe to create in
/// the inbox. A name from a peer is never a path: the sender may run another system, be
/// buggy, or lie, so the receiver keeps only what can be one harmless file name.
///
/// The rules, in order:
/// 1. Only the last component counts: the name is cut at '/' and '\' and the last part
///    that is not empty, "." or ".." is kept ("../../etc/passwd" → "passwd").
/// 2. Characters that are control characters (C0, DEL, C1), bidirectional overrides
///    (which can make "gpj.exe" read as "exe.jpg") or not allowed in file names on the
///    file systems a board's inbox may live on (FAT and NTFS: `: * ? " < > |`) become '_'.
/// 3. Spaces and dots are trimmed from both ends: no hidden files (nor a clash with the
///    inbox's `.part` directory), no names Windows cannot open.
/// 4. A name whose stem is a device name (CON, PRN, AUX, NUL, COM1–9, LPT1–9, in any case)
///    gets a leading '_'.
/// 5. The name is cut to 255 bytes of UTF-8 (the file-name limit), on a character
///    boundary, keeping a short extension.
/// 6. Nothing left: "unnamed".
///
/// The result is never empty, ".", "..", never starts with '.', holds no '/' or NUL, is at
/// most 255 bytes, and sanitising it again gives it back unchanged.
public enum ResourceName {
    /// The longest file name in bytes (Linux's NAME_MAX).
    public static let maxBytes = 255
    /// The name given when nothing usable is left.
    public static let fallback = "unnamed"
    /// An extension this long or shorter (with its dot) survives a cut.
    static let maxKeptExtension = 16

    /// The safe file name for `name`.
    public static func sanitise(_ name: String) -> String {
        let last = lastComponent(name)
        var scalars = String.UnicodeScalarView()
        for s in last.unicodeScalars { scalars.append(isUnsafe(s) ? "_" : s) }
        var safe = trimmed(String(scalars))
        if isReservedDevice(safe) { safe = "_" + safe }
        safe = cut(safe, toBytes: maxBytes)
        // A cut can leave a trailing dot or space ("name." once the extension went).
        safe = trimmed(safe)
        return safe.isEmpty ? fallback : safe
    }

    /// `safe` with " (n)" before its extension, within `maxBytes`: the name to try when
    /// `safe` is taken ("photo.png" → "photo (2).png").
    public static func numbered(_ safe: String, _ n: Int) -> String {
        let (stem, ext) = split(safe)
        let suffix = " (\(n))" + ext
        return cut(stem, toBytes: maxBytes - suffix.utf8.count) + suffix
    }

    /// The first of `safe`, `numbered(safe, 2)`, `numbered(safe, 3)`, … for which `isTaken`
    /// is false; nil when `limit` names are all taken.
    public static func available(_ safe: String, limit: Int = 10_000, isTaken: (String) -> Bool) -> String? {
        if !isTaken(safe) { return safe }
        var n = 2
        while n <= limit {
            let candidate = numbered(safe, n)
            if !isTaken(candidate) { return candidate }
            n += 1
        }
        return nil
    }

    // MARK: the rules

    /// Split at the separator scalars, never at Characters: a '/' followed by a combining
    /// mark is one Character ("/\u{329}"), which is not "/", and once let a separator through
    /// ("a/\u{329}b" stayed whole; found by fuzzing).
    private static func lastComponent(_ name: String) -> String {
        let parts = name.unicodeScalars.split(whereSeparator: { $0 == "/" || $0 == "\\" })
        let last = parts.last(where: { !$0.elementsEqual(".".unicodeScalars) && !$0.elementsEqual("..".unicodeScalars) })
        return last.map { String($0) } ?? ""
    }

    private static func isUnsafe(_ s: Unicode.Scalar) -> Bool {
        switch s.value {
        case 0x00...0x1F, 0x7F...0x9F: true
        // Bidirectional embeddings, overrides and isolates.
        case 0x202A...0x202E, 0x2066...0x2069, 0x200E, 0x200F: true
        case 0x3A, 0x2A, 0x3F, 0x22, 0x3C, 0x3E, 0x7C: true
        default: false
        }
    }

    private static func trimmed(_ s: String) -> String {
        var scalars = Substring(s).unicodeScalars[...]
        while let f = scalars.first, f == " " || f == "." { scalars.removeFirst() }
        while let l = scalars.last, l == " " || l == "." { scalars.removeLast() }
        return String(String.UnicodeScalarView(scalars))
    }

    private static let devices: Set<String> = {
        var names: Set<String> = ["con", "prn", "aux", "nul"]
        for i in 1...9 {
            names.insert("com\(i)")
            names.insert("lpt\(i)")
        }
        return names
    }()

    /// The stem is what comes before the first '.' scalar ("CON.\u{301}txt" is CON's too).
    private static func isReservedDevice(_ name: String) -> Bool {
        let stem = name.unicodeScalars.split(separator: ".", maxSplits: 1, omittingEmptySubsequences: false).first.map { String($0) } ?? ""
        return devices.contains(stem.lowercased().trimmingSuffixSpaces())
    }

    /// The stem and the extension (with its dot) when the extension is short enough to keep.
    private static func split(_ name: String) -> (stem: String, ext: String) {
        guard let dot = name.lastIndex(of: "."), dot != name.startIndex else { return (name, "") }
        let ext = String(name[dot...])
        guard ext.utf8.count <= maxKeptExtension else { return (name, "") }
        return (String(name[..<dot]), ext)
    }

    /// `name` in at most `limit` bytes of UTF-8, keeping a short extension, cut between
    /// characters (never inside one).
    private static func cut(_ name: String, toBytes limit: Int) -> String {
        guard name.utf8.count > limit else { return name }
        let (stem, ext) = split(name)
        let room = limit - ext.utf8.count
        var kept = ""
        var used = 0
        for c in stem {
            let n = c.utf8.count
            guard used + n <= room else { break }
            kept.append(c)
            used += n
        }
        return kept + ext
    }
}

private extension String {
    func trimmingSuffixSpaces() -> String {
        var s = Substring(self)
        while s.last == " " { s.removeLast() }
        return String(s)
    }
}
