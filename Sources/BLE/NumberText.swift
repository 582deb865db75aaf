/// Zero-padded numbers, the one place they are spelled: a passkey is six decimal digits
/// ("004821"), a handle or company id four hex digits ("0x002a"). (What `String(format:)`
/// gave, which needs all of Foundation.)
extension String {
    /// `value` in `radix` (lower-case digits), padded on the left with zeros to `width` digits.
    /// A negative value keeps its sign in front of the zeros.
    public init<T: BinaryInteger>(_ value: T, radix: Int = 10, zeroPaddedTo width: Int) {
        let digits = String(value.magnitude, radix: radix)
        let padding = String(repeating: "0", count: Swift.max(0, width - digits.count))
        self = (value < 0 ? "-" : "") + padding + digits
    }

    /// `value` with one decimal ("1.5"), rounded half away from zero.
    public init(oneDecimal value: Double) {
        let tenths = Int((value * 10).rounded())
        self = (tenths < 0 ? "-" : "") + "\(abs(tenths) / 10).\(abs(tenths) % 10)"
    }
}
