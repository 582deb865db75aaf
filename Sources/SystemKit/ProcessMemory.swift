internal import CEpoll

/// How the process's allocator gives memory back.
public enum ProcessMemory {
    /// Keeps up to `bytes` of freed heap memory for reuse instead of handing it back to the
    /// kernel at every free (glibc trims the top of a heap once more than 128 KiB is free
    /// there). Returns whether glibc took the setting.
    ///
    /// Why the daemon wants it: a transfer allocates a 64 KiB chunk, and frees it on another
    /// thread, thousands of times a second. With glibc's default nearly every chunk came from
    /// fresh pages: 172,000 page faults for 1 GiB received (`perf stat`), a sixth of the
    /// receiver's CPU; with 4 MiB kept, none, at the same peak RSS. Setting it also fixes
    /// glibc's mmap threshold at its default (128 KiB) instead of letting it grow.
    @discardableResult
    public static func keepFreed(upTo bytes: Int) -> Bool {
        peerlink_malloc_trim_threshold(Int32(clamping: bytes)) == 1
    }
}
