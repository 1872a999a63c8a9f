import Synchronization

/// The `daily_quota` counts of every credential in this process (one entry per credential with a quota; kept across
/// reloads in ``SharedServerState``).
final class DailyQuotas: Sendable {
    private let counts = Mutex<[String: DailyQuota]>([:])

    init() {}

    func take(credential: String, quota: Int, now: Int64) -> TokenBucket.Decision {
        counts.withLock { all in all[credential, default: DailyQuota()].take(quota: quota, now: now) }
    }

    /// Requests counted today (for `/status.json`).
    func used(credential: String, now: Int64) -> Int {
        counts.withLock { all in
            guard let q = all[credential], q.day == now / DailyQuota.secondsPerDay else { return 0 }
            return q.used
        }
    }
}
