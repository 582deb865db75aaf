import Foundation
import Synchronization
import SystemKit
import Testing
@testable import Logging

@Suite struct StderrFormatTests {
    private func line(_ message: String, _ metadata: [String: String] = [:],
                      level: LogLevel = .info, label: String = "peerlinkd.control") -> String {
        StderrLogHandler.format(LogRecord(level: level, label: label, message: message, metadata: metadata))
    }

    @Test func journaldPrefixLabelMessageAndSortedMetadata() {
        #expect(line("client connected", ["peer.pid": "42", "client.id": "3"])
            == "<6>peerlinkd.control: client connected client.id=3 peer.pid=42\n")
        #expect(line("boom", level: .error, label: "x") == "<3>x: boom\n")
        #expect(line("y", level: .debug, label: "x") == "<7>x: y\n")
        #expect(line("no label", level: .warning, label: "") == "<4>no label\n")
    }

    @Test func valuesNeedingQuotesAreQuotedAndEscaped() {
        #expect(line("m", ["k": "two words"]) == "<6>peerlinkd.control: m k=\"two words\"\n")
        #expect(line("m", ["k": ""]) == "<6>peerlinkd.control: m k=\"\"\n")
        #expect(line("m", ["k": "a=b"]) == "<6>peerlinkd.control: m k=\"a=b\"\n")
        #expect(line("m", ["k": #"say "hi""#]) == #"<6>peerlinkd.control: m k="say \"hi\""\#n"#)
        #expect(line("m", ["k": #"C:\dir"#]) == #"<6>peerlinkd.control: m k="C:\\dir""# + "\n")
        #expect(line("m", ["k": "a\nb\tc\u{1}"]) == #"<6>peerlinkd.control: m k="a\nb\tc\x01""# + "\n")
        #expect(line("m", ["path": "/run/peerlink/control.sock", "n": "-1.5"])
            == "<6>peerlinkd.control: m n=-1.5 path=/run/peerlink/control.sock\n")
        #expect(line("m", ["k": "héllo"]) == "<6>peerlinkd.control: m k=héllo\n")
    }

    @Test func keysAreMadeSafe() {
        #expect(line("m", ["bad key=": "v"]) == "<6>peerlinkd.control: m bad_key_=v\n")
    }

    @Test func messageNewlinesAreEscapedSoOneRecordIsOneLine() {
        let text = line("first\nsecond\r\nthird\u{7F}", ["k": "line1\nline2"])
        #expect(text == #"<6>peerlinkd.control: first\nsecond\r\nthird\x7F k="line1\nline2""# + "\n")
        #expect(text.filter { $0 == "\n" || $0 == "\r\n" }.count == 1)
        #expect(line("tab\there") == "<6>peerlinkd.control: tab\there\n")
    }

    @Test func timestampsAreISO8601UTC() {
        let record = LogRecord(level: .notice, label: "d", message: "m",
                               date: Date(timeIntervalSince1970: 1_700_000_000.25))
        #expect(StderrLogHandler.format(record, timestamps: true)
            == "<5>2023-11-14T22:13:20.250Z d: m\n")
    }

    @Test func writesWholeLinesFromManyThreads() async throws {
        var ends: [Int32] = [-1, -1]
        #expect(pipe(&ends) == 0)
        try setCloseOnExec(ends[0])
        try setCloseOnExec(ends[1])
        let handler = StderrLogHandler(timestamps: false, output: ends[1])
        let logger = Logger(label: "t", level: .debug, handler: handler)
        let perTask = 200, tasks = 8
        // The reader is a thread of its own, started before any write: the writers fill the
        // pipe (240 KB through 64 KB) and block in write(2), and on Swift's pool (two threads
        // on a two-core machine) a reader task queued behind them would never run.
        let read = Mutex<[UInt8]>([])
        let drained = DispatchSemaphore(value: 0)
        let readEnd = ends[0]
        Thread {
            var buffer = [UInt8](repeating: 0, count: 65_536)
            while true {
                let n = buffer.withUnsafeMutableBytes { Glibc.read(readEnd, $0.baseAddress, $0.count) }
                if n > 0 { read.withLock { $0 += buffer[0..<n] } } else if n == 0 || errno != EINTR { break }
            }
            drained.signal()
        }.start()
        await withTaskGroup(of: Void.self) { group in
            for t in 0..<tasks {
                group.addTask {
                    for i in 0..<perTask {
                        logger.info("record", ["task": "\(t)", "i": "\(i)", "pad": String(repeating: "x", count: 100)])
                    }
                }
            }
        }
        closeQuietly(ends[1])
        let ended = drained.wait(timeout: .now() + 30) == .success
        // Closed only once the reader has stopped: closed under a reader still in read(2), the
        // number could be given to another test's descriptor, which the reader would then drain.
        // On that failure path the read end is left open.
        if ended { closeQuietly(ends[0]) }
        #expect(ended, "the reader saw no end of file within 30 s")
        let text = String(decoding: read.withLock { $0 }, as: UTF8.self)
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false).dropLast()
        #expect(lines.count == perTask * tasks)
        for l in lines {
            #expect(l.hasPrefix("<6>t: record i="))
            #expect(l.contains(" pad=" + String(repeating: "x", count: 100) + " task="))
        }
    }
}
