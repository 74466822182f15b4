import CChecksum

/// Settings of the C allocator for a long-running process of the bus (a queue, a role, a load
/// driver), made once at its start.
///
/// Why: glibc's allocator grows a thread's heap a page at a time (an `mprotect` system call and a
/// page fault per 4 KiB) and gives freed memory back at the top of the heap as soon as 128 KiB are
/// free, to fault it in again at the next burst. A profile of the queue under `sksim bench bus`
/// charged 12 % of its samples to that (`sysmalloc`, `mprotect`, page faults); docs/performance.md,
/// "The allocator". Growing 16 MiB at a time and keeping up to 64 MiB of freed memory takes it
/// away. Neither costs resident memory: reserved pages are touched only when used, and what is
/// kept is memory the process just used. Blocks of 4 MiB and more still come from `mmap`.
public enum MemoryAllocator {
    /// Freed memory kept at the top of a heap rather than given back to the kernel.
    public static let keptFreeBytes: Int32 = 64 << 20
    /// How far a heap grows beyond what an allocation needs.
    public static let growthBytes: Int32 = 16 << 20
    /// Allocations of at least this size get their own mapping.
    public static let ownMappingBytes: Int32 = 4 << 20

    /// Applies the settings; idempotent. Returns false where the allocator is not glibc's (nothing
    /// changed then, which only costs the time described above).
    @discardableResult
    public static func configureForLongRunningProcess() -> Bool {
        sksim_configure_allocator(keptFreeBytes, growthBytes, ownMappingBytes) == 0
    }
}
