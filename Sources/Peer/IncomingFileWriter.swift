// Linux Dispatch has no Sendable annotations; its queues are thread-safe.
@preconcurrency import Dispatch

/// An `IncomingFile` written on a queue of its own, so the disk never holds up the
/// connection: the connection decrypts and decodes while the previous chunks are hashed,
/// written and, every `Inbox.Limits.syncInterval` bytes, flushed (which on an SD card can
/// take a good part of a second). Before, all of it ran on the connection's queue, and a
/// message, a ping or the peer's credit arriving behind a chunk waited for the disk.
///
/// Writes are asynchronous and reported in order; once a writer is more than
/// `ConnectionTransfers.writeAhead` behind, the connection holds the peer's window back until
/// it catches up, so what waits here stays bounded. Finishing (verify, flush, save) runs
/// after the writes before it and is reported the same way, so the connection goes on while
/// the file is flushed; so does suspending (the part recorded for a resume, a flush too), at
/// a session's end or a stall. Discarding waits for the writes before it, so it sees the
/// whole file: that is rare (a resource that ended early), and flushes nothing.
final class IncomingFileWriter: @unchecked Sendable {
    private let file: IncomingFile
    private let queue = DispatchQueue(label: "peerlink.inbox-writer")
    /// Set on the queue by the first failed write: later ones are skipped (the connection
    /// cancels the resource when it hears of the first), and a finish reports it.
    private var failure: InboxError?

    init(_ file: IncomingFile) { self.file = file }

    /// Appends `bytes` after those given before. `done` runs on the writer's queue once they
    /// are written: with the error when the write failed, nil otherwise (and for a write
    /// skipped after a failure: that failure was reported once).
    func write(_ bytes: [UInt8], done: @escaping @Sendable (InboxError?) -> Void) {
        queue.async { [self] in
            guard failure == nil else { return done(nil) }
            do throws(InboxError) {
                try file.write(bytes)
                done(nil)
            } catch {
                failure = error
                done(error)
            }
        }
    }

    /// Every byte came: once the writes before are done, verifies and saves the file
    /// (`IncomingFile.finish`, which flushes it: on an SD card that can take a good part of a
    /// second); `done` runs on the writer's queue with the file saved or why not (a write
    /// that failed before: that failure, the part removed).
    func finish(done: @escaping @Sendable (Result<ReceivedFile, InboxError>) -> Void) {
        queue.async { [self] in
            if let failure {
                // The DONE came before the connection heard of the failed write.
                file.discard()
                return done(.failure(failure))
            }
            do throws(InboxError) {
                done(.success(try file.finish()))
            } catch {
                done(.failure(error))
            }
        }
    }

    /// The transfer stopped and may resume: once the writes before are done, records what is
    /// on the disk (`IncomingFile.suspend`, a flush: on an SD card most of a second), without
    /// the caller waiting, for it holds the connection's lock. The part's key is free for
    /// another transfer of the same content (which waits for it: `Inbox.receive`) only once
    /// recorded; a stopping daemon waits for that too (`Inbox.openParts`).
    func suspend() {
        file.willSuspend()
        queue.async { [file] in file.suspend() }
    }

    /// The transfer is over without a file: once the writes before are done, the part goes.
    /// Returns the bytes it had.
    @discardableResult
    func discard() -> UInt64 {
        queue.sync {
            file.discard()
            return file.received
        }
    }
}
