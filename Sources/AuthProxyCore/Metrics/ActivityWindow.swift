/// Events counted over the last few minutes (the status page's "requests and rejections in the last 5 min"):
/// a ring of fixed-width time buckets, so memory is constant however many events arrive. A pure value: every
/// call takes `now` (milliseconds, any monotonic or wall clock, as long as one clock is used throughout).
struct ActivityWindow: Sendable, Equatable {
    /// Width of one bucket, and how many the window spans.
    static let bucketMillis: Int64 = 10_000
    static let bucketCount = 30

    /// Which bucket-sized time slot each bucket holds (`now / bucketMillis`); a stale slot counts as empty.
    private var slots = [Int64](repeating: -1, count: bucketCount)
    private var counts = [Int](repeating: 0, count: bucketCount)

    init() {}

    /// The span the window covers, in milliseconds (5 minutes).
    static var spanMillis: Int64 { bucketMillis * Int64(bucketCount) }

    mutating func add(_ n: Int = 1, now: Int64) {
        let slot = now / Self.bucketMillis
        let i = Int(slot % Int64(Self.bucketCount))
        if slots[i] != slot {
            slots[i] = slot
            counts[i] = 0
        }
        counts[i] += n
    }

    /// Events in the buckets that overlap the last ``spanMillis`` before `now`.
    func total(now: Int64) -> Int {
        let current = now / Self.bucketMillis
        var sum = 0
        for i in 0..<Self.bucketCount
        where slots[i] >= 0 && current - slots[i] < Int64(Self.bucketCount) && slots[i] <= current {
            sum += counts[i]
        }
        return sum
    }
}
