import Testing
@testable import Control

/// Replays inputs through `LineFramer` in every chunking and checks the lines never change.
@Suite struct LineFramerTests {
    /// The outcome of feeding `chunks` and draining after each one.
    private enum Item: Equatable {
        case line(String)
        case tooLong
    }

    private func run(_ chunks: [[UInt8]], maxLineBytes: Int = 1_048_576) -> [Item] {
        var framer = LineFramer(maxLineBytes: maxLineBytes)
        var items: [Item] = []
        for chunk in chunks {
            framer.append(chunk)
            while true {
                do {
                    guard let line = try framer.nextLine() else { break }
                    items.append(.line(String(decoding: line, as: UTF8.self)))
                } catch {
                    #expect(error == .lineTooLong(limit: maxLineBytes))
                    items.append(.tooLong)
                }
            }
            #expect(framer.bufferedByteCount <= maxLineBytes + chunk.count + 1)
        }
        return items
    }

    /// Splits `bytes` at the offsets whose bit is set in `mask` (bit i = split after byte i).
    private func split(_ bytes: [UInt8], mask: Int) -> [[UInt8]] {
        var chunks: [[UInt8]] = []
        var start = 0
        for i in 0..<(bytes.count - 1) where mask & (1 << i) != 0 {
            chunks.append(Array(bytes[start...i]))
            start = i + 1
        }
        chunks.append(Array(bytes[start...]))
        return chunks
    }

    @Test(arguments: [
        "a\nbc\r\n\nde\nfg",  // 12 bytes: LF, CRLF, an empty line, a trailing partial line
        "{}\n[1]\r\n\r\n\"\"",
        "\r\r\n\n\nx\n\ry\n",
    ])
    func everySplitPointSubsetYieldsTheSameLines(input: String) {
        let bytes = Array(input.utf8)
        let expected = run([bytes])
        for mask in 0..<(1 << (bytes.count - 1)) {
            #expect(run(split(bytes, mask: mask)) == expected, "mask \(mask)")
        }
    }

    @Test func shortInputLines() {
        #expect(run([Array("a\nbc\r\n\nd\ne".utf8)]) == [.line("a"), .line("bc"), .line(""), .line("d")])
        #expect(run([Array("\r\r\n".utf8)]) == [.line("\r")])
    }

    @Test func everySingleSplitPointOfLongerInputs() {
        let longer = (0..<40).map { #"{"jsonrpc":"2.0","id":\#($0),"method":"daemon.status"}"# }.joined(separator: "\n") + "\n"
        let utf8 = "héllo 😀\r\n日本語\n" + String(repeating: "x", count: 300) + "\n"
        for input in [longer, utf8] {
            let bytes = Array(input.utf8)
            let expected = run([bytes])
            #expect(expected.count == input.filter { $0 == "\n" || $0 == "\r\n" }.count)
            for cut in 1..<bytes.count {
                #expect(run([Array(bytes[..<cut]), Array(bytes[cut...])]) == expected)
            }
            #expect(run(bytes.map { [$0] }) == expected)
        }
    }

    @Test func tooLongLinesInEveryChunking() {
        // limit 4: "abcd" fits, "abcde" does not; "abcd\r\n" fits.
        let input = Array("ab\nabcde\nabcd\r\nabcdefghij\nxy\nabcdefgh".utf8)
        let expected: [Item] = [.line("ab"), .tooLong, .line("abcd"), .tooLong, .line("xy"), .tooLong]
        #expect(run([input], maxLineBytes: 4) == expected)
        for cut in 1..<input.count {
            #expect(run([Array(input[..<cut]), Array(input[cut...])], maxLineBytes: 4) == expected, "cut \(cut)")
        }
        #expect(run(input.map { [$0] }, maxLineBytes: 4) == expected)
        for size in 2...7 {
            let chunks = stride(from: 0, to: input.count, by: size).map { Array(input[$0..<min($0 + size, input.count)]) }
            #expect(run(chunks, maxLineBytes: 4) == expected, "chunk size \(size)")
        }
    }

    @Test func tooLongIsReportedBeforeTheNewlineArrives() throws {
        var framer = LineFramer(maxLineBytes: 1024)
        framer.append([UInt8](repeating: 0x61, count: 1000))
        #expect(try framer.nextLine() == nil)
        framer.append([UInt8](repeating: 0x61, count: 100))
        #expect(throws: LineFramer.Failure.lineTooLong(limit: 1024)) { try framer.nextLine() }
        #expect(framer.bufferedByteCount == 0)
        // The rest of the long line is dropped as it arrives, never buffered.
        for _ in 0..<160 {
            framer.append([UInt8](repeating: 0x61, count: 65_536))  // 10 MiB in total
            #expect(try framer.nextLine() == nil)
            #expect(framer.bufferedByteCount == 0)
        }
        framer.append(Array("aaa\nnext\n".utf8))
        #expect(try framer.nextLine() == Array("next".utf8))
        #expect(try framer.nextLine() == nil)
    }

    @Test func manyLinesInBigBuffersAreLinear() throws {
        // 100k lines appended as one buffer; quadratic front-removal would take minutes.
        let line = Array(#"{"jsonrpc":"2.0","method":"event","params":{}}"#.utf8) + [0x0A]
        var big: [UInt8] = []
        for _ in 0..<100_000 { big.append(contentsOf: line) }
        var framer = LineFramer()
        framer.append(big)
        var count = 0
        while try framer.nextLine() != nil { count += 1 }
        #expect(count == 100_000)
        #expect(framer.bufferedByteCount == 0)
    }

    @Test func bufferedByteCountTracksThePartialLine() throws {
        var framer = LineFramer()
        framer.append(Array("abc\nde".utf8))
        #expect(framer.bufferedByteCount == 6)
        #expect(try framer.nextLine() == Array("abc".utf8))
        #expect(framer.bufferedByteCount == 2)
        #expect(try framer.nextLine() == nil)
        framer.append(Array("f\n".utf8))
        #expect(try framer.nextLine() == Array("def".utf8))
        #expect(framer.bufferedByteCount == 0)
    }
}
