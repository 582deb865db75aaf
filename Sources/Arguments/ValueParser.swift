/// A typed command-line value, after validation.
public enum ArgumentValue: Sendable, Hashable {
    /// Text.
    case string(String)
    /// An integer.
    case int(Int)
    /// A floating-point number.
    case double(Double)
    /// A flag's presence.
    case bool(Bool)
}

/// Why a value was rejected: a short reason such as "expected an integer".
public struct ValueError: Error, Sendable, Equatable {
    /// The reason, shown after "invalid value 'x' for '--opt <v>': ".
    public var reason: String

    /// Creates an error with `reason`.
    public init(_ reason: String) {
        self.reason = reason
    }
}

/// What a shell completion offers for a value, beyond `ValueParser.choices`.
///
/// Declared with the value, so completions generated from a command tree cannot forget a
/// new option that takes a file or an adapter.
public enum CompletionKind: Sendable, Equatable {
    /// Free text: nothing to offer.
    case none
    /// A file or directory path.
    case file
    /// Values the program lists at completion time, by a name the generator knows
    /// (for `peerlink`: "adapter", "uuid").
    case dynamic(String)
}

/// Checks and converts the text of an option value or positional argument.
public struct ValueParser: Sendable {
    /// Shown in help after the option's text, e.g. "values: on, off" (may be empty).
    public var helpNote: String
    /// The accepted values, for choices.
    public var choices: [String]?
    /// What shell completion offers for the value (choices are offered whatever this says).
    public var completion: CompletionKind = .none
    private let transform: @Sendable (String) throws(ValueError) -> ArgumentValue

    /// A parser from a closure; `helpNote` is appended to help lines in parentheses.
    public init(helpNote: String = "", choices: [String]? = nil, _ transform: @escaping @Sendable (String) throws(ValueError) -> ArgumentValue) {
        self.helpNote = helpNote
        self.choices = choices
        self.transform = transform
    }

    /// Converts `text`, or throws the reason it is invalid.
    public func parse(_ text: String) throws(ValueError) -> ArgumentValue {
        try transform(text)
    }

    /// The same parser, completed as `kind` by shells.
    public func completing(_ kind: CompletionKind) -> ValueParser {
        var copy = self
        copy.completion = kind
        return copy
    }

    /// Any text, stored as `.string`.
    public static let string = ValueParser { text throws(ValueError) in .string(text) }

    /// A non-empty text, stored as `.string`.
    public static let nonEmptyString = ValueParser { text throws(ValueError) in
        guard !text.isEmpty else { throw ValueError("must not be empty") }
        return .string(text)
    }

    /// A decimal integer, optionally within `range`, stored as `.int`.
    public static func int(in range: ClosedRange<Int>? = nil) -> ValueParser {
        ValueParser(helpNote: range.map { "\($0.lowerBound)-\($0.upperBound)" } ?? "") { text throws(ValueError) in
            guard let n = Int(text) else { throw ValueError("expected an integer") }
            if let range, !range.contains(n) {
                throw ValueError("must be between \(range.lowerBound) and \(range.upperBound)")
            }
            return .int(n)
        }
    }

    /// A decimal number, optionally within `range`, stored as `.double`.
    public static func double(in range: ClosedRange<Double>? = nil) -> ValueParser {
        ValueParser(helpNote: range.map { "\(format($0.lowerBound))-\(format($0.upperBound))" } ?? "") { text throws(ValueError) in
            guard let d = Double(text), d.isFinite else { throw ValueError("expected a number") }
            if let range, !range.contains(d) {
                throw ValueError("must be between \(format(range.lowerBound)) and \(format(range.upperBound))")
            }
            return .double(d)
        }
    }

    /// One of `values` (exact match), stored as `.string`.
    public static func choice(_ values: [String]) -> ValueParser {
        let list = values.joined(separator: ", ")
        return ValueParser(helpNote: "values: \(list)", choices: values) { text throws(ValueError) in
            guard values.contains(text) else { throw ValueError("expected one of: \(list)") }
            return .string(text)
        }
    }

    /// A custom conversion: `transform` returns the value or throws `ValueError` with a reason.
    public static func custom(helpNote: String = "", _ transform: @escaping @Sendable (String) throws(ValueError) -> ArgumentValue) -> ValueParser {
        ValueParser(helpNote: helpNote, transform)
    }

    /// "30" for 30.0, "0.5" for 0.5.
    public static func format(_ d: Double) -> String {
        if d.rounded() == d, abs(d) < 1e15 { return String(Int(d)) }
        return String(d)
    }
}
