/// Polls `condition` every 5 ms until it holds or `timeout` passes; returns whether it held.
/// For what a test cannot be told about (a file's last write, a count in another process):
/// the timeout bounds a failure, it is not a timing assertion.
public func eventually(timeout: Duration = .seconds(5), _ condition: () async throws -> Bool) async rethrows -> Bool {
    let deadline = ContinuousClock.now + timeout
    repeat {
        if try await condition() { return true }
        try? await Task.sleep(for: .milliseconds(5))
    } while ContinuousClock.now < deadline
    return try await condition()
}
