import Testing

/// Keeps tests that allocate tens of megabytes away from tests that measure the process's
/// resident memory.
///
/// Swift Testing runs suites in parallel in one process, so a leak test that compares RSS
/// before and after its loop also counts whatever a concurrent suite allocated meanwhile (a
/// 16 MiB peer message, a stream of a thousand messages): malloc rarely gives such memory
/// back, and the leak test failed for allocations that were not its own. The measured part
/// runs alone against the heavy ones instead: `.memoryHeavy` suites hold the gate shared,
/// `MemoryMeasurement.exclusive` holds it alone. The bound the leak test checks is unchanged.
public enum MemoryMeasurement {
    /// Runs `body` (a measurement) while no `.memoryHeavy` test runs.
    public static func exclusive<T>(_ body: () async throws -> T) async rethrows -> T {
        await gate.lock(exclusive: true)
        do {
            let r = try await body()
            await gate.unlock(exclusive: true)
            return r
        } catch {
            await gate.unlock(exclusive: true)
            throw error
        }
    }

    static let gate = Gate()

    /// A readers-writer lock that lets a waiting writer in before new readers (so a run of
    /// heavy suites cannot keep the measurement waiting to the end of the run).
    actor Gate {
        private var readers = 0
        private var writing = false
        private var writersWaiting: [CheckedContinuation<Void, Never>] = []
        private var readersWaiting: [CheckedContinuation<Void, Never>] = []

        func lock(exclusive: Bool) async {
            if exclusive {
                if writing || readers > 0 || !writersWaiting.isEmpty {
                    await withCheckedContinuation { writersWaiting.append($0) }
                } else {
                    writing = true
                }
            } else {
                if writing || !writersWaiting.isEmpty {
                    await withCheckedContinuation { readersWaiting.append($0) }
                } else {
                    readers += 1
                }
            }
        }

        func unlock(exclusive: Bool) {
            if exclusive { writing = false } else { readers -= 1 }
            guard !writing, readers == 0 else { return }
            if !writersWaiting.isEmpty {
                // The lock passes to the writer directly: `writing` stays set for it.
                writing = true
                writersWaiting.removeFirst().resume()
            } else {
                readers += readersWaiting.count
                for r in readersWaiting { r.resume() }
                readersWaiting.removeAll()
            }
        }
    }
}

/// A suite or test that measures the process's memory: it runs while no `.memoryHeavy` one does.
public struct MemoryMeasurementTrait: SuiteTrait, TestTrait, TestScoping {
    public var isRecursive: Bool { false }

    public func provideScope(for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void) async throws {
        try await MemoryMeasurement.exclusive { try await function() }
    }
}

extension Trait where Self == MemoryMeasurementTrait {
    /// This suite compares resident memory before and after: keep memory-heavy suites out.
    public static var measuresMemory: Self { MemoryMeasurementTrait() }
}

/// A suite or test that allocates much memory: it runs while no memory measurement does.
public struct MemoryHeavyTrait: SuiteTrait, TestTrait, TestScoping {
    public var isRecursive: Bool { false }

    public func provideScope(for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void) async throws {
        await MemoryMeasurement.gate.lock(exclusive: false)
        do {
            try await function()
        } catch {
            await MemoryMeasurement.gate.unlock(exclusive: false)
            throw error
        }
        await MemoryMeasurement.gate.unlock(exclusive: false)
    }
}

extension Trait where Self == MemoryHeavyTrait {
    /// This suite allocates tens of megabytes: keep it apart from memory measurements.
    public static var memoryHeavy: Self { MemoryHeavyTrait() }
}
