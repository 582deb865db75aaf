import Foundation
import Testing
@testable import Logging

@Suite struct LogLevelTests {
    @Test func namesParseInAnyCase() {
        #expect(LogLevel(name: "ERROR") == .error)
        #expect(LogLevel(name: "warn") == .warning)
        #expect(LogLevel(name: "Warning") == .warning)
        #expect(LogLevel(name: "notice") == .notice)
        #expect(LogLevel(name: "info") == .info)
        #expect(LogLevel(name: "DeBuG") == .debug)
        #expect(LogLevel(name: "trace") == nil)
        #expect(LogLevel(name: "") == nil)
        for level in LogLevel.allCases {
            #expect(LogLevel(name: level.name) == level)
            #expect(level.description == level.name)
        }
    }

    @Test func orderIsByVerbosity() {
        #expect(LogLevel.error < .warning)
        #expect(LogLevel.warning < .notice)
        #expect(LogLevel.notice < .info)
        #expect(LogLevel.info < .debug)
        #expect(LogLevel.allCases.map(\.rawValue) == [3, 4, 5, 6, 7])
    }
}

@Suite struct LoggerTests {
    @Test func levelFiltersRecords() {
        let memory = MemoryLogHandler()
        let logger = Logger(label: "t", level: .notice, handler: memory)
        logger.debug("d")
        logger.info("i")
        logger.notice("n")
        logger.warning("w")
        logger.error("e")
        #expect(memory.records.map(\.message) == ["n", "w", "e"])
        #expect(memory.records.map(\.level) == [.notice, .warning, .error])
    }

    @Test func skippedRecordsDoNotBuildTheirMessage() {
        let memory = MemoryLogHandler()
        let logger = Logger(label: "t", level: .info, handler: memory)
        let built = Counter()
        logger.debug(built.next())
        #expect(built.value == 0)
        logger.info(built.next())
        #expect(built.value == 1)
    }

    @Test func defaultLevelIsInfo() {
        let memory = MemoryLogHandler()
        let logger = Logger(label: "t", handler: memory)
        #expect(logger.level == .info)
        logger.debug("hidden")
        logger.info("shown")
        #expect(memory.messages == ["shown"])
    }

    @Test func metadataMergesWithCallWinning() {
        let memory = MemoryLogHandler()
        let logger = Logger(label: "t", handler: memory).with("a", "1").with("b", "2")
        logger.info("m", ["b": "3", "c": "4"])
        #expect(memory.records.first?.metadata == ["a": "1", "b": "3", "c": "4"])
        #expect(logger.metadata == ["a": "1", "b": "2"])
    }

    @Test func childExtendsLabelAndKeepsTheRest() {
        let memory = MemoryLogHandler()
        let root = Logger(label: "peerlinkd", level: .debug, handler: memory).with("k", "v")
        let child = root.child("control")
        #expect(child.label == "peerlinkd.control")
        #expect(child.child("client").label == "peerlinkd.control.client")
        #expect(child.level == .debug)
        child.debug("x")
        #expect(memory.records.first?.label == "peerlinkd.control")
        #expect(memory.records.first?.metadata == ["k": "v"])
    }

    @Test func logWithExplicitLevel() {
        let memory = MemoryLogHandler()
        let logger = Logger(label: "t", level: .warning, handler: memory)
        logger.log(.warning, "w")
        logger.log(.info, "i")
        #expect(memory.messages == ["w"])
    }

    @Test func memoryHandlerClears() {
        let memory = MemoryLogHandler()
        let logger = Logger(label: "t", handler: memory)
        logger.info("one")
        logger.info("two")
        #expect(memory.records.count == 2)
        memory.clear()
        #expect(memory.records.isEmpty)
        logger.info("three")
        #expect(memory.messages == ["three"])
    }

    @Test func memoryHandlerIsSafeAcrossTasks() async {
        let memory = MemoryLogHandler()
        let logger = Logger(label: "t", handler: memory)
        await withTaskGroup(of: Void.self) { group in
            for task in 0..<8 {
                group.addTask {
                    for i in 0..<100 { logger.info("m", ["task": "\(task)", "i": "\(i)"]) }
                }
            }
        }
        #expect(memory.records.count == 800)
    }

    @Test func multiplexSendsToEveryHandler() {
        let a = MemoryLogHandler(), b = MemoryLogHandler()
        let logger = Logger(label: "t", handler: MultiplexLogHandler([a, b]))
        logger.info("both")
        #expect(a.messages == ["both"])
        #expect(b.messages == ["both"])
    }

    @Test func dynamicLevelAppliesToEveryCopy() {
        let memory = MemoryLogHandler()
        let gate = DynamicLevelLogHandler(wrapping: memory, level: .info)
        let root = Logger(label: "root", level: .debug, handler: gate)
        let child = root.child("svc")
        let built = Counter()
        child.debug(built.next())
        #expect(built.value == 0)
        gate.level = .debug
        child.debug(built.next())
        root.info("i")
        #expect(built.value == 1)
        gate.level = .error
        root.warning("w")
        root.error("e")
        #expect(memory.messages == ["0", "i", "e"])
    }

    @Test func multiplexHonoursEachHandlersLevel() {
        let loud = MemoryLogHandler(), quiet = MemoryLogHandler()
        let handler = MultiplexLogHandler([loud, DynamicLevelLogHandler(wrapping: quiet, level: .error)])
        let logger = Logger(label: "t", level: .debug, handler: handler)
        logger.debug("d")
        logger.error("e")
        #expect(loud.messages == ["d", "e"])
        #expect(quiet.messages == ["e"])
    }
}

/// Counts how often a message autoclosure was evaluated.
final class Counter: Sendable {
    private let count = Mutex(0)
    var value: Int { count.withLock { $0 } }
    func next() -> String { count.withLock { n in defer { n += 1 }; return "\(n)" } }
}

import Synchronization
