import Foundation
import Testing

/// The threads test bodies run on (`.ownThreads`), apart from Swift's cooperative pool.
///
/// Many tests block their thread while they wait: a control client reading its next line
/// from a daemon process, a child process run to its end, a daemon stopped with SIGTERM. On
/// the cooperative pool (two threads on a two-core machine) two such waits stall every task
/// in the process: an in-process control server's handlers, a peer node's continuations, the
/// other suites' tests. A unit run was seen with every test stalled for 14 s, a control
/// server that never answered its test within 10 s, and peer sessions that ended while their
/// tests could not read. Here a blocked job costs only its own thread: a job that finds no
/// idle thread gets a new one (up to `maxThreads`; more jobs wait for one). Threads stay once
/// made (each one's stack and malloc arena, made while a leak test measures, counted as its
/// growth). The product's own tasks stay on the cooperative pool, where they run in the daemon.
public final class TestThreadPool: TaskExecutor, @unchecked Sendable {
    /// The pool every `.ownThreads` suite uses.
    public static let shared = TestThreadPool()

    /// At most this many threads.
    public let maxThreads: Int

    // All guarded by `condition`'s lock.
    private let condition = NSCondition()
    private var jobs: [UnownedJob] = []
    private var head = 0
    private var idle = 0
    private var threads = 0

    /// (`scripts/unit-tests.sh` runs 12 tests at once; a test's child tasks may take more.)
    public init(maxThreads: Int = 24) {
        self.maxThreads = maxThreads
    }

    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        condition.lock()
        jobs.append(job)
        // More jobs waiting than threads waiting for them: one more thread (an idle one,
        // signalled, takes one job; a second job before it woke needs another thread).
        if jobs.count - head > idle, threads < maxThreads {
            threads += 1
            Thread { [self] in work() }.start()
        }
        condition.signal()
        condition.unlock()
    }

    private func work() {
        // Named so that the unit-test watchdog's stack dump shows which threads are tests'
        // (Foundation's `Thread.name` does not reach the kernel's name here).
        try? "test-pool".write(toFile: "/proc/thread-self/comm", atomically: false, encoding: .utf8)
        condition.lock()
        while true {
            if head < jobs.count {
                let job = jobs[head]
                head += 1
                if head == jobs.count {
                    jobs.removeAll(keepingCapacity: true)
                    head = 0
                }
                condition.unlock()
                job.runSynchronously(on: asUnownedTaskExecutor())
                condition.lock()
                continue
            }
            idle += 1
            condition.wait()
            idle -= 1
        }
    }
}

/// Runs a suite's tests on `TestThreadPool.shared` instead of the cooperative pool (see
/// there). Their child tasks follow; tasks they start with `Task {}`, and the product's own,
/// stay on the cooperative pool. Recursive: Swift Testing gives a recursive suite trait each
/// test case to scope, never the suite itself (a suite's scope did not reach its tests).
///
/// Give such a suite `.memoryHeavy` too: the pool's threads, their stacks and malloc arenas,
/// are resident memory that a leak test running meanwhile counted as its own (39 MB). (Not
/// taken here, per test case: a test case waiting for the memory gate holds its place among
/// the tests running at once, and a leak suite holding the gate waited for places for its
/// own tests: a hang.)
public struct OwnThreadsTrait: SuiteTrait, TestTrait, TestScoping {
    public var isRecursive: Bool { true }

    public func provideScope(for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void) async throws {
        try await withTaskExecutorPreference(TestThreadPool.shared) { try await function() }
    }
}

extension Trait where Self == OwnThreadsTrait {
    /// This suite's tests may block their thread (a blocking socket read, a child process
    /// waited for): they run on threads of their own, not on the cooperative pool.
    public static var ownThreads: Self { OwnThreadsTrait() }
}
