internal import COpenSSL

/// Where a `TLSConnection`'s SSL reads the peer's ciphertext and writes its own: Swift
/// arrays behind a BIO of this module's (`CiphertextBIO`), instead of a pair of memory BIOs.
///
/// Why not memory BIOs: each copied every byte once more on its way (fed bytes into the BIO's
/// buffer, then into OpenSSL's record buffer; records out of OpenSSL into the BIO's buffer,
/// then out into an array), and zeroed the memory it grew into: about a tenth of both
/// daemons' CPU moving 64 KiB messages with TLS. Here a fed array is kept as it is until
/// OpenSSL has read it, and records are written straight into the array `takeOutput` hands
/// over.
///
/// Confinement: used only inside the owning connection's calls (one thread at a time).
final class CiphertextBuffers {
    /// Fed arrays not yet read through, oldest first; `offset` into the first.
    private var input: [[UInt8]] = []
    private var offset = 0
    /// Bytes fed and not yet read.
    private(set) var pendingInput = 0
    /// Ciphertext written and not yet taken.
    private var output: [UInt8] = []

    /// Queues `bytes` for OpenSSL to read (no copy).
    func feed(_ bytes: [UInt8]) {
        guard !bytes.isEmpty else { return }
        input.append(bytes)
        pendingInput += bytes.count
    }

    /// Copies up to `count` fed bytes to `buffer`; the number copied (0 when none wait).
    func read(into buffer: UnsafeMutableRawPointer, count: Int) -> Int {
        var copied = 0
        while copied < count, let first = input.first {
            let n = min(count - copied, first.count - offset)
            first.withUnsafeBytes { (buffer + copied).copyMemory(from: $0.baseAddress! + offset, byteCount: n) }
            copied += n
            offset += n
            if offset == first.count {
                input.removeFirst()
                offset = 0
            }
        }
        pendingInput -= copied
        return copied
    }

    /// Room for `bytes` more of output without growing step by step (a 64 KiB write is four
    /// records, which would otherwise reallocate the array twice); at least doubled when it
    /// grows, so writes made one after another before a take stay linear.
    func reserveOutput(_ bytes: Int) {
        let needed = output.count + bytes
        if output.capacity < needed { output.reserveCapacity(max(needed, 2 * output.capacity)) }
    }

    /// Drops the output written past its first `count` bytes.
    func dropOutput(from count: Int) { output.removeLast(max(0, output.count - count)) }

    /// Appends a record (or part of one) OpenSSL wrote.
    func write(_ bytes: UnsafeRawBufferPointer) { output.append(contentsOf: bytes) }

    /// Bytes written and not yet taken.
    var pendingOutput: Int { output.count }

    /// Everything written since the last call, leaving nothing.
    func takeOutput() -> [UInt8] {
        defer { output = [] }
        return output
    }
}

/// The BIO method over `CiphertextBuffers`: reads say "retry" when nothing waits (as a
/// memory BIO set up for a network connection does; EOF would fail the connection), writes
/// always take everything, and the BIO holds one reference to its buffers, given back when
/// OpenSSL frees it.
enum CiphertextBIO {
    /// A new BIO over `buffers` (its owner frees it: `SSL_set_bio` hands it to the SSL).
    static func make(_ buffers: CiphertextBuffers) throws(TLSError) -> OpaquePointer {
        let method = try method.get()
        let bio = try check(openSSL.BIO_new(method), "BIO_new(peerlink ciphertext)")
        openSSL.BIO_set_data(bio, Unmanaged.passRetained(buffers).toOpaque())
        openSSL.BIO_set_init(bio, 1)
        return bio
    }

    /// The method, made once (it lives as long as the process). Unchecked: OpenSSL only reads
    /// a method once it is set up here.
    nonisolated(unsafe) private static let method: Result<OpaquePointer, TLSError> = {
        let index = openSSL.BIO_get_new_index()
        guard index > 0, let m = openSSL.BIO_meth_new(index | BIO_TYPE_SOURCE_SINK, "peerlink ciphertext") else {
            return .failure(OpenSSLErrors.error(.library, "BIO_meth_new"))
        }
        guard openSSL.BIO_meth_set_read_ex(m, read) == 1, openSSL.BIO_meth_set_write_ex(m, write) == 1,
              openSSL.BIO_meth_set_ctrl(m, control) == 1, openSSL.BIO_meth_set_destroy(m, destroy) == 1 else {
            return .failure(OpenSSLErrors.error(.library, "BIO_meth_set_*"))
        }
        return .success(m)
    }()

    /// What a read or write clears first (BIO_clear_retry_flags, a macro).
    private static let retryFlags = BIO_FLAGS_READ | BIO_FLAGS_WRITE | BIO_FLAGS_IO_SPECIAL | BIO_FLAGS_SHOULD_RETRY

    private static func buffers(_ bio: OpaquePointer?) -> CiphertextBuffers? {
        guard let bio, let data = openSSL.BIO_get_data(bio) else { return nil }
        return Unmanaged<CiphertextBuffers>.fromOpaque(data).takeUnretainedValue()
    }

    private static let read: @convention(c) (OpaquePointer?, UnsafeMutablePointer<CChar>?, Int, UnsafeMutablePointer<Int>?) -> Int32 = {
        bio, data, count, done in
        openSSL.BIO_clear_flags(bio, retryFlags)
        let n = data.flatMap { d in CiphertextBIO.buffers(bio)?.read(into: d, count: count) } ?? 0
        done?.pointee = n
        if n == 0 { openSSL.BIO_set_flags(bio, BIO_FLAGS_READ | BIO_FLAGS_SHOULD_RETRY) }
        return n > 0 ? 1 : 0
    }

    private static let write: @convention(c) (OpaquePointer?, UnsafePointer<CChar>?, Int, UnsafeMutablePointer<Int>?) -> Int32 = {
        bio, data, count, done in
        openSSL.BIO_clear_flags(bio, retryFlags)
        guard let data, let b = CiphertextBIO.buffers(bio) else { return 0 }
        b.write(UnsafeRawBufferPointer(start: data, count: count))
        done?.pointee = count
        return 1
    }

    /// What OpenSSL asks of a source/sink BIO: flush (nothing to do), and how much waits
    /// either way; anything else is "not supported" (0).
    private static let control: @convention(c) (OpaquePointer?, Int32, Int, UnsafeMutableRawPointer?) -> Int = {
        bio, command, _, _ in
        switch command {
        case BIO_CTRL_FLUSH: return 1
        case BIO_CTRL_PENDING: return CiphertextBIO.buffers(bio)?.pendingInput ?? 0
        case BIO_CTRL_WPENDING: return CiphertextBIO.buffers(bio)?.pendingOutput ?? 0
        default: return 0
        }
    }

    private static let destroy: @convention(c) (OpaquePointer?) -> Int32 = { bio in
        guard let bio, let data = openSSL.BIO_get_data(bio) else { return 1 }
        Unmanaged<CiphertextBuffers>.fromOpaque(data).release()
        openSSL.BIO_set_data(bio, nil)
        return 1
    }
}
