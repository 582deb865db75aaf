import FoundationEssentials
import Synchronization

/// Receives records from a `Logger` and writes or stores them.
///
/// Handlers are shared between threads and must be safe to call concurrently.
public protocol LogHandler: Sendable {
    /// Handles one record that passed the logger's level check.
    func log(_ record: LogRecord)

    /// The most verbose level the handler currently accepts. `Logger` checks it before building
    /// the message, so a handler whose level changes at run time (see `DynamicLevelLogHandler`)
    /// keeps filtered records cheap. Defaults to `.debug` (accept everything).
    var maximumLevel: LogLevel { get }
}

extension LogHandler {
    /// Accepts every level.
    public var maximumLevel: LogLevel { .debug }
}

/// Keeps records in memory, for tests: one handler per test, inspected after the fact.
public final class MemoryLogHandler: LogHandler {
    private let storage = Mutex<[LogRecord]>([])

    /// Creates an empty handler.
    public init() {}

    /// Stores `record`.
    public func log(_ record: LogRecord) {
        storage.withLock { $0.append(record) }
    }

    /// Every record logged so far, oldest first.
    public var records: [LogRecord] {
        storage.withLock { $0 }
    }

    /// The messages of every record so far, oldest first.
    public var messages: [String] {
        records.map(\.message)
    }

    /// Forgets every record.
    public func clear() {
        storage.withLock { $0.removeAll() }
    }
}

/// Sends each record to several handlers in order.
public struct MultiplexLogHandler: LogHandler {
    private let handlers: [any LogHandler]

    /// Creates a handler fanning out to `handlers`.
    public init(_ handlers: [any LogHandler]) {
        self.handlers = handlers
    }

    /// Passes `record` to every handler that accepts its level.
    public func log(_ record: LogRecord) {
        for handler in handlers where record.level <= handler.maximumLevel {
            handler.log(record)
        }
    }

    /// The most verbose level any of the handlers accepts.
    public var maximumLevel: LogLevel {
        handlers.map(\.maximumLevel).max() ?? .error
    }
}

/// Wraps a handler with a level that can be changed while the program runs, e.g. on SIGHUP.
///
/// Loggers are values copied into every service, so changing one copy's `level` changes
/// nothing elsewhere. Give the root logger `level: .debug` and this handler instead; setting
/// `level` here then applies at once to every logger sharing it, and records above it are
/// still skipped before their message is built.
public final class DynamicLevelLogHandler: LogHandler {
    private let inner: any LogHandler
    private let raw: Atomic<Int>

    /// Creates a handler passing records at `level` or more severe to `inner`.
    public init(wrapping inner: any LogHandler, level: LogLevel) {
        self.inner = inner
        self.raw = Atomic(level.rawValue)
    }

    /// The current level; safe to set from any thread.
    public var level: LogLevel {
        get { LogLevel(rawValue: raw.load(ordering: .relaxed)) ?? .debug }
        set { raw.store(newValue.rawValue, ordering: .relaxed) }
    }

    /// The current level, bounded by the wrapped handler's.
    public var maximumLevel: LogLevel {
        min(level, inner.maximumLevel)
    }

    /// Passes `record` on when its level is accepted.
    public func log(_ record: LogRecord) {
        if record.level <= maximumLevel { inner.log(record) }
    }
}
