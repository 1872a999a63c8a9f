import CAuthProxyShims

/// The glibc malloc policy of `authproxy serve` (see docs/SOAK.md for the measurements behind it).
///
/// glibc raises its mmap threshold each time a block it had mmapped is freed (up to 32 MiB), and the trim
/// threshold with it (twice that). The proxy's large buffers (a request body's replay copy grows to 1 MiB, a
/// connection's body buffer to 512 KiB, both by doubling) push it to 2 MiB within minutes; from then on every
/// such buffer comes from a malloc arena, and each arena keeps up to 4 MiB of freed memory at its top instead
/// of giving it back. glibc makes one arena per thread (up to 8 × cores), and libdispatch adds threads after
/// any stall, so RSS crept up with the thread count although the heap in use stayed at 2–5 MB: 33 → 68 MB in
/// a soak. A fixed threshold keeps large blocks mmapped (returned to the system when freed) and the trim
/// threshold at its 128 KiB default. Large blocks are allocated once per body or connection, not per chunk,
/// so the extra mmap/munmap calls are a few per second at most.
public enum MallocTuning {
    public static let mmapThreshold: Int32 = 128 * 1024

    /// Applies the policy unless `MALLOC_MMAP_THRESHOLD_` or `GLIBC_TUNABLES` sets the threshold (the operator's
    /// setting wins). Returns 1 when applied, 0 when left to the environment, -1 when not possible.
    @discardableResult
    public static func apply() -> Int32 { ap_malloc_fix_mmap_threshold(mmapThreshold) }
}
