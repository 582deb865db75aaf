@testable import FuzzTargets
import TestSupport
import Testing

/// The `stream-table` target keeps what the opener wrote as runs of its byte pattern, not as
/// bytes: its check of the receiver's bytes must still find any byte out of place.
@Suite("stream-table target: what was written", .ownThreads, .memoryHeavy)
struct StreamTableTargetTests {
    /// The bytes a write of `count` starting at pattern index `start` gives (byte i is (start + i) mod 256).
    static func bytes(_ start: Int, _ count: Int) -> [UInt8] { (0..<count).map { UInt8(truncatingIfNeeded: start + $0) } }

    /// Three writes: 5 bytes from 10, none, 300 from 7, 4 from 250.
    static func written() -> (StreamTableTarget.Written, [UInt8]) {
        var w = StreamTableTarget.Written()
        var all: [UInt8] = []
        for (start, count) in [(10, 5), (3, 0), (7, 300), (250, 4)] {
            w.append(patternAt: start, count: count)
            all += bytes(start, count)
        }
        return (w, all)
    }

    @Test func everySliceOfWhatWasWrittenMatches() {
        let (w, all) = Self.written()
        #expect(w.count == all.count)
        for from in 0...all.count {
            for length in [0, 1, 2, 4, 5, 6, 300, 309] where from + length <= all.count {
                #expect(w.matches(Array(all[from..<(from + length)]), at: from), "\(from) + \(length)")
            }
        }
    }

    @Test func aByteOutOfPlaceOrPastTheEndDoesNotMatch() {
        let (w, all) = Self.written()
        for i in all.indices {
            var changed = all
            changed[i] &+= 1
            #expect(!w.matches(changed, at: 0), "byte \(i) changed")
            // Shifted by one: the stream's bytes in the wrong place.
            if i > 0 { #expect(!w.matches(Array(all[i...]), at: i - 1), "from \(i) at \(i - 1)") }
        }
        #expect(!w.matches([0], at: all.count), "a byte past the end")
        #expect(!w.matches(all + [0], at: 0), "one byte more than written")
        #expect(!StreamTableTarget.Written().matches([0], at: 0), "a byte on a stream nothing was written to")
    }
}
