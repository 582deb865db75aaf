import Foundation
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
        let pipe = Pipe()
        let handler = StderrLogHandler(timestamps: false, output: pipe.fileHandleForWriting.fileDescriptor)
        let logger = Logger(label: "t", level: .debug, handler: handler)
        let perTask = 200, tasks = 8
        let reader = Task.detached { () -> Data in
            pipe.fileHandleForReading.readDataToEndOfFile()
        }
        await withTaskGroup(of: Void.self) { group in
            for t in 0..<tasks {
                group.addTask {
                    for i in 0..<perTask {
                        logger.info("record", ["task": "\(t)", "i": "\(i)", "pad": String(repeating: "x", count: 100)])
                    }
                }
            }
        }
        try pipe.fileHandleForWriting.close()
        let text = String(decoding: await reader.value, as: UTF8.self)
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false).dropLast()
        #expect(lines.count == perTask * tasks)
        for l in lines {
            #expect(l.hasPrefix("<6>t: record i="))
            #expect(l.contains(" pad=" + String(repeating: "x", count: 100) + " task="))
        }
    }
}
