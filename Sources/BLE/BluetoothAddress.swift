/// A 48-bit Bluetooth device address, printed as `00:AA:01:00:00:00` (uppercase).
public struct BluetoothAddress: Sendable, Hashable, Comparable, CustomStringConvertible {
    /// The six bytes, most significant first (as printed).
    public let bytes: [UInt8]

    /// Parses `XX:XX:XX:XX:XX:XX` (either case); nil if malformed.
    public init?(_ text: String) {
        let groups = text.split(separator: ":", omittingEmptySubsequences: false)
        guard groups.count == 6 else { return nil }
        var out: [UInt8] = []
        for g in groups {
            guard g.count == 2, let b = UInt8(g, radix: 16) else { return nil }
            out.append(b)
        }
        bytes = out
    }

    /// Creates an address from six bytes, most significant first.
    public init?(bytes: [UInt8]) {
        guard bytes.count == 6 else { return nil }
        self.bytes = bytes
    }

    /// Parses the address from a BlueZ device path element, `dev_00_AA_01_00_00_00`.
    public init?(bluezPathElement element: String) {
        guard element.hasPrefix("dev_") else { return nil }
        self.init(String(element.dropFirst(4)).replacing("_", with: ":"))
    }

    /// `00:AA:01:00:00:00`.
    public var description: String {
        bytes.map { b in
            let s = String(b, radix: 16, uppercase: true)
            return b < 16 ? "0" + s : s
        }.joined(separator: ":")
    }

    /// `dev_00_AA_01_00_00_00`, the element BlueZ uses in device object paths.
    public var bluezPathElement: String { "dev_" + description.replacing(":", with: "_") }

    /// Orders addresses by their bytes.
    public static func < (a: BluetoothAddress, b: BluetoothAddress) -> Bool { a.bytes.lexicographicallyPrecedes(b.bytes) }
}

/// How a user names an adapter: by kernel name (`hci0`, which can change when the adapter
/// re-appears) or by address (stable).
public enum AdapterSelector: Sendable, Hashable, CustomStringConvertible {
    /// `hciN`.
    case name(String)
    /// The adapter's address.
    case address(BluetoothAddress)

    /// Parses `hciN` or an address; nil when it is neither.
    public init?(_ text: String) {
        let lower = text.lowercased()
        if lower.hasPrefix("hci") {
            let digits = lower.dropFirst(3)
            guard !digits.isEmpty, digits.count <= 5, digits.allSatisfy({ $0.isASCII && $0.isNumber }), let n = Int(digits) else { return nil }
            self = .name("hci\(n)")
        } else if let a = BluetoothAddress(text) {
            self = .address(a)
        } else {
            return nil
        }
    }

    /// What a registration made through `selector` asks for when it registers again: the
    /// controller first chosen, by address, so it follows that controller to whatever hciN it
    /// comes back under (and never lands on another controller that took its old name). No
    /// selector (the first adapter) stays none.
    public static func following(_ selector: AdapterSelector?, chosen: BluetoothAddress) -> AdapterSelector? {
        selector == nil ? nil : .address(chosen)
    }

    /// `hci0` or the address.
    public var description: String {
        switch self {
        case .name(let n): n
        case .address(let a): a.description
        }
    }
}
